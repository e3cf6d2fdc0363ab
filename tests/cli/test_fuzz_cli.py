"""Issue 16, fuzz: bill / prescribe / emit run in-process over generated flags, configs and recipes.

Whatever the input, a command ends with 0 (computed), 2 (bad input: one `Error: …` line) or 3
(`--check`, does not fit) — never "internal error", never a traceback — and every byte figure in
its JSON is a finite integer ≥ 0 (signed margins excepted). Hypothesis runs derandomized (the same
examples every run, so CI is stable) and bounded: a few seconds per property. For a longer hunt:
`MEMDOC_FUZZ_EXAMPLES=2000 pytest tests/test_fuzz_cli.py`.
"""

from __future__ import annotations

import json
import math
import os

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from memdoc.cli import app
from memdoc.resolve.models import catalog_config

pytestmark = pytest.mark.slow  # fuzzing: hypothesis runs each command over many generated inputs

runner = CliRunner()
FUZZ = settings(
    max_examples=int(os.environ.get("MEMDOC_FUZZ_EXAMPLES", 40)),
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

BASES = [
    "meta-llama/Llama-3.2-1B",
    "openai-community/gpt2",
    "Qwen/Qwen3-30B-A3B",
    "deepseek-ai/DeepSeek-V2-Lite",
    "mistralai/Mixtral-8x7B-v0.1",
    "tiiuae/falcon-7b",
    "google/gemma-2-2b",
    "microsoft/Phi-3-mini-4k-instruct",
]
CONFIG_KEYS = [
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "vocab_size",
    "intermediate_size",
    "head_dim",
    "max_position_embeddings",
    "num_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "decoder_sparse_step",
    "mlp_only_layers",
    "first_k_dense_replace",
    "kv_lora_rank",
    "q_lora_rank",
    "n_positions",
    "n_embd",
    "n_head",
    "tie_word_embeddings",
    "model_type",
    "new_decoder_architecture",
    "multi_query",
    "num_local_experts",
    "n_routed_experts",
]
PLAUSIBLE = st.one_of(st.integers(1, 64), st.sampled_from([128, 256, 1024, 4096, 32000]))
ODD = st.one_of(
    PLAUSIBLE,
    PLAUSIBLE,
    st.integers(-10, 10),
    st.integers(-(2**63), 2**63),
    st.sampled_from([0, 1, 2**31, 10**300, 1_000_000]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.text(max_size=5),
    st.lists(st.integers(-2, 50), max_size=4),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
# Signed by design: headroom / margin (negative when over), savings (a rung may cost memory).
SIGNED = {"headroom_bytes", "margin_bytes", "saved_bytes", "saves_bytes"}


def check(result) -> dict | list | None:
    assert result.exit_code in (0, 2, 3), (result.exit_code, result.output[-2000:])
    assert "internal error" not in result.output and "Traceback" not in result.output, result.output[-2000:]
    if result.exit_code == 2:
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert lines and lines[-1].startswith("Error: "), result.output[-2000:]
        return None
    try:
        data = json.loads(result.stdout)
    except ValueError:
        return None  # human output (emit without --json prints the config itself)
    _no_bad_bytes(data, "")
    return data


def _no_bad_bytes(node, key: str) -> None:
    if isinstance(node, dict):
        for k, v in node.items():
            _no_bad_bytes(v, str(k))
    elif isinstance(node, list):
        for v in node:
            _no_bad_bytes(v, key)
    elif isinstance(node, float):
        assert math.isfinite(node), (key, node)
    elif isinstance(node, int) and not isinstance(node, bool) and key not in SIGNED:
        byteish = key.endswith("bytes") or key in {
            "weights",
            "gradients",
            "optimizer",
            "activations",
            "other",
            "total",
            "peak_allocated",
            "peak_reserved",
            "process_total",
            "kv_cache",
        }
        assert not byteish or node >= 0, (key, node)


@FUZZ
@given(
    base=st.sampled_from(BASES),
    changes=st.dictionaries(st.sampled_from(CONFIG_KEYS), ODD, max_size=3),
    command=st.sampled_from(
        [
            ["bill", "--json"],
            ["bill", "--json", "--inference"],
            ["bill", "--json", "--max", "batch"],
            ["bill", "--json", "--method", "qlora", "--check"],
            ["emit", "--json", "--format", "axolotl"],
            ["prescribe", "--symptom", "startup-oom", "--json"],
        ]
    ),
)
def test_generated_configs(tmp_path_factory, base, changes, command):
    config = dict(catalog_config(base))
    config.update(changes)
    path = tmp_path_factory.mktemp("cfg") / "config.json"
    path.write_text(json.dumps(config))
    check(runner.invoke(app, [command[0], str(path), "--gpu", "24", "--seq", "128", *command[1:]]))


PLAN_FLAGS = {
    "--method": ["full", "lora", "qlora", "lorra"],
    "--precision": ["bf16", "fp16", "fp32", "amp-bf16", "amp-fp16"],
    "--optimizer": ["adamw", "adamw-fused", "adamw-8bit", "paged-adamw-8bit", "sgd", "adafactor", "lion"],
    "--checkpointing": ["none", "full", "selective"],
    "--attention": ["sdpa", "eager"],
    "--loss": ["hf", "fused"],
    "--shard": ["none", "zero1", "zero2", "zero3", "fsdp"],
    "--offload": ["none", "optimizer", "optimizer+params"],
    "--offload-to": ["cpu", "nvme"],
    "--lora-targets": ["q_proj,v_proj", "all-linear", "nope", ",", ""],
    "--gpu": ["24", "a100", "8xh100", "2x24gb", "0", "-1", "4070", "nan", "inf", "1e9", "rtx-4090", "x" * 300],
}
INT_FLAGS = ["--batch", "--seq", "--accum", "--gpus", "--nodes", "--lora-rank", "--lora-alpha"]
INTS = st.one_of(
    st.integers(1, 8), st.integers(1, 8), st.integers(-3, 9), st.sampled_from([64, 1000, 4096, 2**31, 10**12, 10**30])
)


@FUZZ
@given(
    model=st.sampled_from(
        ["meta-llama/Llama-3.2-1B", "Qwen/Qwen3-30B-A3B", "openai-community/gpt2", "mistralai/Mixtral-8x7B-v0.1"]
    ),
    flags=st.dictionaries(st.sampled_from(sorted(PLAN_FLAGS)), st.integers(0, 20), max_size=5),
    ints=st.dictionaries(st.sampled_from(INT_FLAGS), INTS, max_size=3),
    command=st.sampled_from(
        [
            ["bill", "--json"],
            ["bill", "--json", "--max", "seq"],
            ["bill"],
            ["emit", "--json", "--format", "trl"],
            ["prescribe", "--symptom", "mid-run-oom"],
        ]
    ),
)
def test_generated_flags(model, flags, ints, command):
    args = [command[0], model]
    for flag, pick in flags.items():
        args += [flag, PLAN_FLAGS[flag][pick % len(PLAN_FLAGS[flag])]]
    for flag, value in ints.items():
        args += [flag, str(value)]
    if "--gpu" not in flags:
        args += ["--gpu", "80"]
    check(runner.invoke(app, args + command[1:], env={"COLUMNS": "80"}))


RECIPE_VALUES = st.one_of(ODD, st.sampled_from(["lora", "full", "true", "false", "all-linear", "2", "q_proj,v_proj"]))
RECIPE_KEYS = st.one_of(
    st.sampled_from(
        [
            "method",
            "micro_batch",
            "seq_len",
            "allow_long",
            "lora_rank",
            "lora_alpha",
            "checkpointing",
            "lora_targets",
            "gpus",
            "batch",
            "offload",
            "shard",
        ]
    ),
    st.text(max_size=4),
    st.integers(),
)


@FUZZ
@given(
    plan=st.dictionaries(RECIPE_KEYS, RECIPE_VALUES, max_size=4),
    top=st.dictionaries(st.sampled_from(["gpu", "description", "name", "extra"]), RECIPE_VALUES, max_size=2),
    model=st.one_of(st.just("meta-llama/Llama-3.2-1B"), ODD),
)
def test_generated_recipes(tmp_path_factory, plan, top, model):
    path = tmp_path_factory.mktemp("recipe") / "r.yaml"
    path.write_text(yaml.safe_dump({"model": model, "plan": plan, **top}, allow_unicode=True))
    check(runner.invoke(app, ["bill", "--recipe", str(path), "--json", *([] if "gpu" in top else ["--gpu", "24"])]))


@pytest.mark.parametrize(
    "text", [b"\xff\xfe\x00", "x: [" * 2000, "&a [*a]", "{1: 2}", "- 1", ":", "model: !!python/object:os.system x"]
)
def test_hostile_recipe_text(tmp_path, text):
    path = tmp_path / "r.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    check(runner.invoke(app, ["bill", "--recipe", str(path), "--gpu", "24"]))


@pytest.mark.parametrize("log", [b"\xff\xfe garbage \x00\x01", "CUDA out of memory. Tried to allocate 9e999 GiB", ""])
def test_hostile_logs_on_stdin(log):
    result = runner.invoke(app, ["prescribe", "--log", "-"], input=log)
    check(result)


# ------------------------------------------------------------------ issue 27: a generated campaign of classes
HOSTILE_NUMBERS = ["0", "-1", "1e3", "nan", "inf", "", " 7", "2147483648", "4611686018427387904", "9" * 4400]
NUMERIC_FLAGS = {
    "bill": [
        "--batch",
        "--seq",
        "--accum",
        "--gpus",
        "--nodes",
        "--lora-rank",
        "--lora-alpha",
        "--lora-dropout",
        "--checkpoint-every",
        "--eval-samples",
        "--eval-batch",
        "--eval-accumulation-steps",
        "--host-ram",
    ],
    "plan": ["--global-batch", "--top", "--tokens", "--accum", "--gpus"],
    "bill --inference": ["--prefill-chunk", "--batch", "--seq"],
    "prescribe --symptom startup-oom": ["--batch", "--seq"],
    "emit --format trl": ["--batch", "--accum", "--lora-rank"],
}
HOSTILE_PATHS = ["", "/nonexistent/x.yaml", "/dev/null", "/", "/dev/zero", "x" * 5000, "fifo"]
WIDTHS = ["1", "60", "80", "200"]


def _campaign(tmp_path) -> list[tuple[list[str], str]]:
    """(arguments, COLUMNS) of every invocation: each numeric flag × each hostile number, each file input × each
    hostile path, empty values, huge layer counts, at each width in turn."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    model = "meta-llama/Llama-3.2-1B"
    runs: list[list[str]] = []
    for command, flags in NUMERIC_FLAGS.items():
        words = command.split()
        for flag in flags:
            for value in HOSTILE_NUMBERS:
                runs.append([words[0], model, "--gpu", "24", *words[1:], flag, value])
    for flag, command in (("--recipe", "bill"), ("--log", "prescribe"), ("--config", "bill"), ("--dataset", "bill")):
        for path in HOSTILE_PATHS:
            target = str(fifo) if path == "fifo" else path
            runs.append(
                [command, *([model, "--gpu", "24"] if command == "bill" and flag != "--recipe" else []), flag, target]
            )
    for flag in ("--gpu", "--method", "--lora-targets", "--interconnect", "--stack", "--symptom"):
        runs.append(["prescribe" if flag == "--symptom" else "bill", model, "--gpu", "24", flag, ""])
    for layers in (0, 1, 513, 1_000_000, 2**40):
        config = dict(catalog_config(model), num_hidden_layers=layers)
        path = tmp_path / f"layers{layers}" / "config.json"
        path.parent.mkdir()
        path.write_text(json.dumps(config))
        for tail in (["bill"], ["bill", "--inference"], ["plan"], ["prescribe", "--symptom", "inference-oom"]):
            runs.append([tail[0], str(path), "--gpu", "24", *tail[1:]])
    campaign = []
    for i, args in enumerate(runs):
        columns = WIDTHS[i % len(WIDTHS)]
        campaign.append((args, columns))
        if i % 3 == 0:
            campaign.append((args + ["--json"], columns))
    return campaign


def test_generated_campaign_of_hostile_inputs(tmp_path):
    """Every invocation: an exit code of docs/output.md's table, no traceback, one JSON document for --json,
    no stdout line wider than COLUMNS (60 at least). The count is in the README's reliability section."""
    campaign = _campaign(tmp_path)
    for args, columns in campaign:
        result = runner.invoke(app, args, env={"COLUMNS": columns, "HF_HUB_OFFLINE": "1"})
        where = (args[:6], columns, result.output[-600:])
        assert result.exit_code in (0, 2, 3), where
        assert "Traceback" not in result.output and "internal error" not in result.output, where
        if "--json" in args and result.exit_code != 2:
            json.loads(result.stdout)  # exactly one document: json.loads refuses trailing text
        if "--json" not in args and args[0] != "emit":  # emit prints the config file itself, not a report
            width = max(int(columns), 60)
            assert all(len(line) <= width for line in result.stdout.splitlines()), where
    assert len(campaign) == CAMPAIGN_SIZE


CAMPAIGN_SIZE = 419
"""Invocations of the in-process campaign; with `ENCODED` (8 processes): 427 (the README's reliability section)."""
ENCODED = [
    pytest.param(encoding, args)
    for encoding in ("ascii", "cp1252")
    for args in (
        ["gpus"],
        ["bill", "meta-llama/Llama-3.2-1B", "--gpu", "24", "--gpus", "2", "--nodes", "2", "--lora-rank", "8"],
        ["plan", "meta-llama/Llama-3.2-1B", "--gpu", "24", "--global-batch", "62914560"],
        ["bill", "meta-llama/Llama-3.2-1B", "--gpu", "24", "--accum", "2147483647"],
    )
]


@pytest.mark.parametrize("encoding, args", ENCODED)
def test_generated_campaign_in_other_encodings(encoding, args):
    """The same rules in a process whose output encoding lacks most of memdoc's characters (Windows, redirected)."""
    import subprocess
    import sys

    from conftest import ROOT

    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "PYTHONIOENCODING": encoding, "COLUMNS": "80", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "memdoc", *args], capture_output=True, env=env, timeout=120)
    out, err = proc.stdout.decode(encoding), proc.stderr.decode(encoding)
    assert proc.returncode in (0, 2, 3), err[-600:]
    assert "Traceback" not in out + err and "internal error" not in err, err[-600:]
    assert all(len(line) <= 80 for line in out.splitlines()), out[-600:]
