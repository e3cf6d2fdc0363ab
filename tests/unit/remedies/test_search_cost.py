"""Issue 27: the plan search's cost does not grow with the values, and the inference bill's with the layers.

Benchmark-style, but counting operations, not seconds: the bills the search computes (`compute_bill` calls)
and the allocator requests the inference bill simulates.
"""

from __future__ import annotations

import dataclasses

import pytest

import memdoc.core.billing.allocator as allocator
import memdoc.core.remedies.search as search_module
from memdoc.core.billing.inference import InferencePlan, inference_bill
from memdoc.core.model.gpu import resolve_gpu
from memdoc.core.model.plan import TrainingPlan
from memdoc.core.remedies.search import search
from memdoc.errors import PlanError
from memdoc.resolve.models import resolve_model


def _bills(monkeypatch, **kwargs) -> tuple[int, list]:
    calls = []
    real = search_module.compute_bill

    def counting(model, plan, gpu):
        calls.append(plan.micro_batch)
        return real(model, plan, gpu)

    monkeypatch.setattr(search_module, "compute_bill", counting)
    found = search(resolve_model("meta-llama/Llama-3.2-1B"), TrainingPlan(), resolve_gpu("rtx-4090"), **kwargs)
    return len(calls), found


def test_search_bills_do_not_grow_with_the_global_batch(monkeypatch):
    small, _ = _bills(monkeypatch, global_batch=32)
    # 2**25 has 26 divisors, 32 has 6: the bills per combination grow with log2 of the divisors that can
    # fit (binary search), not with the value (65 s at 2**30 before: every integer up to N was tried)
    large, found = _bills(monkeypatch, global_batch=2**25)
    assert large <= 2 * small, (small, large)
    assert found and all(c.plan.micro_batch * c.plan.grad_accum == 2**25 for c in found)


def test_search_never_bills_a_micro_batch_whose_layer_inputs_exceed_the_card(monkeypatch):
    gpu = resolve_gpu("rtx-4090")
    micro_batches = []
    real = search_module.compute_bill
    monkeypatch.setattr(
        search_module, "compute_bill", lambda m, p, g: micro_batches.append(p.micro_batch) or real(m, p, g)
    )
    search(resolve_model("meta-llama/Llama-3.2-1B"), TrainingPlan(), gpu, global_batch=2**25)
    # one 16-bit hidden state per token of the micro-batch (hidden 2048, seq 2048: Llama-3.2-1B's config.json
    # and the plan's default) cannot exceed the card; before, the search billed the micro-batch 2**25 first
    assert micro_batches and max(micro_batches) * 2048 * 2048 * 2 <= gpu.memory_bytes


def test_global_batch_beyond_the_largest_published_step_is_refused():
    with pytest.raises(PlanError, match="62,914,560"):
        search(resolve_model("meta-llama/Llama-3.2-1B"), TrainingPlan(), resolve_gpu("rtx-4090"), global_batch=2**31)


def test_fixed_accumulation_at_its_bound_is_one_split():
    """--accum at its bound with the micro-batch free: one micro-batch to try, whatever the value."""
    base = TrainingPlan(grad_accum=62_914_560)
    found = search(
        resolve_model("meta-llama/Llama-3.2-1B"), base, resolve_gpu("rtx-4090"), fixed=frozenset({"grad_accum"})
    )
    assert all(c.plan.grad_accum == 62_914_560 and c.plan.micro_batch == 1 for c in found)


@pytest.mark.parametrize("layers", [600, 1_000_000])
def test_inference_bill_is_flat_in_the_layer_count(monkeypatch, layers):
    model = dataclasses.replace(resolve_model("meta-llama/Llama-3.2-1B"), num_layers=layers)
    requests = []
    real = allocator.CachingAllocator.malloc
    monkeypatch.setattr(
        allocator.CachingAllocator, "malloc", lambda self, n, s=0: requests.append(n) or real(self, n, s)
    )
    bill = inference_bill(model, InferencePlan(plan=TrainingPlan(seq_len=128)), resolve_gpu("h100-sxm"))
    assert bill.process_total >= bill.peak_allocated
    assert len(requests) == 0  # beyond 512 layers: reserved = allocated, as the training bill (no simulation)


def test_inference_bill_simulates_real_depths(monkeypatch):
    model = resolve_model("meta-llama/Llama-3.2-1B")  # 16 layers: weights, 2 × 16 K/V tensors, the transient
    requests = []
    real = allocator.CachingAllocator.malloc
    monkeypatch.setattr(
        allocator.CachingAllocator, "malloc", lambda self, n, s=0: requests.append(n) or real(self, n, s)
    )
    bill = inference_bill(model, InferencePlan(plan=TrainingPlan(seq_len=128)), resolve_gpu("h100-sxm"))
    assert bill.process_total >= bill.peak_allocated
    assert len(requests) == 1 + 2 * 16 + 1
