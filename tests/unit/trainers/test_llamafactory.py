"""The LLaMA-Factory reader (`memdoc.core.trainers.llamafactory.read`) against LLaMA-Factory's own examples,
its own parser's defaults (`get_train_args`), transformers' optimizer default per stack, and memdoc's
emitter (the round trip over generated plans)."""

from __future__ import annotations

import os
from importlib.metadata import version

import pytest
import yaml
from conftest import FIXTURES
from generated_plans import PLAN_VALUES, emitted_and_read_back, generated_plan, load_doc
from hypothesis import HealthCheck, given, settings

from memdoc.core.model.plan import TrainingPlan
from memdoc.core.model.stack import Stack
from memdoc.core.trainers.hf.defaults import hf_default_optim
from memdoc.core.trainers.llamafactory.read import read_llamafactory
from memdoc.errors import ConfigError

LF = FIXTURES / "user_configs" / "llamafactory"
MODEL = "meta-llama/Llama-3.1-8B"
DS_Z3 = os.path.normpath(str(LF / "examples/deepspeed/ds_z3_config.json"))

os.environ.setdefault("DISABLE_VERSION_CHECK", "1")  # LLaMA-Factory pins transformers<=5.6; its parser is what we test


def read_text(text: str, stack: Stack | None = None, name: str = "lf.yaml"):
    return read_llamafactory(load_doc(name, text), stack or Stack())


def installed_stack() -> Stack:
    return Stack({p: version(p) for p in ("transformers", "torch")}, source="installed")


# --------------------------------------------------------------------------------------------
# Configs in the shape of LLaMA-Factory's examples (tests/fixtures/user_configs/SOURCES.md)


def test_lora_sft_example():
    """fixtures llamafactory/llama3_lora_sft.yaml: finetuning_type lora, lora_target all (rank: default 8),
    cutoff_len 1024, batch 1, accumulation 8, bf16 (LoRA base in bf16 under autocast), checkpointing on
    (LLaMA-Factory's default), optim absent (transformers' default)."""
    r = read_llamafactory(load_doc(LF / "llama3_lora_sft.yaml"), Stack())
    assert r.model == "meta-llama/Meta-Llama-3-8B-Instruct"
    assert r.plan == {
        "method": "lora",
        "lora_rank": 8,
        "lora_dropout": 0.0,
        "lora_targets": ["all-linear"],
        "precision": "amp-bf16",
        "optimizer": "adamw-fused",
        "micro_batch": 1,
        "grad_accum": 8,
        "seq_len": 1024,
        "checkpointing": "full",
        "attention": "sdpa",
        "loss": "hf",
    }
    assert r.not_billed == [] and r.referenced == [] and r.formats == ["llamafactory"]


def test_qlora_otfq_example():
    """fixtures llamafactory/llama3_lora_sft_otfq.yaml: quantization_bit 4 with bitsandbytes, lora_rank 8,
    cutoff_len 2048, accumulation 8."""
    r = read_llamafactory(load_doc(LF / "llama3_lora_sft_otfq.yaml"), Stack())
    assert r.plan["method"] == "qlora" and r.plan["lora_rank"] == 8
    assert (r.plan["micro_batch"], r.plan["grad_accum"], r.plan["seq_len"]) == (1, 8, 2048)
    assert {k.key for k in r.read if k.field == "method"} == {"finetuning_type", "quantization_bit"}


def test_full_sft_example_with_deepspeed():
    """fixtures llamafactory/llama3_full_sft.yaml: full, bf16 (fp32 master weights: amp-bf16), ZeRO-3 JSON
    named relative to the YAML."""
    r = read_llamafactory(load_doc(LF / "llama3_full_sft.yaml"), Stack())
    assert r.plan["method"] == "full" and r.plan["precision"] == "amp-bf16"
    assert (r.plan["micro_batch"], r.plan["grad_accum"], r.plan["seq_len"]) == (1, 2, 2048)
    assert r.referenced == [DS_Z3]


def test_lora_ds3_example():
    r = read_llamafactory(load_doc(LF / "llama3_lora_sft_ds3.yaml"), Stack())
    assert r.plan["method"] == "lora" and r.plan["grad_accum"] == 2
    assert r.referenced == [DS_Z3]


@pytest.mark.parametrize("name", sorted(p.name for p in LF.glob("*.yaml")))
def test_every_example_gives_a_valid_plan(name):
    r = read_llamafactory(load_doc(LF / name), Stack())
    TrainingPlan.from_dict(r.plan)
    data = load_doc(LF / name).data
    assert all(k.key in data for k in r.read)


# --------------------------------------------------------------------------------------------
# defaults: LLaMA-Factory's parser and transformers' optimizer default per stack


def _get_train_args(cfg: dict, monkeypatch):
    parser = pytest.importorskip("llamafactory.hparams.parser")
    monkeypatch.setattr(parser, "is_torch_bf16_gpu_available", lambda: True)
    return parser.get_train_args({**cfg, "use_cpu": True})


def test_absent_keys_take_llamafactorys_defaults(monkeypatch, tmp_path):
    minimal = {"model_name_or_path": MODEL, "stage": "sft", "do_train": True, "dataset": "d", "template": "llama3"}
    model_args, data_args, training_args, finetuning_args, _ = _get_train_args(
        {**minimal, "output_dir": str(tmp_path)}, monkeypatch
    )
    r = read_text(yaml.safe_dump(minimal), installed_stack())
    assert r.plan["micro_batch"] == training_args.per_device_train_batch_size
    assert r.plan["grad_accum"] == training_args.gradient_accumulation_steps
    assert r.plan["seq_len"] == data_args.cutoff_len
    assert r.plan["method"] == finetuning_args.finetuning_type == "lora"
    assert r.plan["lora_rank"] == finetuning_args.lora_rank
    assert r.plan["lora_dropout"] == finetuning_args.lora_dropout
    assert finetuning_args.lora_target == ["all"] and r.plan["lora_targets"] == ["all-linear"]
    assert r.plan["checkpointing"] == ("none" if model_args.disable_gradient_checkpointing else "full")
    optim = {"adamw_torch_fused": "adamw-fused", "adamw_torch": "adamw-foreach"}[training_args.optim]
    assert r.plan["optimizer"] == optim


def test_default_optim_follows_the_stack():
    """transformers' own default for the installed stack, and the two sides of the switch (4.54, torch 2.8)."""
    from transformers import TrainingArguments

    assert hf_default_optim(installed_stack()) == TrainingArguments.__dataclass_fields__["optim"].default
    old = Stack({"transformers": "4.51.3", "torch": "2.6.0"}, source="--stack")
    new = Stack({"transformers": "5.24.0", "torch": "2.10.0"}, source="--stack")
    old_torch = Stack({"transformers": "4.57.1", "torch": "2.7.1"}, source="--stack")
    assert read_text("x: 1\n", old).plan["optimizer"] == "adamw-foreach"
    assert read_text("x: 1\n", new).plan["optimizer"] == "adamw-fused"
    assert read_text("x: 1\n", old_torch).plan["optimizer"] == "adamw-foreach"
    assert read_text("optim: adamw_torch_fused\n", old).plan["optimizer"] == "adamw-fused"  # the file wins


# --------------------------------------------------------------------------------------------
# mappings


@pytest.mark.parametrize(
    "text,field,value",
    [
        ("finetuning_type: full\npure_bf16: true\nbf16: true\n", "precision", "bf16"),
        ("finetuning_type: full\nfp16: true\n", "precision", "amp-fp16"),
        ("finetuning_type: full\n", "precision", "fp32"),
        ("fp16: true\n", "precision", "amp-fp16"),
        ("bf16: false\n", "precision", "bf16"),  # LoRA base loaded in the inferred bf16, no autocast
        ("lora_target: q_proj,v_proj\n", "lora_targets", ["q_proj", "v_proj"]),
        ("lora_rank: 64\nlora_alpha: 16\n", "lora_alpha", 16),
        ("flash_attn: disabled\n", "attention", "eager"),
        ("flash_attn: fa2\n", "attention", "sdpa"),
        ("disable_gradient_checkpointing: true\n", "checkpointing", "none"),
        ("enable_liger_kernel: true\n", "loss", "fused"),
        ("optim: paged_adamw_8bit\n", "optimizer", "paged-adamw-8bit"),
        ("optim: sgd\noptim_args: momentum=0.9\n", "optimizer", "sgd"),
        ("fsdp: full_shard auto_wrap\n", "shard", "fsdp"),
        ("fsdp: [shard_grad_op, auto_wrap]\n", "shard", "zero2"),
        ("fsdp: full_shard offload auto_wrap\n", "offload", "optimizer+params"),
    ],
)
def test_mapping(text, field, value):
    assert read_text(text).plan[field] == value


@pytest.mark.parametrize(
    "text,key",
    [
        ("quantization_bit: 8\n", "quantization_bit"),
        ("quantization_bit: 4\nquantization_method: hqq\n", "quantization_bit"),
        ("finetuning_type: freeze\n", "finetuning_type"),
        # `stage: dpo` was listed here until issue 23 made it a plan field (task dpo, tests/unit/user_config/
        # test_post_training.py)
        ("use_galore: true\n", "use_galore"),
        ("use_dora: true\n", "use_dora"),
        ("optim: adamw_torch_4bit\n", "optim"),
        ("gradient_checkpointing: false\n", "gradient_checkpointing"),
    ],
)
def test_memory_keys_memdoc_does_not_bill_are_listed(text, key):
    assert key in {n.key for n in read_text(text).not_billed}


@pytest.mark.parametrize(
    ("text", "key"),
    [("neat_packing: true\n", "neat_packing"), ("packing: true\n", "packing"), ("stage: pt\n", "stage")],
)
def test_packing_keys_read_as_packing(text, key):
    # issue 29 bills packing (these were notes): llamafactory/hparams/data_args.py 0.9.5 `neat_packing` sets
    # `packing`; hparams/parser.py packs stage pt by default
    reading = read_text(text)
    assert reading.plan["packing"] is True and key not in {n.key for n in reading.not_billed}


# --------------------------------------------------------------------------------------------
# errors: one line, file:line: key: message


@pytest.mark.parametrize(
    "text,expected",
    [
        ("model_name_or_path: m\ncutoff_len: long\n", "lf.yaml:2: cutoff_len: must be a positive integer, got 'long'"),
        (
            "per_device_train_batch_size: -1\n",
            "lf.yaml:1: per_device_train_batch_size: must be a positive integer, got -1",
        ),
        ("lora_dropout: [0.1]\n", "lf.yaml:1: lora_dropout: must be a number, got [0.1]"),
        ("bf16: yes please\n", "lf.yaml:1: bf16: must be true or false, got 'yes please'"),
        ("flash_attn: fa9\n", "lf.yaml:1: flash_attn: 'fa9' is not one of: auto, sdpa, fa2, fa3, disabled"),
        ("bf16: true\nfp16: true\n", "lf.yaml:2: fp16: bf16 and fp16 are both true; choose one"),
        ("pure_bf16: true\nfp16: true\n", "lf.yaml:2: fp16: pure_bf16 and fp16 are both true; choose one"),
        (
            "finetuning_type: full\nquantization_bit: 4\n",
            "lf.yaml:2: quantization_bit: quantization needs finetuning_type lora (or oft), not full",
        ),
        (
            "deepspeed: ds.json\nfsdp: full_shard\n",
            "lf.yaml:2: fsdp: deepspeed and fsdp both shard the model; keep one",
        ),
    ],
)
def test_errors_are_one_line_with_file_line_and_key(text, expected):
    with pytest.raises(ConfigError) as err:
        read_text(text)
    assert str(err.value) == expected and "\n" not in str(err.value)


# --------------------------------------------------------------------------------------------
# round trip: memdoc's emitter, read back


def llamafactory_runs(plan: TrainingPlan) -> str:
    """The precision LLaMA-Factory runs for the emitted config (parser.py, model/adapter.py, and the
    emitter's notes): a LoRA base is loaded in the compute dtype, so peft bf16/fp16 under `bf16/fp16: true`
    are autocast (amp-*), and a LoRA fp32 plan (no flag) gets the inferred bf16; a full fp16 plan has no
    LLaMA-Factory key (no flag: fp32 weights) and pure bf16 under ZeRO-3 is refused, emitted as amp-bf16."""
    p = plan.precision.value
    if plan.is_peft:
        return {"bf16": "amp-bf16", "fp16": "amp-fp16", "fp32": "bf16"}.get(p, p)
    if p == "fp16":
        return "fp32"
    if p == "bf16" and plan.shard.value == "zero3":
        return "amp-bf16"
    return p


def expected_back(plan: TrainingPlan) -> dict:
    """Every plan field a LLaMA-Factory YAML expresses, as the reader must give it back. Not expressible
    (so not compared): checkpoint_every and kbit_upcast (notes only), gpus_per_node and nodes (the launch
    command), FSDP (the accelerate YAML beside it: the accelerate reader's), a ZeRO stage, offload and their
    precision (the DeepSpeed JSON: `referenced`), allocator (an environment variable), allow_long."""
    d = plan.to_dict()
    out = {k: d[k] for k in ("method", "optimizer", "micro_batch", "seq_len", "grad_accum", "attention")}
    out["precision"] = llamafactory_runs(plan)
    out["checkpointing"] = "none" if plan.checkpointing.value == "none" else "full"  # selective: no key
    out["loss"] = "hf" if plan.loss.value == "hf" else "fused"  # enable_liger_kernel applies every kernel
    if plan.is_peft:
        out.update({k: d[k] for k in ("lora_rank", "lora_alpha", "lora_dropout", "lora_targets")})
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(values=PLAN_VALUES)
def test_round_trip_through_the_emitter(values):
    plan = generated_plan(values)
    emitted, reading = emitted_and_read_back(
        "llamafactory", MODEL, plan, lambda doc: read_llamafactory(doc, installed_stack())
    )
    assert reading.model == MODEL
    assert reading.plan == expected_back(plan)
    assert reading.not_billed == []
    ds = [s.name for s in emitted.side_files if s.kind == "json"]
    assert reading.referenced == ds
