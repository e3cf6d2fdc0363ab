"""The --json shape of each concept every command shares, built in one place (docs/output.md, "One
shape per concept"): the model, the GPU, the fit of a whole bill, the fit of one row (a ladder rung, a
searched plan, a hardware option), the per-GPU byte table of a row, and the step time.

Every command's `to_json` builds these objects with the functions here, so `bill`, `plan`, `emit`,
`prescribe` and `diagnose` cannot drift apart (`tests/cli/test_json_shapes.py` checks them all).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memdoc.core.model.gpu import gpu_json

if TYPE_CHECKING:
    from memdoc.core.billing.steptime import StepTime
    from memdoc.core.billing.verdict import Fit, FitAnswer
    from memdoc.core.model.model_spec import ModelSpec
    from memdoc.core.remedies.time_band import TimeBand

__all__ = ["fit_json", "gpu_json", "model_json", "row_fit_json", "row_per_gpu_json", "time_json"]


def model_json(model: ModelSpec, trainable_params: int | None) -> dict:
    """`model`: its id, its total parameters and those the plan trains (0 for inference, None where
    the rows of a report train different counts); a vision-language model's parts as well."""
    parts = {}
    if model.vision is not None:
        parts = {"vision_params": model.params.vision, "projector_params": model.params.projector}
        parts["language_params"] = model.params.language
    return {"id": model.id, "params": model.params.total, "trainable_params": trainable_params, **parts}


def fit_json(fits: bool | None, headroom_bytes: int | None, answer: FitAnswer | None, **verdict_options) -> dict:
    """The fit of a whole bill: `fits` (runs at all), `headroom_bytes` (card minus process total) and
    the `verdict` object (`FitAnswer.to_json`, `verdict_options` pass to it); all None without a GPU."""
    return {
        "fits": fits,
        "headroom_bytes": headroom_bytes,
        "verdict": None if answer is None else answer.to_json(**verdict_options),
    }


def row_fit_json(fits: bool | None, fit: Fit | None) -> dict:
    """The fit of one row of a list (a ladder rung, a searched plan, a hardware option): `fits` and the
    `fit` word of the same rule (`verdict.fit_answer`); None where the row has no plan."""
    return {"fits": fits, "fit": None if fit is None else fit.value}


def row_per_gpu_json(peak_allocated: int, process_total: int, min_memory_bytes: int | None = None) -> dict:
    """`per_gpu` of a row: the bill's byte table cut to the figures a list compares (same names as a
    bill's `per_gpu`)."""
    out = {"peak_allocated": peak_allocated, "process_total": process_total}
    return out | ({} if min_memory_bytes is None else {"min_memory_bytes": min_memory_bytes})


def time_json(time: StepTime, world_size: int, band: TimeBand | None = None) -> dict:
    """`time`: the modelled step (`StepTime.to_json`: step_seconds, tokens per second per GPU and on all
    GPUs, and on more than one GPU the exposed communication and its link), with its `band` where the
    command ranks plans by it."""
    return time.to_json(world_size) | ({} if band is None else {"band": band.to_json()})
