"""Issue 25: the verdict, --max, the ladder and the dataset fit give the one fit rule's answer at the edge.

Each case is a card sized around a bill's own simulated minimum memory (a generic `--gpu <GiB>` card, whose
size does not change that minimum): just over it, just under it, and between it and the process total (the
step runs only because the allocator releases its cache). The expected answer is the rule's arithmetic
(`fit_answer`: ±MIN_MEMORY_ERROR of the minimum), not memdoc's printed text.
"""

from __future__ import annotations

import pytest

from memdoc.core.billing.bill import compute_bill
from memdoc.core.billing.verdict import MIN_MEMORY_ERROR, Fit, bounded_fit, fit_answer
from memdoc.core.model.gpu import generic_gpu
from memdoc.core.model.plan import parse_plan
from memdoc.core.remedies.climb import climb
from memdoc.core.remedies.dataset_fit import dataset_fit
from memdoc.core.remedies.maximum import maximum
from memdoc.core.reports.bill import bill_report
from memdoc.resolve.models import resolve_model
from memdoc.units import GiB

pytestmark = pytest.mark.slow  # several allocator simulations per case

MODEL = "meta-llama/Llama-3.1-8B"
PLAN = dict(batch=2, seq=8192, checkpointing="full")  # the H100 example: fragmentation ≈ 7 GiB
EDGE = 16 * 2**20  # 16 MiB either side of the minimum


def _edge_bill():
    model, plan = resolve_model(MODEL), parse_plan(**PLAN)
    return model, plan, compute_bill(model, plan, generic_gpu(80))


def _cards() -> dict[str, int]:
    """Card sizes (bytes) around the bill's minimum memory and process total."""
    _, _, bill = _edge_bill()
    low, high = bill.min_memory_bytes, bill.process_total
    assert high - low > 4 * EDGE  # the case "total over the card, minimum under it" exists
    return {
        "just over the minimum": low + EDGE,
        "just under the minimum": low - EDGE,
        "between the minimum and the process total": (low + high) // 2,
        "comfortable": round(low * (1 + MIN_MEMORY_ERROR)) + EDGE,
        "far under": round(low * (1 - MIN_MEMORY_ERROR)) - EDGE,
    }


CARDS = list(_cards().items())


def _gpu(capacity: int):
    gpu = generic_gpu(capacity / GiB)
    assert abs(gpu.memory_bytes - capacity) <= 1
    return gpu


@pytest.mark.parametrize("case, capacity", CARDS, ids=[c for c, _ in CARDS])
def test_the_verdict_is_the_rule(case, capacity):
    model, plan, ref = _edge_bill()
    gpu = _gpu(capacity)
    bill = compute_bill(model, plan, gpu)
    minimum = ref.min_memory_bytes
    error = round(MIN_MEMORY_ERROR * minimum)
    margin = gpu.memory_bytes - minimum
    expected = Fit.COMFORTABLE if margin > error else Fit.NO if -margin > error else Fit.CLOSE_CALL
    assert bill.min_memory_bytes == minimum  # the card's size does not move the minimum of a generic card
    assert bill.fit.fit is expected and bill.fit_kind is expected
    assert bill.fits is (minimum <= gpu.memory_bytes)
    assert bill.comfortable is (expected is Fit.COMFORTABLE)
    if case == "between the minimum and the process total":
        assert bill.fits and bill.process_total > gpu.memory_bytes


@pytest.mark.parametrize("case, capacity", CARDS, ids=[c for c, _ in CARDS])
def test_max_ladder_and_dataset_agree_with_the_verdict(case, capacity):
    model, plan, _ = _edge_bill()
    gpu = _gpu(capacity)
    answer = compute_bill(model, plan, gpu).fit
    most = maximum(model, plan, gpu, "batch")
    assert (most.comfortable is not None and most.comfortable >= plan.micro_batch) is answer.comfortable
    assert (most.fits is not None and most.fits >= plan.micro_batch) is answer.fits
    longest = dataset_fit([plan.seq_len], model, plan, gpu, seq_cap=None)
    assert ((longest.max_seq_that_fits or 0) >= plan.seq_len) is answer.comfortable
    assert ((longest.max_seq_fits_at_all or 0) >= plan.seq_len) is answer.fits
    report = bill_report(model, plan, gpu)
    assert (report.ladder == []) is answer.comfortable  # a close call climbs on to a comfortable fit
    for step in report.ladder:  # every rung's fits column is the rule's arithmetic on its own minimum
        assert step.fit is fit_answer(step.bill.min_memory_bytes, gpu.memory_bytes).fit


def test_every_ladder_step_that_says_it_fits_is_comfortable():
    model, gpu = resolve_model(MODEL), generic_gpu(24)
    for flags in (dict(), dict(method="full", batch=4), dict(method="lora", seq=8192)):
        steps = climb(model, parse_plan(**flags), gpu)
        assert steps
        climbed = [s for s in steps if s.rung.id != "drop-unneeded"]
        first = next(i for i, s in enumerate(climbed) if s.comfortable)
        assert first == len(climbed) - 1  # the climb stops at the first comfortable rung, not at a close call
        assert steps[-1].comfortable and steps[-1].bill.fit.margin_bytes > steps[-1].bill.fit.error_bytes


def test_the_bounds_decide_the_answer_as_the_minimum_does():
    """`Bill.fits` skips the minimum's bisection when its bounds agree: the answer is the exact one."""
    model, plan, ref = _edge_bill()
    for gib in (40, 70, 76, 80, 84, 88, 92, 100, 120):
        bill = compute_bill(model, plan, generic_gpu(gib))
        assert (bill.fit_kind, bill.fits) == (bill.fit.fit, bill.fit.fits)
    low, high = ref.peak_allocated + ref.overhead_bytes, ref.process_total
    assert low <= ref.min_memory_bytes <= high
    assert bounded_fit(low, high, round(high * 1.2)) == (Fit.COMFORTABLE, True)
    assert bounded_fit(low, high, (low + high) // 2) is None or low * 1.1 > high


# ------------------------------------------------------------------------- explicit choices


def test_method_full_stays_full_until_a_change_is_named():
    """`--method full` (fixed): no rung turns LoRA on unless it says it changes the value the user set."""
    model, gpu = resolve_model(MODEL), generic_gpu(24)
    plan = parse_plan(method="full")
    free = climb(model, plan, gpu)
    assert "lora" in [s.rung.id for s in free]  # without the flag, LoRA is a rung
    steps = climb(model, plan, gpu, fixed=frozenset({"method"}))
    marked = [i for i, s in enumerate(steps) if s.changes_fixed]
    kept = steps[: marked[0]] if marked else steps
    assert all(s.plan.method.value == "full" and not s.changes_fixed for s in kept)
    if marked:
        assert not kept or not kept[-1].comfortable  # a fixed value changes only when the kept ladder falls short
        step = steps[marked[0]]
        assert step.changes_fixed[0][:2] == ("method", "full")
        assert step.fixed_change.startswith("--method ") and "(you set --method full)" in step.fixed_change
        assert step.to_json()["changes_fixed"] is True
