"""Unit tests of `memdoc.core.doctor.quantify`: levers applied to a plan, and what the bill says they save."""

from __future__ import annotations

import pytest

from memdoc.core.billing.bill import compute_bill
from memdoc.core.doctor.quantify import apply_lever, quantify
from memdoc.core.doctor.symptoms import Prescription
from memdoc.core.model.gpu import resolve_gpu
from memdoc.core.model.plan import Checkpointing, Offload, Optimizer, parse_plan
from memdoc.resolve.models import resolve_model

EIGHT_BIT = parse_plan(optimizer="adamw-8bit", shard="zero3", gpus=2)


@pytest.mark.parametrize(
    "lever",
    [
        {"offload": "optimizer"},
        {"offload": "optimizer", "checkpointing": "full"},  # offload not the last key
        {"checkpointing": "full", "offload": "optimizer"},
    ],
)
def test_offload_lever_replaces_the_8bit_optimizer_whatever_the_key_order(lever):
    # ZeRO-Offload steps with DeepSpeed's CPU Adam: a bitsandbytes 8-bit GPU optimizer cannot stay.
    new = apply_lever(EIGHT_BIT, lever)
    assert new is not None
    assert new.offload is Offload.OPTIMIZER
    assert new.optimizer is Optimizer.ADAMW
    assert new.checkpointing is (Checkpointing.FULL if "checkpointing" in lever else Checkpointing.NONE)


def test_halving_the_micro_batch_keeps_the_effective_batch():
    plan = parse_plan(batch=8, accum=2)
    new = apply_lever(plan, {"micro_batch": "half"})
    assert (new.micro_batch, new.grad_accum) == (4, 4)


def test_levers_that_change_nothing_or_are_not_plan_fields_give_none():
    plan = parse_plan(batch=1, checkpointing="full")
    assert apply_lever(plan, {"micro_batch": "half"}) is None  # already 1
    assert apply_lever(plan, {"checkpointing": "full"}) is None  # already on
    assert apply_lever(plan, {"optimizer_in_backward": True}) is None  # not a TrainingPlan field
    # issue 29: activation offloading is a plan field now; on a checkpointed plan it is a change
    assert apply_lever(plan, {"activation_offload": True}) == plan.replace(activation_offload=True)
    assert apply_lever(plan, {}) is None


def test_quantify_bills_each_lever_alone():
    model = resolve_model("meta-llama/Llama-2-7b")
    plan = parse_plan(batch=4, seq=2048)
    gpu = resolve_gpu("80")
    p_ckpt = Prescription(id="ckpt", action="checkpoint", why="", time_cost="", lever={"checkpointing": "full"}, how={})
    p_none = Prescription(id="x", action="read the docs", why="", time_cost="", lever=None, how={})
    base, (ckpt, none) = quantify([p_ckpt, p_none], model, plan, gpu)
    after = compute_bill(model, plan.replace(checkpointing=Checkpointing.FULL), gpu)
    # a tensor lever is credited with the smaller of the process-total and the tensor (allocated) saving:
    # the simulated fragmentation it shifts is not the lever's doing
    expected = min(base.process_total - after.process_total, base.peak_allocated - after.peak_allocated)
    assert ckpt.saves_bytes == expected > 0
    assert ckpt.fits_alone is after.fits
    assert (none.saves_bytes, none.fits_alone, none.note) == (None, None, "no memory lever")
