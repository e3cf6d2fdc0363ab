"""The stack at the CLI: `--stack SPEC`, the stack line and JSON `stack`, the defaults it fills where the user set
nothing (the MoE expert layout; TRL's loss path for TRL files), emit's notes on the loss each trainer runs, the
config notes on every command that takes `--config`, and mirrors of catalog models."""

from __future__ import annotations

import json
from importlib import metadata

import pytest
from conftest import FIXTURES, invoke

from memdoc.core.model.stack import LATEST_KNOWN

USER = FIXTURES / "user_configs"
GPU = "h100-sxm"
TRL_MINIMAL = USER / "trl" / "minimal.yaml"
NO_LADDER = ("--gpu", GPU, "--json", "--no-ladder")

MIXTRAL_QLORA = """\
model_name_or_path: mistralai/Mixtral-8x7B-v0.1
dataset_name: trl-lib/Capybara
output_dir: mixtral-qlora
use_peft: true
load_in_4bit: true
use_bnb_nested_quant: true
lora_r: 16
lora_target_modules: all-linear
per_device_train_batch_size: 1
max_length: 2048
bf16: true
"""
"""A TRL QLoRA file for Mixtral-8x7B, as the published QLoRA runs on transformers 4.4x configured it."""


def _json(*args) -> dict:
    result = invoke("bill", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _stderr(result) -> str:
    assert result.exit_code in (0, 3), result.output
    return " ".join(result.stderr.split())  # notes wrap at the terminal's width


# ------------------------------------------------------------------------------------------- the stack


def test_stack_flag_is_stated_with_the_versions_assumed():
    given = _json("Qwen/Qwen2.5-0.5B", "--stack", "transformers==4.46.0,torch==2.5.1", *NO_LADDER)["stack"]
    others = [name for name in LATEST_KNOWN if name not in ("transformers", "torch")]
    assert given == {
        "versions": {"transformers": "4.46.0", "torch": "2.5.1"} | {n: LATEST_KNOWN[n].version for n in others},
        "source": "--stack",
        "assumed": others,
        "newer_than_known": {},
    }
    line = _stderr(invoke("bill", "Qwen/Qwen2.5-0.5B", "--stack", "transformers==4.46.0", "--gpu", GPU, "--no-ladder"))
    assert "stack: transformers 4.46.0 (--stack); assumed at memdoc's latest known: trl 1.16.0, peft " in line


def test_a_config_is_billed_under_the_installed_stack():
    data = _json("--config", TRL_MINIMAL, *NO_LADDER)
    assert data["stack"]["source"] == "installed"
    for name, known in LATEST_KNOWN.items():
        try:
            assert data["stack"]["versions"][name] == metadata.version(name)
        except metadata.PackageNotFoundError:
            assert data["stack"]["versions"][name] == known.version and name in data["stack"]["assumed"]
    line = _stderr(invoke("bill", "--config", TRL_MINIMAL, "--gpu", GPU, "--no-ladder"))
    assert f"stack: transformers {metadata.version('transformers')}, trl {metadata.version('trl')}," in line
    assert "(installed)" in line


def test_no_stack_without_config_or_stack_flag():
    result = invoke("bill", "Qwen/Qwen2.5-0.5B", "--gpu", GPU, "--no-ladder")
    assert result.exit_code == 0 and "stack:" not in result.stderr
    assert "stack" not in _json("Qwen/Qwen2.5-0.5B", *NO_LADDER)


def test_a_malformed_stack_is_one_line():
    result = invoke("bill", "Qwen/Qwen2.5-0.5B", "--stack", "transformers=4.46", "--gpu", GPU)
    assert result.exit_code == 2 and result.stderr.startswith("Error: --stack item 'transformers=4.46' is not")


# ------------------------------------------------------------------------- MoE experts from the stack


@pytest.fixture
def mixtral(tmp_path):
    path = tmp_path / "mixtral_qlora.yaml"
    path.write_text(MIXTRAL_QLORA)
    return path


def test_mixtral_qlora_under_transformers_4_bills_quantised_experts(mixtral):
    """transformers 4.46 builds Mixtral's experts as nn.Linear (quantised by bitsandbytes): the config billed
    under that stack is the linear layout, byte for byte; under transformers 5 (installed) the fused one."""
    old = ("--config", mixtral, "--stack", "transformers==4.46.0", *NO_LADDER)
    linear = _json(*old)
    assert linear["plan"]["moe_experts"] == "linear"
    assert linear == _json(*old, "--moe-experts", "linear")
    fused = _json("--config", mixtral, *NO_LADDER)
    assert metadata.version("transformers").startswith("5.") and fused["plan"]["moe_experts"] == "fused"
    assert fused == _json("--config", mixtral, *NO_LADDER, "--moe-experts", "fused")
    assert linear["per_gpu"]["weights"] < fused["per_gpu"]["weights"]  # NF4 experts, not 16-bit


def test_the_user_setting_wins_over_the_stack(mixtral, tmp_path):
    flagged = _json("--config", mixtral, "--stack", "transformers==4.46.0", "--moe-experts", "fused", *NO_LADDER)
    assert flagged["plan"]["moe_experts"] == "fused"
    recipe = tmp_path / "r.yaml"
    recipe.write_text("model: mistralai/Mixtral-8x7B-v0.1\nplan:\n  method: qlora\n  moe_experts: fused\n")
    from_recipe = _json("--recipe", recipe, "--stack", "transformers==4.46.0", *NO_LADDER)
    assert from_recipe["plan"]["moe_experts"] == "fused"
    plain = ("mistralai/Mixtral-8x7B-v0.1", "--method", "qlora", *NO_LADDER)
    assert _json(*plain)["plan"]["moe_experts"] == "fused"  # neither config nor --stack: memdoc's default
    assert _json(*plain, "--stack", "transformers==4.57.1")["plan"]["moe_experts"] == "linear"


# ------------------------------------------------------------------------------- TRL's loss path


def _trl_file(tmp_path, extra: str = ""):
    path = tmp_path / "sft.yaml"
    path.write_text(TRL_MINIMAL.read_text() + extra)
    return path


@pytest.mark.slow
def test_trl_computes_the_loss_through_its_fused_head():
    """The installed TRL's own code: SFTConfig's default loss_type "nll" is computed through the fused LM head,
    and use_liger_kernel turns Liger's fused cross-entropy off (trl/trainer/sft_trainer.py)."""
    import inspect

    from trl import SFTConfig, SFTTrainer

    assert SFTConfig.__dataclass_fields__["loss_type"].default == "nll"
    assert "model(**inputs, fused_lm_head=True)" in inspect.getsource(SFTTrainer.compute_loss)
    assert '"fused_linear_cross_entropy": False' in inspect.getsource(SFTTrainer.__init__)


def test_a_trl_file_bills_trls_fused_head_where_its_trl_has_it(tmp_path):
    data = _json("--config", TRL_MINIMAL, *NO_LADDER)
    assert data["plan"]["loss"] == "trl-fused"
    assert {"file": str(TRL_MINIMAL), "key": "loss_type (default)", "field": "loss"} in data["config"]["read"]
    old = _json("--config", TRL_MINIMAL, "--stack", "trl==0.19.1", *NO_LADDER)
    assert old["plan"]["loss"] == "hf"  # before TRL's fused head: transformers' loss
    assert _json("--config", TRL_MINIMAL, "--loss", "hf", *NO_LADDER)["plan"]["loss"] == "hf"  # the flag wins
    hf_file = _json("Qwen/Qwen2.5-0.5B", "--config", USER / "hf" / "training_args.yaml", *NO_LADDER)
    assert hf_file["plan"]["loss"] == "fused-ce"  # TrainingArguments (no TRL key): the HF Trainer, Liger's loss


def test_liger_under_trls_fused_head(tmp_path):
    liger = _json("--config", _trl_file(tmp_path, "use_liger_kernel: true\n"), *NO_LADDER)
    assert liger["plan"]["loss"] == "trl-fused"
    assert [n["key"] for n in liger["config"]["not_billed"]] == ["use_liger_kernel"]
    old = _json("--config", _trl_file(tmp_path, "use_liger_kernel: true\n"), "--stack", "trl==0.19.1", *NO_LADDER)
    assert old["plan"]["loss"] == "fused"  # before TRL's fused head: Liger's fused cross-entropy
    refused = _trl_file(tmp_path, "use_liger_kernel: true\nliger_kernel_config:\n  fused_linear_cross_entropy: true\n")
    result = invoke("bill", "--config", refused, "--gpu", GPU)
    assert result.exit_code == 2, result.output
    assert f"{refused}:6: liger_kernel_config: fused_linear_cross_entropy: true is refused" in _stderr_line(result)


def _stderr_line(result) -> str:
    return " ".join(result.stderr.split())


# ------------------------------------------------------------------------------ emit's loss notes


@pytest.mark.parametrize(
    "fmt,loss,note",
    [
        ("trl", "hf", "loss hf: TRL ≥ 1.16's SFTTrainer computes the loss through its fused LM head"),
        ("trl", "fused", "turns Liger's fused cross-entropy off"),
        ("trl", "fused-ce", "refuses liger_kernel_config with fused_linear_cross_entropy"),
        ("hf", "trl-fused", "the HF Trainer computes the full logits — bill --loss hf"),
        ("axolotl", "trl-fused", "Axolotl's trainer (a transformers Trainer) computes the full logits"),
        ("llamafactory", "trl-fused", "LLaMA-Factory's trainer (a transformers Seq2SeqTrainer) computes the full"),
    ],
)
def test_emit_says_which_loss_the_trainer_runs(fmt, loss, note):
    result = invoke("emit", "Qwen/Qwen2.5-0.5B", "--gpu", GPU, "--loss", loss, "--format", fmt)
    assert note in _stderr_line(result), result.output


@pytest.mark.parametrize("fmt,loss", [("trl", "trl-fused"), ("hf", "hf"), ("axolotl", "fused"), ("llamafactory", "hf")])
def test_no_loss_note_where_the_trainer_runs_the_plans_loss(fmt, loss):
    result = invoke("emit", "Qwen/Qwen2.5-0.5B", "--gpu", GPU, "--loss", loss, "--format", fmt)
    assert result.exit_code == 0 and "for this config" not in _stderr_line(result)


# ------------------------------------------------------------------ the notes on every command


@pytest.mark.parametrize(
    "command,extra",
    [
        ("bill", ["--no-ladder"]),
        ("plan", ["--top", "1"]),
        ("prescribe", ["--symptom", "startup-oom"]),
        ("emit", []),
        pytest.param("diagnose", [], marks=pytest.mark.slow),
    ],
)
def test_every_command_prints_the_config_notes(command, extra, tmp_path):
    """The same notes (files read, stack, keys not billed) wherever --config is taken."""
    config = _config_with_an_unbilled_key(tmp_path)
    model = ["meta-llama/Llama-3.1-8B"] if command == "diagnose" else []
    result = invoke(command, *model, "--config", config, "--gpu", GPU, "--gpus", "2", *extra)
    line = _stderr(result)
    assert f"config: read {config}, {tmp_path / 'zero2.json'} (trainer-args, deepspeed)" in line
    assert "stack: transformers " in line and "(installed)" in line
    # issue 28: the reduce bucket is billed now; DeepSpeed's partitioned activations (Megatron only) are not
    assert f"not billed: {tmp_path / 'zero2.json'}:activation_checkpointing — " in line
    assert "zero_optimization.reduce_bucket_size" not in line


# --------------------------------------------------------------------------------------- mirrors


def test_a_config_naming_a_mirror_bills_the_catalog_model(tmp_path):
    path = tmp_path / "sft.yaml"
    path.write_text("model_name_or_path: NousResearch/Meta-Llama-3-8B\noutput_dir: o\n")
    result = invoke("bill", "--config", path, "--gpu", GPU, "--no-ladder")
    taken = (
        "note: NousResearch/Meta-Llama-3-8B taken as meta-llama/Meta-Llama-3-8B: the catalog's model of the same name"
    )
    assert taken in _stderr(result)
    mirrored = _json("--config", path, *NO_LADDER)
    assert mirrored == _json("meta-llama/Meta-Llama-3-8B", "--config", path, *NO_LADDER)
    assert mirrored["model"]["id"] == "meta-llama/Meta-Llama-3-8B"


def test_emit_of_a_mirror_says_which_repository_the_config_names():
    result = invoke("emit", "NousResearch/Meta-Llama-3-8B", "--gpu", GPU, "--loss", "trl-fused")
    assert result.exit_code == 0, result.output
    assert "model_name_or_path: meta-llama/Meta-Llama-3-8B" in result.stdout
    assert (
        "write NousResearch/Meta-Llama-3-8B back to load your copy" in _stderr_line(result)
        and "catalogued as" not in result.stderr
    )


def _config_with_an_unbilled_key(tmp_path):
    """llama_qlora_zero2.yaml with its zero2.json, plus a key memdoc reads but does not bill (issue 28 bills the
    reduce bucket the fixture sets, so the not-billed note needs another key): DeepSpeed's partitioned activations."""
    import shutil

    shutil.copy(USER / "trl" / "llama_qlora_zero2.yaml", tmp_path / "llama_qlora_zero2.yaml")
    ds = json.loads((USER / "trl" / "zero2.json").read_text())
    ds["activation_checkpointing"] = {"partition_activations": True}
    (tmp_path / "zero2.json").write_text(json.dumps(ds))
    return tmp_path / "llama_qlora_zero2.yaml"
