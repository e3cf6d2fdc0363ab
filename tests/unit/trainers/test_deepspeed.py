"""The DeepSpeed reader on real-looking DeepSpeed JSONs, each accepted by DeepSpeed's own
`DeepSpeedZeroConfig` (deepspeed/runtime/zero/config.py); what memdoc reads is what DeepSpeed parsed."""

from __future__ import annotations

import json

import pytest
from conftest import FIXTURES

from memdoc.core.model.stack import Stack
from memdoc.core.trainers.deepspeed.read import BUCKETS, STAGE3_ONLY, read_deepspeed
from memdoc.errors import ConfigError
from memdoc.resolve.user_config import load_source

DS = FIXTURES / "user_configs" / "deepspeed"
SHARD = {0: "none", 1: "zero1", 2: "zero2", 3: "zero3"}
KNOBS = {
    "reduce_bucket_size": "reduce_bucket_size",
    "allgather_bucket_size": "allgather_bucket_size",
    "stage3_prefetch_bucket_size": "prefetch_bucket_size",
    "stage3_param_persistence_threshold": "param_persistence_threshold",
    "stage3_max_live_parameters": "max_live_parameters",
    "sub_group_size": "sub_group_size",
    "overlap_comm": "overlap_comm",
    "contiguous_gradients": "contiguous_gradients",
}
"""Plan field (= the ds_config key) -> `DeepSpeedZeroConfig` attribute (deepspeed/runtime/zero/config.py 0.19.8)."""


def _zero(path):
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    return DeepSpeedZeroConfig(**json.loads(path.read_text())["zero_optimization"])


@pytest.mark.parametrize("name", sorted(p.name for p in DS.glob("*.json")))
def test_read_as_deepspeed_parses_it(name):
    path = DS / name
    zero = _zero(path)
    raw = json.loads(path.read_text())
    reading = read_deepspeed(load_source(path), Stack())
    assert reading.plan["shard"] == SHARD[int(zero.stage)]
    optimizer = (
        str(getattr(zero.offload_optimizer.device, "value", zero.offload_optimizer.device))
        if zero.offload_optimizer
        else "none"
    )
    param = (
        str(getattr(zero.offload_param.device, "value", zero.offload_param.device)) if zero.offload_param else "none"
    )
    if optimizer == "none":
        assert "offload" not in reading.plan
    else:
        assert reading.plan["offload"] == ("optimizer+params" if param != "none" else "optimizer")
        assert reading.plan["offload_to"] == optimizer
    for key, plan_field in (
        ("train_micro_batch_size_per_gpu", "micro_batch"),
        ("gradient_accumulation_steps", "grad_accum"),
    ):
        if raw.get(key, "auto") == "auto":
            assert plan_field not in reading.plan  # "auto": the trainer's value
        else:
            assert reading.plan[plan_field] == raw[key]
    # issue 28: the bucket knobs are billed now: each plan value is what DeepSpeed's own parser made of the key
    # (its default when absent), None where transformers fills "auto"; only the reuse distance is not billed
    for key, attribute in KNOBS.items():
        if key in STAGE3_ONLY and key not in raw["zero_optimization"] and int(zero.stage) != 3:
            assert key not in reading.plan  # a knob only ZeRO-3 reads: the plan keeps its own default
        elif raw["zero_optimization"].get(key) == "auto":
            assert reading.plan[key] is None
        else:
            assert reading.plan[key] == getattr(zero, attribute), key
    buckets = {f"zero_optimization.{k}" for k in BUCKETS if k in raw["zero_optimization"]}
    assert {n.key for n in reading.not_billed} == buckets


def test_enabled_bf16_is_deepspeed_mixed_precision():
    """DeepSpeed's bf16 keeps fp32 master weights and optimizer states: memdoc's amp-bf16."""
    reading = read_deepspeed(load_source(DS / "zero1_bf16.json"), Stack())
    assert reading.plan["precision"] == "amp-bf16"
    zero3 = read_deepspeed(load_source(DS / "zero3_offload_nvme.json"), Stack())
    assert "precision" not in zero3.plan  # "auto"


@pytest.mark.parametrize(
    "text,message",
    [
        ('{\n  "zero_optimization": {"stage": 4}\n}', "ds.json:2: zero_optimization.stage: must be 0, 1, 2 or 3"),
        (
            '{\n  "zero_optimization": {"stage": 2},\n  "bf16": {"enabled": true},\n  "fp16": {"enabled": true}\n}',
            "ds.json:4: fp16.enabled: bf16.enabled and fp16.enabled are both true",
        ),
        (
            '{\n  "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "gpu"}}\n}',
            "ds.json:2: zero_optimization.offload_optimizer.device: must be cpu, nvme or none",
        ),
        (
            '{\n  "zero_optimization": {"stage": 2},\n  "train_micro_batch_size_per_gpu": "four"\n}',
            "ds.json:3: train_micro_batch_size_per_gpu: must be a positive integer",
        ),
    ],
)
def test_bad_values_name_file_line_and_key(tmp_path, text, message):
    path = tmp_path / "ds.json"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        read_deepspeed(load_source(path), Stack())
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"stage3_gather_16bit_weights_on_model_save": True},
        {"stage3_gather_16bit_weights_on_model_save": False},
        {"stage3_gather_fp16_weights_on_model_save": True},
    ],
)
def test_zero3_save_gathers_exactly_when_deepspeed_does(tmp_path, extra):
    """The save gathers the 16-bit model on rank 0 when DeepSpeed's own parse says so (its default: not)."""
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"zero_optimization": {"stage": 3, **extra}}))
    gathers = _zero(path).gather_16bit_weights_on_model_save
    reading = read_deepspeed(load_source(path), Stack())
    from memdoc.core.billing.run_phases import save_gathers
    from memdoc.core.model.plan import parse_plan

    plan = parse_plan(shard="zero3", gpus=2, save_gather=reading.plan.get("save_gather"))
    assert save_gathers(plan) is gathers
