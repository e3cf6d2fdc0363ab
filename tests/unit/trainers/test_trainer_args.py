"""The TRL / HF TrainingArguments reader on real-looking files, checked against the trainers' own parsers
(`trl.scripts.sft.make_parser()`, `HfArgumentParser(TrainingArguments)`): each file is accepted by them,
and what memdoc reads is what they parsed (or their documented defaults)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import FIXTURES

from memdoc.core.model.plan import Optimizer
from memdoc.core.model.stack import Stack
from memdoc.core.trainers.hf.defaults import default_optimizer
from memdoc.core.trainers.hf.optimizers import BILLED
from memdoc.core.trainers.reading import SourceDoc
from memdoc.core.trainers.trl.read import read_trainer_args
from memdoc.errors import ConfigError
from memdoc.resolve.user_config import load_source, read_user_configs

TRL = FIXTURES / "user_configs" / "trl"
HF = FIXTURES / "user_configs" / "hf"


def _trl_parse(path: Path, tmp_path: Path, monkeypatch):
    """The file through `trl sft`'s own parser (on the CPU; from its folder, where the trainer opens `deepspeed:`)."""
    make_parser = pytest.importorskip("trl.scripts.sft").make_parser
    cfg = yaml.safe_load(path.read_text())
    cfg["use_cpu"] = True
    copy = path.parent / f".cpu-{path.name}"
    copy.write_text(yaml.safe_dump(cfg))
    monkeypatch.chdir(path.parent)
    try:
        return make_parser().parse_args_and_config(["--config", str(copy)])
    finally:
        copy.unlink()


@pytest.mark.parametrize("name", ["qwen_lora_sft.yaml", "minimal.yaml", "llama_qlora_zero2.yaml"])
def test_trl_files_read_as_trl_parses_them(name, tmp_path, monkeypatch):
    path = TRL / name
    _, training, model, _ = _trl_parse(path, tmp_path, monkeypatch)
    reading = read_user_configs([path], Stack())
    plan = reading.plan
    assert reading.model == model.model_name_or_path
    assert plan["micro_batch"] == training.per_device_train_batch_size
    assert plan["grad_accum"] == training.gradient_accumulation_steps
    assert plan["seq_len"] == training.max_length
    assert plan["checkpointing"] == ("full" if training.gradient_checkpointing else "none")
    assert plan.get("method", "full") == ("qlora" if model.load_in_4bit else "lora" if model.use_peft else "full")
    if model.use_peft:
        assert plan["lora_rank"] == model.lora_r
        assert plan["lora_alpha"] == model.lora_alpha
        assert plan["lora_dropout"] == model.lora_dropout
        targets = model.lora_target_modules
        assert plan["lora_targets"] == ([targets] if isinstance(targets, str) else list(targets))
    # bf16 autocast (TRL's default when fp16 is off) over weights loaded in model.dtype
    amp = "bf16" if training.bf16 else "fp16" if training.fp16 else None
    loaded_16 = model.dtype in ("bfloat16", "float16")
    if model.use_peft or not loaded_16:
        assert plan["precision"] == (f"amp-{amp}" if amp else "fp32")
    else:
        assert plan["precision"] == amp


def test_trl_defaults_come_from_trl(monkeypatch, tmp_path):
    """A file with only the model and dataset takes SFTConfig's and ModelConfig's defaults."""
    from trl import ModelConfig, SFTConfig

    reading = read_user_configs([TRL / "minimal.yaml"], Stack())
    defaults = {f.name: f.default for f in SFTConfig.__dataclass_fields__.values()}
    model_defaults = {f.name: f.default for f in ModelConfig.__dataclass_fields__.values()}
    assert reading.plan["seq_len"] == defaults["max_length"]
    assert reading.plan["micro_batch"] == defaults["per_device_train_batch_size"]
    assert (reading.plan["checkpointing"] == "full") is defaults["gradient_checkpointing"]
    assert model_defaults["dtype"] == "float32" and reading.plan["precision"] == "amp-bf16"
    assert "(default)" in " ".join(k.key for k in reading.read)


def test_qlora_deepspeed_reference_is_followed():
    reading = read_user_configs([TRL / "llama_qlora_zero2.yaml"], Stack())
    assert reading.formats == ["trainer-args", "deepspeed"]
    assert reading.plan["shard"] == "zero2"
    assert reading.plan["optimizer"] == "paged-adamw-8bit"
    # issue 28: reduce_bucket_size is billed (the reduce buckets), no longer "not billed": zero2.json says "auto",
    # which transformers fills from the hidden size (the plan's None)
    assert not reading.not_billed
    assert json.loads((TRL / "zero2.json").read_text())["zero_optimization"]["reduce_bucket_size"] == "auto"
    assert reading.plan["reduce_bucket_size"] is None
    assert str(TRL / "zero2.json") in {k.file for k in reading.read}


def test_hf_file_read_as_hf_argument_parser_parses_it():
    from transformers import HfArgumentParser, TrainingArguments

    cfg = yaml.safe_load((HF / "training_args.yaml").read_text()) | {"use_cpu": True}
    (args,) = HfArgumentParser(TrainingArguments).parse_dict(cfg)
    reading = read_user_configs([HF / "training_args.yaml"], Stack())
    assert reading.model is None and reading.formats == ["trainer-args"]
    assert reading.plan["micro_batch"] == args.per_device_train_batch_size
    assert reading.plan["grad_accum"] == args.gradient_accumulation_steps
    assert reading.plan["optimizer"] == BILLED[args.optim.value] == "adamw-foreach"
    assert reading.plan["checkpointing"] == "full" and args.gradient_checkpointing
    assert reading.plan["loss"] == "fused-ce"  # liger_kernel_config: the fused cross-entropy alone
    assert "precision" not in reading.plan  # TrainingArguments does not say the weights' dtype ...
    assert [n.key for n in reading.not_billed] == ["bf16"]  # ... and says so


def test_hf_fsdp_json():
    from transformers import HfArgumentParser, TrainingArguments

    path = HF / "training_args_fsdp.json"
    (args,) = HfArgumentParser(TrainingArguments).parse_json_file(str(path))
    reading = read_user_configs([path], Stack())
    assert reading.plan["shard"] == "fsdp" and reading.plan["offload"] == "optimizer+params"
    assert (
        args.fsdp is True and args.fsdp_config["cpu_offload"] is True
    )  # transformers' reading of "full_shard offload"
    assert reading.plan["checkpointing"] == "full"
    assert {n.key for n in reading.not_billed} == {"optim", "fp16"}


def test_optimizer_default_follows_the_stack():
    """transformers' `default_optim`: adamw_torch_fused only with torch ≥ 2.8 (transformers/training_args.py)."""
    from transformers.training_args import TrainingArguments

    new = Stack({"transformers": "5.24.0", "torch": "2.9.0"})
    old_torch = Stack({"transformers": "5.24.0", "torch": "2.7.1"})
    old_transformers = Stack({"transformers": "4.46.3", "torch": "2.5.1"})
    assert default_optimizer(new) is Optimizer.ADAMW_FUSED  # memdoc's own default
    assert TrainingArguments.default_optim == "adamw_torch_fused"  # the installed torch is ≥ 2.8
    assert default_optimizer(old_torch) == default_optimizer(old_transformers) == BILLED["adamw_torch"]
    doc = SourceDoc("t.yaml", {"output_dir": "o"})
    assert read_trainer_args(doc, old_transformers).plan["optimizer"] == "adamw-foreach"
    assert "optimizer" not in read_trainer_args(doc, new).plan


def _doc(tmp_path: Path, text: str) -> SourceDoc:
    path = tmp_path / "cfg.yaml"
    path.write_text(text)
    return load_source(path)


@pytest.mark.parametrize(
    "text,message",
    [
        ("output_dir: o\nbf16: true\nfp16: true\n", "cfg.yaml:3: fp16: bf16 and fp16 are both true"),
        (
            "output_dir: o\nper_device_train_batch_size: two\n",
            "cfg.yaml:2: per_device_train_batch_size: must be a positive integer",
        ),
        ("model_name_or_path: m\nuse_peft: true\nlora_r: 0\n", "cfg.yaml:3: lora_r: must be a positive integer"),
        (
            "output_dir: o\noptim: adamw_torch_fusd\n",
            "cfg.yaml:2: optim: 'adamw_torch_fusd' is not an optimizer transformers knows (did "
            "you mean adamw_torch_fused?)",
        ),
        ("model_name_or_path: m\nload_in_4bit: true\n", "cfg.yaml:2: load_in_4bit: load_in_4bit needs use_peft"),
        ("model_name_or_path: m\ndtype: int8\n", "cfg.yaml:2: dtype: 'int8' is not one of"),
        (
            "model_name_or_path: m\nuse_peft: true\nlora_target_modules: 3\n",
            "cfg.yaml:3: lora_target_modules: must be module names",
        ),
    ],
)
def test_bad_values_are_one_line_errors_naming_file_line_and_key(tmp_path, text, message):
    with pytest.raises(ConfigError) as err:
        read_trainer_args(_doc(tmp_path, text), Stack())
    assert message in str(err.value) and "\n" not in str(err.value)


def test_max_seq_length_of_trl_before_0_20_is_read():
    """TRL < 0.20 called SFTConfig.max_length `max_seq_length`."""
    doc = SourceDoc("old.yaml", {"model_name_or_path": "m", "max_seq_length": 4096})
    assert read_trainer_args(doc, Stack()).plan["seq_len"] == 4096


def test_inline_deepspeed_dict_is_read_as_deepspeed():
    """TrainingArguments.deepspeed takes a dict too (transformers/training_args.py)."""
    doc = SourceDoc("t.yaml", {"output_dir": "o", "deepspeed": {"zero_optimization": {"stage": 3}}}, {"deepspeed": 2})
    reading = read_trainer_args(doc, Stack())
    assert reading.plan["shard"] == "zero3" and not reading.referenced
    assert any(k.file == "t.yaml:2 (deepspeed)" and k.key == "zero_optimization.stage" for k in reading.read)


def test_activation_checkpointing_kwargs():
    """transformers 5's `activation_checkpointing_kwargs`: `every_n_layers` and `offload` (training_args.py help)."""
    from transformers import HfArgumentParser, TrainingArguments

    cfg = {
        "output_dir": "o",
        "activation_checkpointing": True,
        "activation_checkpointing_kwargs": {"every_n_layers": 2, "offload": True},
        "use_cpu": True,
    }
    (args,) = HfArgumentParser(TrainingArguments).parse_dict(cfg)
    reading = read_trainer_args(SourceDoc("t.yaml", cfg), Stack())
    assert reading.plan["checkpointing"] == "full" and args.activation_checkpointing
    assert reading.plan["checkpoint_every"] == args.activation_checkpointing_kwargs["every_n_layers"]
    # issue 29: offload is billed now (it was a key not billed): the plan field transformers' switch sets
    assert reading.plan["activation_offload"] is args.activation_checkpointing_kwargs["offload"] is True
    assert not reading.not_billed


def test_trls_own_activation_offloading_is_listed_as_not_billed(tmp_path):
    """TRL's `SFTConfig.activation_offloading` (a field of the installed TRL) offloads every activation, not only
    the checkpointed inputs that `--activation-offload` bills: listed as not billed, never read as it."""
    import dataclasses

    import trl

    assert "activation_offloading" in {f.name for f in dataclasses.fields(trl.SFTConfig)}
    path = tmp_path / "sft.yaml"
    path.write_text("model_name_or_path: meta-llama/Llama-3.2-1B\nactivation_offloading: true\n")
    reading = read_trainer_args(load_source(path), Stack())
    assert "activation_offload" not in reading.plan
    assert [n.key for n in reading.not_billed] == ["activation_offloading"]
