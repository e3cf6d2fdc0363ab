"""`--config FILE` on the commands: the round trip (`memdoc emit` writes a TRL, HF, Axolotl or LLaMA-Factory
config and its DeepSpeed/accelerate side files; `memdoc bill --config` on those files bills the same plan to
the byte, for the plans whose loss the format's trainer runs: trl-fused for TRL, hf/fused/fused-ce elsewhere),
the merge order (recipe < config files < flags), the not-billed note, and one-line errors naming file:line: key."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
import yaml
from conftest import FIXTURES, invoke
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

USER = FIXTURES / "user_configs"
GPU = "h100-sxm"
MODELS = ("meta-llama/Llama-3.1-8B", "Qwen/Qwen2.5-7B")


def _json(result) -> dict:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _flags(plan: dict) -> list[str]:
    out = []
    for key, value in plan.items():
        out += [f"--{key.replace('_', '-')}", ",".join(value) if isinstance(value, list) else str(value)]
    return out


HF_ONLY_FLAGS = ("method", "precision", "seq", "attention", "lora_rank", "lora_alpha", "lora_dropout", "lora_targets")
"""What a TrainingArguments file cannot hold (emit's hf notes name them): the round trip passes them as flags."""


def _round_trip(tmp_path: Path, model: str, plan: dict, fmt: str) -> tuple[dict, dict]:
    """(bill of the flags, bill of the emitted files); the GPU count travels as flags where no file holds it
    (the DeepSpeed launch line carries it, not the JSON; Axolotl's FSDP keys sit in its YAML, without it)."""
    out = Path(tempfile.mkdtemp(prefix=fmt, dir=tmp_path))  # one folder per example (hypothesis reuses tmp_path)
    emitted = invoke("emit", model, "--gpu", GPU, *_flags(plan), "--format", fmt, "-o", out / "main.yaml", "--force")
    assert emitted.exit_code == 0, emitted.output
    side = sorted(p for p in out.iterdir() if p.name not in ("main.yaml", "ds_config.json"))  # ds: via `deepspeed:`
    configs = [a for p in [out / "main.yaml", *side] for a in ("--config", p)]
    extra = {} if side else {k: plan[k] for k in ("gpus", "nodes") if k in plan}  # accelerate's YAML holds them
    if fmt == "hf":
        extra |= {k: plan[k] for k in HF_ONLY_FLAGS if k in plan}
    model_arg = [model] if fmt == "hf" else []  # the other formats name the model
    from_files = _json(invoke("bill", *model_arg, *configs, "--gpu", GPU, *_flags(extra), "--json", "--no-ladder"))
    # Axolotl refuses rank-0-only loading for 4-bit FSDP: its YAML says cpu_ram_efficient_loading false
    fsdp = plan.get("shard") in ("fsdp", "fsdp2")
    quirk = ["--no-low-mem-load"] if fmt == "axolotl" and plan.get("method") == "qlora" and fsdp else []
    direct = _json(invoke("bill", model, "--gpu", GPU, *_flags(plan), *quirk, "--json", "--no-ladder"))
    return direct, from_files


READER = {"trl": "trainer-args", "hf": "trainer-args", "axolotl": "axolotl", "llamafactory": "llamafactory"}
"""The format `bill --config` detects in each emitted main config."""


def _same_bill(direct: dict, from_files: dict, fmt: str = "trl") -> None:
    config = from_files.pop("config")
    assert from_files.pop("stack")["source"] == "installed"  # a config file was read: the stack is stated
    assert config["formats"][0] == READER[fmt] and len(config["formats"]) == len(set(config["formats"]))
    assert from_files["plan"] == direct["plan"]
    assert from_files == direct


PEFT_PRECISIONS = {"lora": ["amp-bf16", "amp-fp16", "fp32"], "qlora": ["amp-bf16", "amp-fp16"]}
PRECISIONS = {
    "trl": {"full": ["bf16", "fp16", "amp-bf16", "amp-fp16", "fp32"]} | PEFT_PRECISIONS,
    "hf": {"full": ["bf16", "fp16", "amp-bf16", "amp-fp16", "fp32"]} | PEFT_PRECISIONS,
    # Axolotl loads the weights in the dtype of bf16/fp16: a full fine-tune has no fp32 master copy (no amp-*)
    "axolotl": {"full": ["bf16", "fp16", "fp32"]} | PEFT_PRECISIONS,
    # LLaMA-Factory: a full fp16 plan has no key (fp32 weights), a LoRA base in fp32 gets the inferred bf16
    "llamafactory": {"full": ["bf16", "amp-bf16", "amp-fp16", "fp32"], "lora": ["amp-bf16", "amp-fp16"]}
    | {"qlora": PEFT_PRECISIONS["qlora"]},
}
"""The precisions each format's trainer runs as emitted (tests/unit/user_config/test_axolotl.py `axolotl_runs`,
test_llamafactory.py `llamafactory_runs`: the others come back as another precision, and emit says so)."""
LOSSES = {
    "trl": ["trl-fused"],  # TRL ≥ 1.16 computes every loss through its fused LM head (emit notes the others)
    "hf": ["hf", "fused", "fused-ce"],
    "axolotl": ["hf", "fused", "fused-ce"],
    "llamafactory": ["hf", "fused"],  # enable_liger_kernel applies every kernel: no fused-ce alone
}
"""The loss paths each format's trainer runs (trl-fused in the HF-based trainers: emit notes they compute the
full logits)."""


@st.composite
def plans(draw, fmt: str = "trl") -> dict:
    """Plans `fmt` writes exactly (emit adds no 'no equivalent' note): no selective or partial checkpointing,
    no offload without sharding, the precisions (`PRECISIONS`) and losses (`LOSSES`) its trainer runs as
    emitted, FSDP offload of everything to the CPU, NVMe only under ZeRO-3, and for LLaMA-Factory no pure bf16
    under ZeRO-3 (it refuses it; emit writes amp-bf16)."""
    method = draw(st.sampled_from(["full", "lora", "qlora"]))
    plan = {
        "method": method,
        "precision": draw(st.sampled_from(PRECISIONS[fmt][method])),
        "optimizer": draw(st.sampled_from(["adamw-fused", "adamw-foreach", "adamw-8bit", "sgd", "adafactor", "lion"])),
        "batch": draw(st.integers(1, 8)),
        "seq": draw(st.sampled_from([512, 1024, 2048, 4096])),
        "accum": draw(st.integers(1, 4)),
        "checkpointing": draw(st.sampled_from(["none", "full"])),
        "attention": draw(st.sampled_from(["sdpa", "eager"])),
        "loss": draw(st.sampled_from(LOSSES[fmt])),
    }
    if method != "full":
        plan |= {
            "lora_rank": draw(st.sampled_from([8, 16, 64])),
            "lora_alpha": draw(st.sampled_from([16, 32])),
            "lora_dropout": draw(st.sampled_from([0.0, 0.05])),
            "lora_targets": draw(st.sampled_from([["q_proj", "v_proj"], ["all-linear"]])),
        }
    shard = draw(st.sampled_from(["none", "zero1", "zero2", "zero3", "fsdp"]))
    if shard != "none":
        plan |= {"shard": shard, "gpus": draw(st.integers(2, 8)), "nodes": draw(st.integers(1, 2))}
        offload = draw(st.sampled_from(["none", "optimizer", "optimizer+params"]))
        if shard == "fsdp" and offload != "none":
            plan["offload"] = "optimizer+params"
        elif offload != "none" and (offload == "optimizer" or shard == "zero3"):
            plan["offload"] = offload
            plan["offload_to"] = draw(st.sampled_from(["cpu", "nvme"])) if shard == "zero3" else "cpu"
        if plan.get("offload") and plan["optimizer"] == "adamw-8bit":
            plan["optimizer"] = "adamw-fused"
        if fmt == "llamafactory" and shard == "zero3" and plan["precision"] == "bf16":
            plan["precision"] = "amp-bf16"
    return plan


@pytest.mark.parametrize("fmt", ["trl", "hf", "axolotl", "llamafactory"])
def test_round_trip_one_sharded_plan(tmp_path, fmt):
    plan = {
        "method": "lora",
        "precision": "amp-bf16",
        "batch": 2,
        "seq": 4096,
        "accum": 4,
        "lora_rank": 32,
        "lora_alpha": 64,
        "lora_targets": ["all-linear"],
        "checkpointing": "full",
        "shard": "zero3",
        "gpus": 4,
        "offload": "optimizer+params",
        "offload_to": "nvme",
        "loss": LOSSES[fmt][0],
    }
    _same_bill(*_round_trip(tmp_path, MODELS[0], plan, fmt), fmt)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["trl", "hf", "axolotl", "llamafactory"])
@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(model=st.sampled_from(MODELS), data=st.data())
def test_round_trip_reproduces_plan_and_bill(tmp_path, fmt, model, data):
    _same_bill(*_round_trip(tmp_path, model, data.draw(plans(fmt)), fmt), fmt)


def test_bill_names_files_and_not_billed_keys_on_stderr(tmp_path):
    config = _config_with_an_unbilled_key(tmp_path)
    result = invoke("bill", "--config", config, "--gpu", GPU, "--gpus", "2", "--no-ladder")
    assert result.exit_code == 0, result.output
    stderr = " ".join(result.stderr.split())  # the note wraps at the terminal's width
    assert f"config: read {config}, {tmp_path / 'zero2.json'}" in stderr
    # issue 28: the reduce bucket is billed now; DeepSpeed's partitioned activations (Megatron only) are not
    assert f"not billed: {tmp_path / 'zero2.json'}:activation_checkpointing — " in stderr
    assert "zero_optimization.reduce_bucket_size" not in stderr
    assert "meta-llama/Llama-3.1-8B" in result.stdout


def test_flags_override_configs_and_later_files_override_earlier():
    """minimal.yaml: batch 8, accumulation 1 (TrainingArguments' defaults); zero1_bf16.json: 2 and 8."""
    trl = USER / "trl" / "minimal.yaml"
    ds = USER / "deepspeed" / "zero1_bf16.json"
    common = ("--gpu", GPU, "--gpus", "2", "--json", "--no-ladder")
    ds_later = _json(invoke("bill", "--config", trl, "--config", ds, *common))["plan"]
    assert (ds_later["micro_batch"], ds_later["grad_accum"]) == (2, 8)
    assert ds_later["shard"] == "zero1" and ds_later["precision"] == "amp-bf16"
    trl_later = _json(invoke("bill", "--config", ds, "--config", trl, *common))
    assert (trl_later["plan"]["micro_batch"], trl_later["plan"]["grad_accum"]) == (8, 1)
    assert trl_later["config"]["formats"] == ["deepspeed", "trainer-args"]
    flagged = _json(invoke("bill", "--config", trl, "--config", ds, *common, "--batch", "3"))["plan"]
    assert (flagged["micro_batch"], flagged["grad_accum"]) == (3, 8)  # the flag over both files


def test_recipe_below_config(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("model: meta-llama/Llama-3.1-8B\ngpu: h100-sxm\nplan:\n  micro_batch: 5\n  seq_len: 512\n")
    data = _json(invoke("bill", "--recipe", recipe, "--config", USER / "trl" / "minimal.yaml", "--json", "--no-ladder"))
    assert data["plan"]["micro_batch"] == 8 and data["plan"]["seq_len"] == 1024  # TRL's defaults over the recipe
    assert data["model"]["id"].startswith("Qwen/Qwen2.5-0.5B")  # the recipe's model is replaced by the config's


@pytest.mark.parametrize("command", ["plan", "prescribe", "emit"])
def test_other_commands_take_config(command):
    extra = {"plan": ["--top", "1"], "prescribe": ["--symptom", "startup-oom"], "emit": []}[command]
    result = invoke(command, "--config", USER / "trl" / "qwen_lora_sft.yaml", "--gpu", GPU, *extra)
    assert result.exit_code in (0, 3), result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    "text,name,expected",
    [
        ("output_dir: o\nbf16: [true\n", "bad.yaml", "config {path}:3: not valid YAML"),
        (
            "model_name_or_path: m\nper_device_train_batch_size: big\n",
            "t.yaml",
            "{path}:2: per_device_train_batch_size: must be a positive integer",
        ),
        ("model_name_or_path: m\nbf16: true\nfp16: true\n", "t.yaml", "{path}:3: fp16: bf16 and fp16 are both true"),
        (
            "model_name_or_path: m\noutput_dir: o\ndeepspeed: nowhere.json\n",
            "t.yaml",
            "{path}:3: deepspeed: {dir}/nowhere.json does not exist",
        ),
        ("- a\n- b\n", "list.yaml", "config {path} must be a mapping"),
    ],
)
def test_errors_are_one_line_exit_2(tmp_path, text, name, expected):
    path = tmp_path / name
    path.write_text(text)
    result = invoke("bill", "--config", path, "--gpu", GPU)
    assert result.exit_code == 2, result.output
    line = " ".join(result.stderr.split())  # one message, wrapped at the terminal's width
    assert expected.format(path=path, dir=tmp_path) in line and "\n" not in line and "Traceback" not in line


def test_missing_config_file_is_one_line(tmp_path):
    result = invoke("bill", "--config", tmp_path / "nope.yaml", "--gpu", GPU)
    # issue 27: every missing input file says so in the same words (memdoc.resolve.inputs.open_regular)
    assert result.exit_code == 2 and f"config {tmp_path / 'nope.yaml'} does not exist" in result.stderr


def test_reference_cycle_names_both_files(tmp_path):
    (tmp_path / "a.yaml").write_text(
        "distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: b.yaml\n"
    )
    (tmp_path / "b.yaml").write_text(
        "distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: a.yaml\n"
    )
    result = invoke("bill", "Qwen/Qwen2.5-0.5B", "--config", tmp_path / "a.yaml", "--gpu", GPU)
    assert result.exit_code == 2, result.output
    message = " ".join(result.stderr.split())
    assert f"{tmp_path / 'b.yaml'}:2: deepspeed_config: {tmp_path / 'a.yaml'} references it back (a cycle)" in message


KEYS = st.sampled_from(
    [
        "model_name_or_path",
        "use_peft",
        "lora_r",
        "lora_target_modules",
        "load_in_4bit",
        "bf16",
        "fp16",
        "dtype",
        "optim",
        "per_device_train_batch_size",
        "max_length",
        "gradient_checkpointing",
        "gradient_checkpointing_kwargs",
        "use_liger_kernel",
        "liger_kernel_config",
        "deepspeed",
        "fsdp",
        "fsdp_config",
        "zero_optimization",
        "bf16.enabled",
        "distributed_type",
        "num_processes",
        "num_machines",
        "deepspeed_config",
    ]
)
VALUES = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-3, 10**10),
        st.floats(allow_nan=True),
        st.sampled_from(["auto", "all-linear", "bfloat16", "FSDP", "DEEPSPEED", "cpu", "adamw_torch", "ds.json", ""]),
        st.text(max_size=6),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(["stage", "device", "enabled", "zero_stage"]), inner),
    ),
    max_leaves=6,
)


@pytest.mark.slow
@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(data=st.dictionaries(KEYS, VALUES, min_size=1, max_size=5))
def test_generated_configs_bill_or_fail_in_one_line(tmp_path, data):
    """Any mapping of the keys the readers know, with any values: a bill (exit 0) or one 'Error:' line (exit 2)."""
    path = Path(tempfile.mkdtemp(dir=tmp_path)) / "c.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    result = invoke("bill", "Qwen/Qwen2.5-0.5B", "--config", path, "--gpu", GPU, "--json", "--no-ladder")
    assert result.exit_code in (0, 2), result.output
    assert "Traceback" not in result.output and "internal error" not in result.output, result.output
    if result.exit_code == 2:
        assert result.stderr.startswith("Error: "), result.output


def test_plan_error_from_a_config_value_names_the_key():
    """ZeRO-1 from the DeepSpeed JSON on one GPU: the plan's own message, plus where the value came from."""
    path = USER / "deepspeed" / "zero1_bf16.json"
    result = invoke("bill", "Qwen/Qwen2.5-0.5B", "--config", path, "--gpu", GPU)
    assert result.exit_code == 2, result.output
    assert "--shard zero1 needs more than one GPU" in result.stderr
    assert f"(set by {path}: zero_optimization.stage)" in " ".join(result.stderr.split())


@pytest.mark.slow
def test_diagnose_model_takes_config():
    """diagnose MODEL traces the plan the config says (a meta-device trace: seconds)."""
    data = _json(invoke("diagnose", "Qwen/Qwen2.5-0.5B", "--config", USER / "trl" / "qwen_lora_sft.yaml", "--json"))
    assert data["plan"]["method"] == "lora" and data["plan"]["lora_rank"] == 32 and data["plan"]["micro_batch"] == 2


def _config_with_an_unbilled_key(tmp_path):
    """llama_qlora_zero2.yaml with its zero2.json, plus a key memdoc reads but does not bill (issue 28 bills the
    reduce bucket the fixture sets, so the not-billed note needs another key): DeepSpeed's partitioned activations."""
    import shutil

    shutil.copy(USER / "trl" / "llama_qlora_zero2.yaml", tmp_path / "llama_qlora_zero2.yaml")
    ds = json.loads((USER / "trl" / "zero2.json").read_text())
    ds["activation_checkpointing"] = {"partition_activations": True}
    (tmp_path / "zero2.json").write_text(json.dumps(ds))
    return tmp_path / "llama_qlora_zero2.yaml"
