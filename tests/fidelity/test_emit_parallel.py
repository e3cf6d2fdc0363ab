"""`emit` with --cp/--tp, read back by the trainers' own code: accelerate's launcher (the config file's
`parallelism_config` → `PARALLELISM_CONFIG_*` → `ParallelismConfig`), Axolotl's `validate_config`; and the
refusals, each naming what can express the plan."""

import os
import sys
import types

import pytest
import yaml
from conftest import invoke as run

os.environ.setdefault("DISABLE_VERSION_CHECK", "1")
pytestmark = pytest.mark.slow  # the trainers' parsers

MODEL = "meta-llama/Llama-3.1-8B"
BASE = (MODEL, "--gpu", "8xh100", "--seq", "65536", "--checkpointing", "full", "--precision", "amp-bf16")


def _emit(tmp_path, fmt, *flags):
    path = tmp_path / fmt / "config.yaml"
    result = run("emit", *BASE, *flags, "--format", fmt, "-o", path)
    assert result.exit_code == 0, result.output
    return path


def _accelerate_parallelism(config_file, monkeypatch):
    """What `accelerate launch --config_file FILE` hands the training process, built as accelerate builds it."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.parallelism_config import ParallelismConfig
    from accelerate.utils.launch import prepare_extend_env_parallelism_config

    args = launch_command_parser().parse_args(["--config_file", str(config_file), "train.py"])
    _validate_launch_command(args)
    assert args.use_parallelism_config
    for key, value in prepare_extend_env_parallelism_config(args, {}).items():
        monkeypatch.setenv(key, value)
    return ParallelismConfig(), args


@pytest.mark.parametrize(("fmt", "cp", "tp"), [("trl", 4, 2), ("hf", 8, 1), ("trl", 1, 2)])
def test_accelerate_reads_cp_and_tp(tmp_path, monkeypatch, fmt, cp, tp):
    path = _emit(tmp_path, fmt, "--shard", "fsdp2", "--cp", str(cp), "--cp-impl", "ring", "--tp", str(tp))
    config, args = _accelerate_parallelism(path.parent / "fsdp.yaml", monkeypatch)
    assert (config.cp_size, config.tp_size, config.cp_backend) == (cp, tp, "torch")
    assert config.total_size == args.num_processes == 8  # every GPU placed: dp_shard × cp × tp
    assert str(args.fsdp_version) == "2"


def test_axolotl_validates_context_and_tensor_parallel(tmp_path, monkeypatch):
    config_mod = pytest.importorskip("axolotl.utils.config")
    from axolotl.utils.dict import DictDefault

    path = _emit(tmp_path, "axolotl", "--shard", "zero3", "--cp", "4", "--cp-impl", "ring", "--tp", "2")
    cfg = yaml.safe_load(path.read_text())
    cfg["deepspeed"] = str(path.parent / os.path.basename(cfg["deepspeed"]))  # its TP check opens the file
    # an install check, not a config check: ring-flash-attn is a CUDA kernel package (the validator imports it)
    monkeypatch.setitem(sys.modules, "ring_flash_attn", types.ModuleType("ring_flash_attn"))
    validated = config_mod.validate_config(DictDefault(cfg))
    assert validated.context_parallel_size == 4
    assert validated.tensor_parallel_size == 2
    assert validated.attn_implementation == "flash_attention_2"


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (("--format", "llamafactory", "--cp", "8", "--cp-impl", "ring"), "--format axolotl"),
        (("--format", "trl", "--shard", "fsdp2", "--cp", "8"), "--cp-impl ring"),
        (("--format", "hf", "--cp", "8", "--cp-impl", "ring"), "--shard fsdp2"),
        (("--format", "axolotl", "--tp", "2"), "--shard zero1"),
    ],
)
def test_emit_refuses_what_a_format_cannot_express(tmp_path, flags, says):
    result = run("emit", *BASE, *flags, "-o", tmp_path / "x.yaml")
    assert result.exit_code == 2
    assert says in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("fmt", "flags", "files"),
    [
        ("trl", ("--shard", "fsdp2", "--cp", "4", "--cp-impl", "ring", "--tp", "2"), ("config.yaml", "fsdp.yaml")),
        ("axolotl", ("--shard", "zero3", "--cp", "4", "--cp-impl", "ring", "--tp", "2"), ("config.yaml",)),
    ],
)
def test_config_reads_back_what_emit_wrote(tmp_path, fmt, flags, files):
    """`bill --config` on the written files bills the same degrees (accelerate's parallelism_config, Axolotl's
    context_parallel_size and tensor_parallel_size)."""
    import json

    path = _emit(tmp_path, fmt, *flags)
    config = [arg for name in files for arg in ("--config", path.parent / name)]
    result = run("bill", *config, "--gpu", "8xh100", "--json")
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)["plan"]
    assert (plan["cp"], plan["cp_impl"], plan["tp"]) == (4, "ring", 2)
