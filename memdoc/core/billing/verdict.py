"""The one fit rule with its uncertainty, and what the "other" line of a bill holds.

Whether a step fits a card is its simulated minimum memory (`Bill.min_memory_bytes`: the smallest card
the step runs on, the caching allocator replayed at that capacity, plus the CUDA context) against the
card's memory, with that quantity's error band (`fit_answer`): comfortable, close call or does not fit.
The verdict, `--max`, the ladder, the dataset fit and `plan` all use it.

The band comes from the process total's measured error (≈ nvidia-smi): against the 20 real training
steps on an H200 in `benchmarks/data/h200.jsonl` (process total = peak reserved + CUDA context, as
measured), the billed process total (with the simulated caching allocator, `python benchmarks/allocator.py`)
is off by a median 1.1%, and every row is within ±5.6% (the worst an underestimate, the cut-down
Qwen3-MoE). The band is kept at ±10%, wider than this small sample's worst error, because other GPUs,
drivers and torch versions are measured beyond it (published runs P7–P14 of `benchmarks/RESULTS.md`:
|error| ≤ 11.3% but for P12). So a plan whose headroom (or overshoot) is within the band is a close
call: the bill cannot tell fit from OOM there, and says so (`tests/test_robust_output.py` recomputes
these errors from the H200 rows). The inference bill has no allocator simulation: its minimum is its
process total, and `InferenceBill.fit` is `fit_answer` on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

VERDICT_ERROR = 0.10
"""Relative error band of the billed process total: real H200 steps (benchmarks/data/h200.jsonl) are
within ±5.6%; the band is wider for what this sample does not cover (see the module docstring)."""
VERDICT_ERROR_SOURCE = "benchmarks/data/h200.jsonl (20 real H200 steps) and benchmarks/RESULTS.md P7–P14"


class Fit(str, Enum):
    """The one answer to "does it fit", from the simulated minimum memory and its error band (`fit_answer`)."""

    COMFORTABLE = "comfortable"
    """Fits with more headroom than the bill's error: it runs even if the bill is off by its benchmarked error."""
    CLOSE_CALL = "close call"
    """Within the bill's error of the card's memory, on either side: the bill cannot tell fit from OOM."""
    NO = "does not fit"
    """Over the card's memory by more than the bill's error."""


MIN_MEMORY_ERROR = VERDICT_ERROR
"""Relative error band of the simulated minimum memory (`Bill.min_memory_bytes`: the smallest card the step
runs on, the allocator replayed at that capacity, plus the CUDA context). No real run has measured a minimum
yet (that needs a GPU and a binary search with `torch.cuda.set_per_process_memory_fraction`); it comes from
the same allocator simulation and context model as the process total, so it carries that total's band until
it is measured."""


@dataclass(frozen=True)
class FitAnswer:
    """Whether a step fits a card: its simulated minimum memory against the card's memory, with the error."""

    fit: Fit
    min_memory_bytes: int
    capacity_bytes: int
    error_bytes: int
    """MIN_MEMORY_ERROR × the minimum memory."""

    @property
    def fits(self) -> bool:
        """Runs at all per the bill: the minimum memory is within the card's."""
        return self.min_memory_bytes <= self.capacity_bytes

    @property
    def comfortable(self) -> bool:
        return self.fit is Fit.COMFORTABLE

    @property
    def margin_bytes(self) -> int:
        """Headroom (positive) or overshoot (negative) of the card over the minimum memory."""
        return self.capacity_bytes - self.min_memory_bytes

    @property
    def close_call(self) -> bool:
        return self.fit is Fit.CLOSE_CALL

    def to_json(self, error_source: str = VERDICT_ERROR_SOURCE) -> dict:
        """The bill's JSON `verdict` (docs/output.md): the answer, the margin over the minimum and its band."""
        return {
            "fit": self.fit.value,
            "fits": self.fits,
            "margin_bytes": self.margin_bytes,
            "error_bytes": self.error_bytes,
            "close_call": self.close_call,
            "min_memory_bytes": self.min_memory_bytes,
            "error_source": error_source,
        }


def fit_answer(min_memory_bytes: int, capacity_bytes: int) -> FitAnswer:
    """The fit of a step whose simulated minimum is `min_memory_bytes` on a card of `capacity_bytes`: comfortable
    when the headroom exceeds the error band, no when the overshoot does, a close call in between."""
    error = round(MIN_MEMORY_ERROR * min_memory_bytes)
    margin = capacity_bytes - min_memory_bytes
    fit = Fit.COMFORTABLE if margin > error else Fit.NO if -margin > error else Fit.CLOSE_CALL
    return FitAnswer(fit=fit, min_memory_bytes=min_memory_bytes, capacity_bytes=capacity_bytes, error_bytes=error)


def fit_json(fits: bool | None, headroom_bytes: int | None, answer: FitAnswer | None, **verdict_options) -> dict:
    """The --json fit of a whole bill (docs/output.md): `fits` (runs at all), `headroom_bytes` (card minus
    process total) and the `verdict` object (`FitAnswer.to_json`, `verdict_options` pass to it); all None
    without a GPU."""
    return {
        "fits": fits,
        "headroom_bytes": headroom_bytes,
        "verdict": None if answer is None else answer.to_json(**verdict_options),
    }


def row_fit_json(fits: bool | None, fit: Fit | None) -> dict:
    """The --json fit of one row of a list (a ladder rung, a searched plan, a hardware option): `fits` and
    the `fit` word of the same rule (`fit_answer`); None where the row has no plan."""
    return {"fits": fits, "fit": None if fit is None else fit.value}


def bounded_fit(lower_bytes: int, upper_bytes: int, capacity_bytes: int) -> tuple[Fit, bool] | None:
    """(fit, fits) of every minimum memory in [lower_bytes, upper_bytes] on a card of `capacity_bytes`, or None
    when the bounds disagree: both are monotone in the minimum (a larger one is never a better fit), so equal
    answers at the bounds are the answer inside. A bill's minimum lies between its peak allocated plus its
    overhead (no fragmentation) and its process total (the unconstrained reserved peak): `Bill.fits`
    uses this to skip the minimum's bisection when it cannot change the answer."""
    low, high = fit_answer(lower_bytes, capacity_bytes), fit_answer(upper_bytes, capacity_bytes)
    return (low.fit, low.fits) if (low.fit, low.fits) == (high.fit, high.fits) else None


def other_explained(bill) -> str | None:
    """What the "other" line holds at the bill's peak phase, in words (None when it is empty)."""
    phase = bill.peak_phase
    other = bill.phases[phase].other
    if other <= 0:
        return None
    if phase == "optimizer":
        temp = bill.states.optimizer_step_temp
        what = {
            "adamw-foreach": "foreach AdamW builds one buffer the size of its states' group (sqrt of exp_avg_sq) "
            "during the step; --optimizer adamw-fused does not",
            "lion": "Lion's foreach step builds one update buffer the size of the parameters",
            "adafactor": "Adafactor's step builds one buffer the size of the largest parameter",
        }.get(bill.plan.optimizer.value, "the optimizer step's temporaries")
        return f"other at the optimizer step: temporaries inside optimizer.step() — {what}" + (
            "" if temp == other else "; plus all-gather buffers of sharded weights"
        )
    acts = bill.acts
    if phase == "forward":
        parts = [
            ("the loss's fp32 logits (upcast and log-softmax)", acts.loss_forward_peak),
            ("16-bit weight copies made by autocast", acts.weight_copies),
        ]
        named = [label for label, n in parts if n > 0]
        if other > sum(n for _, n in parts):
            named.append("all-gather buffers of sharded weights")
        return "other in forward: transients — " + ", ".join(named)
    return (
        "other in backward: transients — the fp32 gradient of the logits, one layer's gradient buffers "
        "(and its recomputed activations with checkpointing) or the embedding's gradient, whichever peaks"
        + ("; autocast weight copies" if acts.weight_copies else "")
    )
