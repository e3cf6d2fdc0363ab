"""Issue 16, bad input: every config value, recipe value and flag memdoc reads is validated; a
bad one is a one-line `Error: …` naming it (exit 2), never a silent bill or an internal error."""

import itertools
import json
import random
import time

import pytest
from conftest import ROOT
from typer.testing import CliRunner

from memdoc.cli import app
from memdoc.core.model.families import family_of
from memdoc.core.model.params import layer_groups, layer_layout
from memdoc.resolve.models import catalog_config

runner = CliRunner()
LLAMA = catalog_config("meta-llama/Llama-3.2-1B")


def run(*args, **kwargs):
    return runner.invoke(app, [str(a) for a in args], **kwargs)


def one_error_line(result) -> str:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    assert "internal error" not in lines[0]
    return lines[0]


def config_file(tmp_path, **changes):
    config = dict(LLAMA)
    for key, value in changes.items():
        if value is KeyError:
            config.pop(key, None)
        else:
            config[key] = value
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return path


# ------------------------------------------------------------------------------ config values
@pytest.mark.parametrize(
    "changes,message",
    [
        ({"vocab_size": -8000000}, "vocab_size must be a positive integer, got -8000000"),
        ({"hidden_size": 0}, "hidden_size must be a positive integer, got 0"),
        ({"num_attention_heads": 0}, "num_attention_heads must be a positive integer, got 0"),
        ({"hidden_size": "abc"}, "hidden_size must be an integer, got 'abc'"),
        ({"hidden_size": 2.5}, "hidden_size must be an integer, got 2.5"),
        ({"hidden_size": 1e300}, "hidden_size must be an integer"),
        ({"hidden_size": 10**300}, "hidden_size = 1000"),
        ({"hidden_size": True}, "hidden_size must be an integer, got True"),
        ({"intermediate_size": -1}, "intermediate_size must be a positive integer"),
        ({"max_position_embeddings": -5}, "max_position_embeddings must be a positive integer"),
        ({"head_dim": 0}, "head_dim must be a positive integer"),
        ({"num_key_value_heads": 7}, "num_attention_heads 32 is not a multiple of num_key_value_heads 7"),
        ({"head_dim": KeyError, "hidden_size": 2050}, "hidden_size 2050 is not divisible by num_attention_heads 32"),
        (
            {"head_dim": KeyError, "num_attention_heads": 4096, "num_key_value_heads": 8},
            "not divisible by num_attention_heads 4096",
        ),
        ({"model_type": ["x"]}, "model_type must be a string"),
        ({"model_type": KeyError}, "has no model_type"),
        ({"num_hidden_layers": KeyError}, "has no num_hidden_layers"),
        ({"tie_word_embeddings": "yes"}, "tie_word_embeddings must be true or false"),
        ({"vocab_size": float("nan")}, "vocab_size must be an integer, got nan"),
    ],
)
def test_bad_config_value_names_the_key(tmp_path, changes, message):
    line = one_error_line(run("bill", config_file(tmp_path, **changes), "--gpu", "24"))
    assert message in line


@pytest.mark.parametrize(
    "model,changes,message",
    [
        ("deepseek-ai/DeepSeek-V2-Lite", {"kv_lora_rank": KeyError}, "has no kv_lora_rank"),
        (
            "mistralai/Mixtral-8x7B-v0.1",
            {"num_experts_per_tok": 9},
            "num_experts_per_tok 9 exceeds the 8 routed experts",
        ),
        ("Qwen/Qwen3-30B-A3B", {"mlp_only_layers": "all"}, "mlp_only_layers must be a list"),
        # issue 27: the bill took these and `diagnose` crashed in torch.topk (k of no experts) after torch's logs
        ("mistralai/Mixtral-8x7B-v0.1", {"num_local_experts": 0}, "num_local_experts is 0, but every mixtral MoE"),
        ("deepseek-ai/DeepSeek-V2-Lite", {"n_routed_experts": 0}, "n_routed_experts is 0, but every deepseek_v2"),
        ("openai-community/gpt2", {"n_positions": KeyError}, "has no n_positions"),
    ],
)
def test_architecture_keys(tmp_path, model, changes, message):
    config = dict(catalog_config(model))
    for key, value in changes.items():
        config.pop(key) if value is KeyError else config.__setitem__(key, value)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert message in one_error_line(run("bill", path, "--gpu", "80"))


def test_integral_floats_are_integers(tmp_path):
    """JSON has one number type: 2048.0 is the integer 2048 (same bill as 2048)."""
    as_int = run("bill", config_file(tmp_path, hidden_size=2048), "--gpu", "24", "--json")
    as_float = run("bill", config_file(tmp_path, hidden_size=2048.0), "--gpu", "24", "--json")
    assert as_int.exit_code == as_float.exit_code == 0
    assert json.loads(as_int.output)["per_gpu"] == json.loads(as_float.output)["per_gpu"]


# ------------------------------------------------------------------------ layer count scaling
@pytest.mark.parametrize(
    "command",
    [
        ["bill"],
        ["bill", "--max", "batch"],
        ["prescribe", "--symptom", "mid-run-oom"],
        ["bill", "--method", "qlora", "--optimizer", "adamw-8bit"],
        ["emit", "--format", "axolotl", "--fit"],
    ],
)
def test_a_million_layers_costs_no_more_than_a_few(tmp_path, command):
    path = config_file(tmp_path, num_hidden_layers=1_000_000)
    start = time.monotonic()
    result = run(*command, path, "--gpu", "24", "--json")
    assert result.exit_code in (0, 3), result.output
    assert time.monotonic() - start < 5
    data = json.loads(result.stdout) if result.stdout.strip() else {}  # emit --fit: exit 3, nothing fits
    if "per_gpu" in data and "mode" not in data:
        # a Llama-3.2-1B layer: q,o 2048×2048, k,v 2048×512, MLP 3 × 2048×8192, 2 norms of 2048
        layer = 2 * 2048 * 2048 + 2 * 2048 * 512 + 3 * 2048 * 8192 + 2 * 2048
        assert 16 * layer + 128_256 * 2048 + 2048 == 1_235_814_400  # the published 1.24B (tied embedding)
        assert data["model"]["params"] == 1_000_000 * layer + 128_256 * 2048 + 2048


def test_layer_groups_match_a_scan_of_every_layer():
    """The closed-form groups (first index, count) equal the distinct layouts of a per-layer scan."""
    rng = random.Random(16)
    models = [
        "Qwen/Qwen3-30B-A3B",
        "Qwen/Qwen2-57B-A14B",
        "deepseek-ai/DeepSeek-V2-Lite",
        "mistralai/Mixtral-8x7B-v0.1",
        "meta-llama/Llama-3.2-1B",
    ]
    for model, _ in itertools.product(models, range(25)):
        config = dict(catalog_config(model))
        layers = rng.randint(1, 30)
        config.update(
            {
                "decoder_sparse_step": rng.randint(1, 5),
                "moe_layer_freq": rng.randint(1, 4),
                "first_k_dense_replace": rng.randint(0, 6),
                "mlp_only_layers": sorted(rng.sample(range(35), rng.randint(0, 6))),
            }
        )
        family = family_of(config["model_type"])
        scan = [layer_layout(config, family, i) for i in range(layers)]
        expected = sorted((scan.index(layout), scan.count(layout)) for layout in set(scan))
        assert list(layer_groups(config, family, layers)) == expected, (model, layers, config)


def test_unknown_model_type_names_the_closest_few(tmp_path):
    pytest.importorskip("transformers")
    line = one_error_line(run("bill", config_file(tmp_path, model_type="lalama"), "--gpu", "24"))
    assert "unknown model_type 'lalama'" in line and "(did you mean llama" in line and len(line) < 300


# ---------------------------------------------------------------------------- model argument
@pytest.mark.parametrize(
    "model,message",
    [
        ("x" * 300, "unknown model 'xxxxxxxx"),
        ("a/" + "b" * 300, "unknown model"),
        ("x" * 5000, "is not a model id or a path (5000 characters"),
    ],
)
def test_odd_model_arguments(model, message):
    line = one_error_line(run("bill", model, "--gpu", "24"))
    assert message in line and len(line) < 300


def test_deeply_nested_config(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    assert "nested too deeply" in one_error_line(run("bill", path, "--gpu", "24"))


# ------------------------------------------------------------------------------------ recipes
def recipe_file(tmp_path, text: str | bytes):
    path = tmp_path / "r.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


@pytest.mark.parametrize(
    "plan,message",
    [
        ("allow_long: 'no'", "--allow-long must be true or false, got 'no'"),
        ("allow_long: 1", "--allow-long must be true or false, got 1"),
        ("micro_batch: 2.9", "--batch must be an integer, got 2.9"),
        ("micro_batch: true", "--batch must be an integer, got True"),
        ("micro_batch: .inf", "--batch must be an integer, got inf"),
        ("micro_batch: '4x'", "--batch must be an integer, got '4x'"),
        ("micro_batch: '٤'", "--batch must be an integer, got '٤'"),
        ("seq_len: 99999999999", "--seq 99999999999 is beyond any real run"),
        ("method: [lora]", "--method must be one of: full, lora, qlora; got ['lora']"),
        ("method: lorra", "(did you mean lora?)"),
        ("lora_targets: 3", "--lora-targets must be module names"),
        ("{1: 2}", "plan key 1 is not a name"),
    ],
)
def test_recipe_plan_values_are_strictly_typed(tmp_path, plan, message):
    body = plan if plan.startswith("{") else "{" + plan + "}"
    path = recipe_file(tmp_path, f"model: meta-llama/Llama-2-7b\nplan: {body}\n")
    assert message in one_error_line(run("bill", "--recipe", path, "--gpu", "24"))


@pytest.mark.parametrize(
    "text,message",
    [
        (b"model: \xff\xfe llama\n", "is not UTF-8 text"),
        (
            "a: &a [1,1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
            "model: [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n",
            "YAML aliases (*a) are not allowed",
        ),
        ("model: " + "[" * 50_000 + "]" * 50_000 + "\n", "recipe"),
        ("{1: 2, model: x}", "key 1 is not a name"),
        ("model: [a, b]", "model must be a string"),
        ("model: x\ngpu: {a: 1}", "gpu must be a string"),
        ("- a\n- b\n", "must be a mapping"),
        ("model: x\nplan: [1]\n", "plan must be a mapping"),
    ],
)
def test_recipe_files(tmp_path, text, message):
    path = recipe_file(tmp_path, text)
    start = time.monotonic()
    assert message in one_error_line(run("bill", "--recipe", path, "--gpu", "24"))
    assert time.monotonic() - start < 5


def test_allow_long_false_as_a_string_is_false(tmp_path):
    """The reproducer: `allow_long: "false"` was read as true (bool("false")); now it is false."""
    path = recipe_file(tmp_path, "model: meta-llama/Llama-2-7b\ngpu: 24\nplan: {allow_long: 'false', seq_len: 8192}\n")
    assert "exceeds meta-llama/Llama-2-7b-hf's context of 4096" in one_error_line(run("bill", "--recipe", path))


def test_recipe_booleans_and_numbers_still_read(tmp_path):
    path = recipe_file(
        tmp_path,
        "model: meta-llama/Llama-2-7b\ngpu: 24\nplan: {allow_long: true, micro_batch: 2.0, checkpointing: true}\n",
    )
    result = run("bill", "--recipe", path, "--json")
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)["plan"]
    assert (plan["allow_long"], plan["micro_batch"], plan["checkpointing"]) == (True, 2, "full")


# ---------------------------------------------------------------------------------------- GPUs
def test_gpu_count_prefix_sets_the_gpu_count():
    """`--gpu 8xh100` is 8 GPUs: ZeRO-3 over 8 divides the states by 8 (as --gpus 8 does)."""
    with_prefix = run("bill", "meta-llama/Llama-3.1-8B", "--gpu", "8xh100", "--shard", "zero3", "--json")
    with_flag = run("bill", "meta-llama/Llama-3.1-8B", "--gpu", "h100", "--gpus", "8", "--shard", "zero3", "--json")
    assert with_prefix.exit_code == 0, with_prefix.output
    a, b = json.loads(with_prefix.output), json.loads(with_flag.output)
    assert a["plan"]["gpus_per_node"] == 8 and a["per_gpu"] == b["per_gpu"]


def test_gpu_count_prefix_conflicting_with_gpus():
    line = one_error_line(run("bill", "meta-llama/Llama-3.1-8B", "--gpu", "8xh100", "--gpus", "4"))
    assert "says 8 GPUs but --gpus says 4" in line


# --------------------------------------------------------------------------------------- --max
def test_max_seq_never_exceeds_the_context(tmp_path):
    path = config_file(tmp_path, max_position_embeddings=16)
    result = run("bill", path, "--gpu", "80", "--seq", "16", "--max", "seq", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["max"]["value"] == 16


# ------------------------------------------------------------------------ diagnose, prescribe
def test_diagnose_timeout_must_be_finite():
    for value in ("inf", "nan", "1e300"):
        assert "--timeout" in one_error_line(run("diagnose", "train.py", "--timeout", value))


@pytest.mark.parametrize(
    "changes,message",
    [
        (
            {"head_dim": 6, "rope_scaling": {"rope_type": "nope"}},
            "transformers cannot build a 'llama' model from this config",
        ),
        ({"hidden_act": "nope"}, "KeyError: 'nope'"),
    ],
)
def test_configs_the_bill_takes_but_transformers_cannot_build(tmp_path, changes, message):
    pytest.importorskip("transformers")
    path = config_file(tmp_path, **changes)
    assert run("bill", path, "--gpu", "24").exit_code == 0  # the bill reads only sizes
    assert message in one_error_line(run("diagnose", path, "--seq", "64"))


@pytest.mark.slow
def test_binary_stdin_under_a_strict_encoding():
    """`prescribe --log -` reads bytes, whatever PYTHONIOENCODING says (undecodable bytes become U+FFFD)."""
    import os
    import subprocess
    import sys

    log = (
        b"\xff\xfe\x00 torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
        b"GPU 0 has a total capacity of 23.65 GiB of which 1.19 GiB is free.\n"
    )
    env = {**os.environ, "PYTHONIOENCODING": "ascii:strict", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "memdoc", "prescribe", "--log", "-", "--json"],
        input=log,
        capture_output=True,
        env=env,
        timeout=60,
    )
    assert b"internal error" not in proc.stderr and b"Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode in (0, 2), proc.stderr
    if proc.returncode == 0:
        assert json.loads(proc.stdout)["oom"]["requested"] == 2 * 1024**3


@pytest.mark.slow
@pytest.mark.parametrize("model,traced", [("meta-llama/Llama-3.2-1B", True), ("deepseek-ai/DeepSeek-V2-Lite", False)])
def test_diagnose_a_million_layers(tmp_path, model, traced):
    """Repeating layers are extrapolated from 2-4 layer traces; others are refused, never traced for hours."""
    pytest.importorskip("transformers")
    config = dict(catalog_config(model), num_hidden_layers=1_000_000)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    start = time.monotonic()
    result = run("diagnose", path, "--seq", "64", "--json")
    assert time.monotonic() - start < 60
    if traced:
        assert result.exit_code == 0, result.output
        assert "extrapolated linearly to 1000000" in " ".join(json.loads(result.stdout)["notes"])
    else:
        assert "cannot trace 1,000,000 layers" in one_error_line(result)


def test_qwen_moe_with_no_experts_is_a_dense_model(tmp_path):
    """Qwen-MoE's 0 routed experts build dense layers (transformers' `Qwen3MoeDecoderLayer`: sparse only when
    num_experts > 0), so the bill takes it: the no-expert check is for families that route every layer."""
    config = dict(catalog_config("Qwen/Qwen3-30B-A3B"), num_experts=0)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert run("bill", path, "--gpu", "80", "--no-ladder").exit_code == 0


def test_a_failing_trace_prints_no_torch_log(capfd):
    """A fake-tensor op that fails logs its traceback through torch's logger at ERROR: memdoc's dry runs keep
    torch's loggers at CRITICAL (`probe.quiet.quiet_libraries`), so only memdoc's one line remains."""
    torch = pytest.importorskip("torch")
    from torch._subclasses.fake_tensor import FakeTensorMode

    from memdoc.probe.quiet import quiet_libraries

    with quiet_libraries(), pytest.raises(RuntimeError), FakeTensorMode():
        torch.topk(torch.empty(4, 0), 2, dim=-1)
    assert "fake_tensor.py" not in capfd.readouterr().err


@pytest.mark.parametrize("target", ["x" * 5000, "/tmp/" + "a" * 300 + "/config.json"])
def test_diagnose_an_over_long_target_is_one_line(target):
    """issue 27: a TARGET no file can name (over NAME_MAX or PATH_MAX) was an internal OSError while deciding
    whether it is a script."""
    assert "Error: " in one_error_line(run("diagnose", target))
