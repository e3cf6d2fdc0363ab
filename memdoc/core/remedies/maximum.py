"""The largest batch or sequence length that fits: doubling, then bisection, over a monotone `fits`."""

from __future__ import annotations

from typing import Callable

from memdoc.core.billing.bill import compute_bill
from memdoc.core.model.gpu import GpuSpec
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.plan import TrainingPlan


def max_fitting(model: ModelSpec, plan: TrainingPlan, gpu: GpuSpec, knob: str) -> int | None:
    """Largest micro-batch ('batch') or sequence length ('seq', multiples of 128 up to the model's context) that fits; None if even 1 does not."""
    field = "micro_batch" if knob == "batch" else "seq_len"
    return largest_value(
        knob, model, plan.allow_long, lambda value: bool(compute_bill(model, plan.replace(**{field: value}), gpu).fits)
    )


def largest_value(knob: str, model: ModelSpec, allow_long: bool, fits: Callable[[int], bool]) -> int | None:
    """The largest batch ('batch') or sequence length ('seq') with fits(value): sequences in multiples
    of 128 tokens (single tokens for a context shorter than that), never past the model's context
    unless `allow_long`; None if even 1 does not fit."""
    context = model.max_positions if knob == "seq" and not allow_long else None
    step = 1 if knob == "batch" or (context is not None and context < 128) else 128
    limit = (context or 1 << 20) // step if knob == "seq" and not allow_long else 1 << 20
    found = largest_fitting(lambda n: fits(n * step), limit)
    return None if found is None else found * step


def largest_fitting(fits: Callable[[int], bool], limit: int) -> int | None:
    """The largest n in 1..limit with fits(n), for a `fits` true up to a boundary (doubling, then
    bisection); None when fits(1) is false."""
    if limit < 1 or not fits(1):
        return None
    low, high = 1, 2
    while high <= limit and fits(high):
        low, high = high, high * 2
    high = min(high, limit + 1)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low
