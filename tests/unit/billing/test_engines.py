"""Engine semantics (issue 28): the bill against hand arithmetic from the engines' own source lines
(deepspeed 0.19.8, accelerate 1.15, transformers 5.24) and DeepSpeed's own estimators; see docs/engines.md."""

from __future__ import annotations

import pytest

from memdoc.core.billing.bill import compute_bill
from memdoc.core.engines import Engine, engine_layout
from memdoc.core.model.plan import parse_plan
from memdoc.core.model.stack import Stack
from memdoc.core.trainers.base import EmitContext
from memdoc.core.trainers.deepspeed.read import read_deepspeed
from memdoc.core.trainers.deepspeed.write import deepspeed_config
from memdoc.core.trainers.reading import SourceDoc
from memdoc.errors import PlanError
from memdoc.resolve.models import resolve_model

LLAMA_8B = "meta-llama/Llama-3.1-8B"


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@pytest.mark.parametrize(
    "flags,engine,per_param",
    [
        # DDP: pure bf16 weights, grads, AdamW states (--precision bf16): 2 + 2 + 4
        ({}, Engine.DDP, 8),
        # DeepSpeed bf16: 16-bit module (2) + 16-bit grads (2) + fp32 master clone (4, stage_1_and_2.py
        # `weights_partition = ….to(dtype=self.master_weights_and_grads_dtype)`) + fp32 exp_avg/exp_avg_sq (8)
        ({"shard": "zero1", "gpus": 8}, Engine.ZERO1, 16),
        ({"shard": "zero3", "gpus": 8, "precision": "amp-bf16"}, Engine.ZERO3, 16),
        # fp32: the master is still a separate fp32 clone: 4 + 4 + 4 + 8
        ({"shard": "zero2", "gpus": 8, "precision": "fp32"}, Engine.ZERO2, 20),
        # bf16_master_weights_and_grads + bf16_optimizer_states: 2 + 2 + 2 + 4
        ({"shard": "zero3", "gpus": 8, "master_weights": "bf16"}, Engine.ZERO3, 10),
        # accelerate's FSDP upcasts trainable parameters to fp32 under mixed precision (accelerator.py
        # prepare_model; fsdp_utils.py fsdp2_prepare_model): fp32 flat params + fp32 grads + fp32 states
        ({"shard": "fsdp", "gpus": 8}, Engine.FSDP1, 16),
        ({"shard": "fsdp2", "gpus": 8}, Engine.FSDP2, 16),
        # mixed_precision: no on a bf16 model: all bf16
        ({"shard": "fsdp2", "gpus": 8, "master_weights": "bf16"}, Engine.FSDP2, 8),
        # offload without sharding runs as ZeRO-Offload (ZeRO-2 on one GPU, ZeRO-1 on several)
        ({"offload": "optimizer", "optimizer": "adamw-foreach"}, Engine.ZERO2, 16),
    ],
)
def test_layout_bytes_per_parameter(flags, engine, per_param):
    layout = engine_layout(parse_plan(**flags))
    assert layout.engine is engine
    assert layout.full_bytes_per_param() == per_param


def test_zero3_bf16_bill_is_deepspeeds_layout_not_pure_bf16():
    """The issue's example: 8 bytes/param billed before; DeepSpeed allocates 16 (+ the fp32 step gradient)."""
    model = resolve_model(LLAMA_8B)
    p = model.params.total
    bill = compute_bill(model, parse_plan(shard="zero3", gpus=8))
    step = bill.phases["optimizer"]
    h = model.hidden_size
    persistent = bill.buffers.get("unpartitioned small parameters", 0)
    assert step.weights == ceil_div(2 * p, 8) + persistent
    assert step.gradients == ceil_div(2 * p, 8)
    assert step.optimizer == ceil_div(12 * p, 8)
    # stage3.py `_prepare_fp32_grad_for_sub_group`: one sub-group (sub_group_size 1e9) of fp32 gradient in the step
    assert bill.buffers["fp32 step gradient"] == min(10**9, ceil_div(p, 8)) * 4
    # stage3.py __init__ "IPG": one reduce_bucket_size buffer of bf16; HF's "auto" = hidden²
    assert bill.buffers["reduce buckets"] == h * h * 2
    assert step.other == bill.buffers["fp32 step gradient"] + bill.buffers["reduce buckets"]
    # stage3_param_persistence_threshold "auto" = 10 × hidden: the norms (hidden elements) stay whole
    norms = 2 * model.num_layers * h + h
    assert persistent == norms * 2


@pytest.mark.parametrize(
    "flags,expected",
    [
        # the measurement: ZeRO-3 with reduce_bucket_size 5e8 keeps one 1 GB bf16 buffer per rank
        ({"shard": "zero3", "reduce_bucket_size": 500_000_000}, 10**9),
        # LongLoRA's ZeRO-2 with reduce_bucket_size 1e9 and overlap_comm: two 16-bit buckets (3.7 GiB)
        ({"shard": "zero2", "reduce_bucket_size": 10**9}, 4 * 10**9),
        ({"shard": "zero2", "reduce_bucket_size": 10**9, "overlap_comm": False}, 2 * 10**9),
        ({"shard": "zero2", "reduce_bucket_size": 10**9, "contiguous_gradients": False}, 0),
        ({"shard": "fsdp"}, 0),
    ],
)
def test_reduce_buckets_from_the_knobs(flags, expected):
    """stage_1_and_2.py `setup_buckets` (a second buffer with overlap_comm), stage3.py `__init__` (one)."""
    bill = compute_bill(resolve_model("Qwen/Qwen2.5-0.5B"), parse_plan(gpus=2, method="full", **flags))
    assert bill.buffers.get("reduce buckets", 0) == expected


def test_zero3_optimizer_offload_host_per_node():
    """The issue's 134.6 GiB: stage3.py keeps fp32 master (4) + exp_avg/exp_avg_sq (8) + per-sub-group fp32
    gradients (4) + the 16-bit gradient partitions (2) of every rank's partition in host RAM."""
    model = resolve_model(LLAMA_8B)
    p = model.params.total
    bill = compute_bill(model, parse_plan(shard="zero3", gpus=8, offload="optimizer", optimizer="adamw-foreach"))
    part = ceil_div(p, 8)
    assert bill.host == {"gradients": 6 * part, "optimizer": 12 * part}
    assert bill.host_bytes_per_node == 8 * 18 * part
    assert round(bill.host_bytes_per_node / 2**30, 1) == 134.6
    assert bill.phases["optimizer"].optimizer == 0 and bill.phases["optimizer"].gradients == 0


def test_fsdp_cannot_offload_the_optimizer_alone():
    with pytest.raises(PlanError, match="nearest plans: --offload optimizer\\+params, or --shard zero3"):
        parse_plan(shard="fsdp", gpus=8, offload="optimizer")
    with pytest.raises(PlanError, match="offloads to CPU memory only"):
        parse_plan(shard="fsdp2", gpus=8, offload="optimizer+params", offload_to="nvme")


def test_master_weights_needs_an_engine_and_bf16():
    with pytest.raises(PlanError, match="--precision decides"):
        parse_plan(master_weights="bf16")
    with pytest.raises(PlanError, match="needs --precision bf16"):
        parse_plan(shard="zero3", gpus=2, precision="fp32", master_weights="bf16")


def test_bf16_master_is_emitted_with_deepspeeds_keys_and_flagged():
    plan = parse_plan(shard="zero3", gpus=8, master_weights="bf16")
    notes: list[str] = []
    config = deepspeed_config(EmitContext(model_id=LLAMA_8B, plan=plan, peak_allocated=0, process_total=0), notes)
    # deepspeed/runtime/precision_config.py: DeepSpeedBF16Config fields
    from deepspeed.runtime.precision_config import DeepSpeedBF16Config

    assert {"bf16_master_weights_and_grads", "bf16_optimizer_states"} <= set(DeepSpeedBF16Config.model_fields)
    assert config["bf16"]["bf16_master_weights_and_grads"] is True and config["bf16"]["bf16_optimizer_states"] is True
    assert any("numerical risk" in n for n in compute_bill(resolve_model(LLAMA_8B), plan).notes)


def test_emitted_bucket_knobs_are_the_billed_ones():
    """The ds_config memdoc writes, read back as --config, gives the same plan knobs and the same bill."""
    model = resolve_model(LLAMA_8B)
    plan = parse_plan(shard="zero3", gpus=8, reduce_bucket_size=200_000_000)
    config = deepspeed_config(EmitContext(model_id=LLAMA_8B, plan=plan, peak_allocated=0, process_total=0), [])
    zero = config["zero_optimization"]
    assert zero["reduce_bucket_size"] == 200_000_000 and zero["stage3_prefetch_bucket_size"] == "auto"
    reading = read_deepspeed(SourceDoc("ds.json", config, {}), Stack())
    again = parse_plan(**{**reading.plan, "gpus": 8})
    assert compute_bill(model, again).buffers == compute_bill(model, plan).buffers


@pytest.mark.slow
@pytest.mark.parametrize("model_id", [LLAMA_8B, "meta-llama/Llama-3.1-70B"])
def test_against_deepspeeds_own_estimators(model_id):
    """DeepSpeed's estimators model the same layout: ZeRO-2's GPU states (2 + 18/N bytes per parameter) match
    exactly; ZeRO-3's GPU states are 2 bytes/param/N more here (the 16-bit gradient partition, stage3.py
    `grad_partitions_flat_buffer`, which the estimator leaves out), less the fp32 gradient beyond one
    `sub_group_size` group (the estimator counts it for the whole partition; `_prepare_fp32_grad_for_sub_group`
    builds one group at a time); offloaded host RAM per node is 18 bytes per
    parameter against the estimator's 16 × 1.5 (it leaves out that partition and adds a 50% margin)."""
    stage3 = pytest.importorskip("deepspeed.runtime.zero.stage3")
    stage2 = pytest.importorskip("deepspeed.runtime.zero.stage_1_and_2")
    model = resolve_model(model_id)
    p = model.params.total
    z2 = compute_bill(model, parse_plan(shard="zero2", gpus=8)).phases["optimizer"]
    _, gpu2 = stage2.estimate_zero2_model_states_mem_needs(p, num_gpus_per_node=8, cpu_offload=False)
    states2 = (
        z2.weights
        + z2.gradients
        + z2.optimizer
        + compute_bill(model, parse_plan(shard="zero2", gpus=8)).buffers["fp32 step gradient"]
    )
    assert states2 == pytest.approx(gpu2, abs=64)
    b3 = compute_bill(model, parse_plan(shard="zero3", gpus=8))
    z3 = b3.phases["optimizer"]
    largest = b3.states.largest_layer_params
    _, gpu3, _ = stage3.estimate_zero3_model_states_mem_needs(p, largest, num_gpus_per_node=8, cpu_offload=False)
    ours3 = z3.weights - b3.buffers["unpartitioned small parameters"] + z3.gradients + z3.optimizer
    ours3 += b3.buffers["fp32 step gradient"] + 4 * largest
    part = ceil_div(p, 8)
    assert ours3 - gpu3 == pytest.approx(2 * part - 4 * (part - min(part, 10**9)), abs=64)
    off = compute_bill(model, parse_plan(shard="zero3", gpus=8, offload="optimizer", optimizer="adamw-foreach"))
    cpu3, _, _ = stage3.estimate_zero3_model_states_mem_needs(
        p, largest, num_gpus_per_node=8, cpu_offload=True, cpu_offload_params=False
    )
    assert off.host_bytes_per_node == pytest.approx(cpu3 / 1.5 * 18 / 16, abs=64)
