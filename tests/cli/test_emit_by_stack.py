"""`emit --stack` writes the keys of the stack that will run the file (issue 34).

Truth for the old stack: the dataclass fields of the parsers `trl sft --config` runs under TRL 0.12.0 and
transformers 4.46.0, read from the wheels' sources (tests/fixtures/stack/trl-0.12.0-sft-fields.json): TRL's
`TrlParser` refuses a key that is no field of them. For the newest stack: the installed TRL's and transformers'
own dataclasses."""

import dataclasses
import json

import pytest
import yaml
from conftest import FIXTURES, invoke

OLD = "trl==0.12.0,transformers==4.46.0"
NEW = "trl==1.16.0,transformers==5.25.0"
PLANS = [
    ("--method", "lora", "--checkpointing", "full"),
    ("--method", "qlora", "--checkpointing", "full", "--checkpoint-every", "2"),
    ("--method", "full", "--precision", "amp-bf16", "--checkpointing", "none"),
]


def _emit(stack: str, *flags: str) -> dict:
    result = invoke("emit", "Qwen/Qwen2.5-0.5B", "--gpu", "24", "--stack", stack, "--format", "trl", *flags)
    assert result.exit_code == 0, result.output
    return yaml.safe_load(result.stdout)


def _old_fields() -> set[str]:
    doc = json.loads((FIXTURES / "stack" / "trl-0.12.0-sft-fields.json").read_text())
    return {name for cls in ("ModelConfig", "SFTConfig", "ScriptArguments", "TrainingArguments") for name in doc[cls]}


@pytest.mark.parametrize("flags", PLANS)
def test_old_stack_keys_are_fields_of_trl_0_12s_parser(flags):
    config = _emit(OLD, *flags)
    assert set(config) <= _old_fields(), set(config) - _old_fields()
    assert {"torch_dtype", "max_seq_length", "warmup_ratio"} <= set(config)
    assert not {"dtype", "max_length", "warmup_steps", "activation_checkpointing"} & set(config)


@pytest.mark.parametrize("flags", PLANS)
def test_newest_stack_keys_are_fields_of_the_installed_trl_and_warn_about_nothing(flags):
    trl = pytest.importorskip("trl")
    from trl.scripts.utils import ScriptArguments

    fields = {f.name for cls in (trl.SFTConfig, trl.ModelConfig, ScriptArguments) for f in dataclasses.fields(cls)}
    config = _emit(NEW, *flags)
    assert set(config) <= fields, set(config) - fields
    assert {"dtype", "max_length", "activation_checkpointing"} <= set(config)
    # transformers 5.25 warns on the deprecated spellings (training_args.py, `TrainingArguments.__post_init__`)
    assert not {"torch_dtype", "max_seq_length", "gradient_checkpointing", "gradient_checkpointing_kwargs"} & set(
        config
    )


def test_the_header_names_the_stack_and_bill_config_reads_the_old_file_to_the_same_bytes(tmp_path):
    path = tmp_path / "sft.yaml"
    job = ("Qwen/Qwen2.5-0.5B", "--gpu", "24", "--stack", OLD, "--method", "lora", "--precision", "amp-bf16")
    result = invoke("emit", *job, "-o", path)
    assert result.exit_code == 0, result.output
    assert f"--stack {OLD}" in path.read_text().splitlines()[0]
    emitted = json.loads(invoke("emit", *job, "--json").stdout)
    billed = json.loads(invoke("bill", "--config", path, "--gpu", "24", "--stack", OLD, "--json").stdout)
    assert billed["plan"]["seq_len"] == 2048 and billed["plan"]["method"] == "lora"
    assert {key: billed["per_gpu"][key] for key in emitted["per_gpu"]} == emitted["per_gpu"]
    assert billed["verdict"] == emitted["verdict"]


@pytest.mark.parametrize(("stack", "argument"), [(OLD, "torch_dtype=torch.bfloat16"), (NEW, "dtype=torch.bfloat16")])
def test_hf_formats_load_line_names_the_dtype_argument_of_the_stacks_transformers(stack, argument):
    """transformers 4.56.0 renamed `from_pretrained(torch_dtype=…)` to `dtype` (the old name warns after)."""
    result = invoke("emit", "Qwen/Qwen2.5-0.5B", "--gpu", "24", "--stack", stack, "--format", "hf")
    assert result.exit_code == 0, result.output
    assert f'from_pretrained("Qwen/Qwen2.5-0.5B", {argument},' in result.stderr
