"""The largest batch or sequence length that fits: doubling, then bisection, over a monotone fit.

Both answers of the one fit rule (`verdict.fit_answer`): the largest value that fits comfortably (more
headroom than the minimum memory's error band) and the largest that fits at all (the minimum within the
card's memory; past the comfortable one it is a close call)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from memdoc.core.billing.bill import Bill, compute_bill
from memdoc.core.model.gpu import GpuSpec
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.plan import TrainingPlan


@dataclass(frozen=True)
class Maximum:
    """`--max`: the largest value of a knob that fits comfortably, and the largest that fits at all."""

    knob: str
    """'batch' or 'seq'."""
    comfortable: int | None
    """Largest value that fits comfortably; None when even 1 does not."""
    fits: int | None
    """Largest value that fits at all (≥ `comfortable`; above it, a close call); None when even 1 does not."""

    def to_json(self) -> dict:
        """The JSON `max` object; `value` is the comfortable one (the field's meaning before the fit rule)."""
        return {"knob": self.knob, "value": self.comfortable, "comfortable": self.comfortable, "fits": self.fits}


def maximum(model: ModelSpec, plan: TrainingPlan, gpu: GpuSpec, knob: str) -> Maximum:
    """The largest micro-batch ('batch') or sequence length ('seq', multiples of 128 up to the model's
    context) that fits `gpu` comfortably, and that fits at all; both searches share their bills.

    The minimum memory is not quite monotone in the knob (the simulated allocator's block rounding moves
    with the sizes, and the minimum's bisection stops within 0.5%): each search starts from the plan's own
    value when it fits, so `--max` never contradicts the plan's verdict."""
    field = "micro_batch" if knob == "batch" else "seq_len"
    bills: dict[int, Bill] = {}

    def bill(value: int) -> Bill:
        if value not in bills:
            bills[value] = compute_bill(model, plan.replace(**{field: value}), gpu)
        return bills[value]

    own = getattr(plan, field)
    comfortable = largest_value(
        knob, model, plan.allow_long, lambda v: bool(bill(v).comfortable), start=own if bill(own).comfortable else None
    )
    start = max(comfortable or 0, own if bill(own).fits else 0) or None
    fits = largest_value(knob, model, plan.allow_long, lambda v: bool(bill(v).fits), start=start)
    return Maximum(knob=knob, comfortable=comfortable, fits=fits)


def max_fitting(
    model: ModelSpec, plan: TrainingPlan, gpu: GpuSpec, knob: str, *, comfortable: bool = True
) -> int | None:
    """Largest micro-batch ('batch') or sequence length ('seq') that fits comfortably (or, with
    `comfortable=False`, at all); None if even 1 does not."""
    field = "micro_batch" if knob == "batch" else "seq_len"

    def ok(value: int) -> bool:
        bill = compute_bill(model, plan.replace(**{field: value}), gpu)
        return bool(bill.comfortable if comfortable else bill.fits)

    return largest_value(knob, model, plan.allow_long, ok)


def largest_value(
    knob: str, model: ModelSpec, allow_long: bool, fits: Callable[[int], bool], *, start: int | None = None
) -> int | None:
    """The largest batch ('batch') or sequence length ('seq') with fits(value): sequences in multiples
    of 128 tokens (single tokens for a context shorter than that), never past the model's context
    unless `allow_long`; None if even 1 does not fit. `start`: a value known to fit (the search begins there)."""
    context = model.max_positions if knob == "seq" and not allow_long else None
    step = 1 if knob == "batch" or (context is not None and context < 128) else 128
    limit = (context or 1 << 20) // step if knob == "seq" and not allow_long else 1 << 20
    found = largest_fitting(lambda n: fits(n * step), limit, start=None if start is None else start // step)
    return None if found is None else found * step


def largest_fitting(fits: Callable[[int], bool], limit: int, *, start: int | None = None) -> int | None:
    """The largest n in 1..limit with fits(n), for a `fits` true up to a boundary (doubling, then
    bisection); None when fits(1) is false. `start`: an n known to fit (≥ 1), where the doubling begins."""
    if start is None or start < 1:
        if limit < 1 or not fits(1):
            return None
        start = 1
    start = min(start, limit)
    low, high = start, start * 2
    while high <= limit and fits(high):
        low, high = high, high * 2
    high = min(high, limit + 1)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low
