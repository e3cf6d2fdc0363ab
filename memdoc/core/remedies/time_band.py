"""How far a plan's modelled step time can be trusted, and the order `plan` ranks plans in.

Each term of `steptime.StepTime` carries the error of what it rests on:
* compute and the GPU optimizer step: the terms calibrated on real H200 steps
  (`benchmarks/steptime.py`, `benchmarks/RESULTS.md`): median error 9.2% on the held-out cases
  (`CALIBRATED_ERROR`);
* QLoRA's compute: LoRA's, times a factor fitted on published measurements
  (`steptime.QLORA_TIME_FACTOR`, `benchmarks/data/qlora_speed.yaml`), whose own median error
  (`steptime.QLORA_TIME_ERROR`) adds in quadrature to the calibrated one;
* offload transfers, the CPU optimizer step and multi-GPU communication: first-order terms (bytes over
  a link's nominal rate) that no measurement has checked; `FIRST_ORDER_ERROR` is an assumed band.

A plan's band is the sum of its terms' errors in seconds, over its time. Ranking: a plan whose time
rests on measurements (H200 steps, or QLoRA's published factor) ranks by its modelled time; a plan
with first-order terms by the upper end of its band, so it ranks above a measured plan only when it
is faster by more than its own uncertainty.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from memdoc.core.billing.steptime import QLORA_TIME_ERROR, StepTime
from memdoc.core.model.plan import Method, TrainingPlan

CALIBRATED_ERROR = 0.092
"""Median |modelled / measured − 1| of the step-time model on the 6 held-out H200 cases (steptime's
module docstring; `python benchmarks/steptime.py`)."""
FIRST_ORDER_ERROR = 0.50
"""Assumed, not measured: offload transfers and inter-GPU communication are modelled as bytes over a nominal
link rate, without latency, overlap or kernel costs; ±50% says the model cannot promise better than that."""


class Basis(str, Enum):
    """What a plan's modelled step time rests on, from most to least trusted."""

    CALIBRATED = "calibrated"
    """Only terms calibrated on measured H200 steps."""
    PUBLISHED = "published"
    """QLoRA: the calibrated LoRA time times a factor fitted on published LoRA-vs-QLoRA measurements."""
    FIRST_ORDER = "first-order"
    """Includes offload transfers or multi-GPU communication: first-order, not measured."""


@dataclass(frozen=True)
class TimeBand:
    """The relative uncertainty of one plan's modelled step time."""

    relative: float
    """± fraction of the modelled step time."""
    basis: Basis

    def to_json(self) -> dict:
        return {"relative": round(self.relative, 3), "basis": self.basis.value}


def time_band(plan: TrainingPlan, time: StepTime) -> TimeBand:
    """The band of `time` (the step time of `plan`): each term's error in seconds, summed, over the total."""
    qlora = plan.method is Method.QLORA
    compute_error = math.hypot(CALIBRATED_ERROR, QLORA_TIME_ERROR) if qlora else CALIBRATED_ERROR
    first_order = time.communication + time.host
    seconds = time.compute * compute_error + time.optimizer * CALIBRATED_ERROR + first_order * FIRST_ORDER_ERROR
    basis = Basis.FIRST_ORDER if first_order > 0 else Basis.PUBLISHED if qlora else Basis.CALIBRATED
    return TimeBand(relative=seconds / time.seconds if time.seconds else 0.0, basis=basis)


def time_json(time: StepTime, world_size: int, band: TimeBand | None = None) -> dict:
    """The --json `time` of a plan (docs/output.md): the modelled step (`StepTime.to_json`: step_seconds,
    tokens per second per GPU and on all GPUs, and on more than one GPU the exposed communication and its
    link), with its `band` where the command ranks plans by it."""
    return time.to_json(world_size) | ({} if band is None else {"band": band.to_json()})


def rank_seconds(time: StepTime, band: TimeBand) -> float:
    """The seconds a plan ranks by: its modelled time when it rests on measurements, the upper end of its
    band when it has first-order terms."""
    if band.basis is Basis.FIRST_ORDER:
        return time.seconds * (1 + band.relative)
    return time.seconds
