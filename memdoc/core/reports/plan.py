"""`memdoc plan`'s report: the fastest plans that fit the GPU, next to the plan as given."""

from __future__ import annotations

from dataclasses import dataclass

from memdoc.core.billing.bill import Bill, compute_bill
from memdoc.core.billing.steptime import StepTime, step_time
from memdoc.core.model.gpu import GpuSpec, gpu_json
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.plan import TrainingPlan
from memdoc.core.remedies.search import HEADROOM, Candidate, search


@dataclass(frozen=True)
class PlanReport:
    """The search's ranked plans and the given plan's bill and step time."""

    model: ModelSpec
    plan: TrainingPlan
    """The plan as given (flags, recipe, defaults)."""
    gpu: GpuSpec
    fixed: frozenset[str]
    """Plan fields the user set: kept as given by the search."""
    candidates: list[Candidate]
    """Plans that fit with `HEADROOM`, fastest first (empty: nothing fits)."""
    base: Bill
    time: StepTime
    headroom: float = HEADROOM

    def to_json(self, emitted: dict | None = None) -> dict:
        """The JSON of `memdoc plan --json`; `emitted` is the `memdoc emit --json` object of --emit."""
        return {
            "model": {
                "id": self.model.id,
                "params": self.model.params.total,
                "trainable_params": self.base.states.trainable_params,
            },
            "gpu": gpu_json(self.gpu, self.plan.world_size),
            "headroom_fraction": self.headroom,
            "fixed": sorted(self.fixed),
            "given": {
                "plan": self.plan.to_dict(),
                "process_total": self.base.process_total,
                "time": self.time.to_json(self.plan.world_size),
            },
            "plans": [c.to_json() for c in self.candidates],
            **({"emitted": emitted} if emitted is not None else {}),
        }


def plan_report(
    model: ModelSpec,
    plan: TrainingPlan,
    gpu: GpuSpec,
    *,
    fixed: frozenset[str] = frozenset(),
    global_batch: int | None = None,
    top: int = 5,
) -> PlanReport:
    """Search the `top` fastest plans that fit `gpu`, keeping the `fixed` fields of `plan`."""
    found = search(model, plan, gpu, fixed=fixed, global_batch=global_batch, top=top)
    return PlanReport(
        model=model,
        plan=plan,
        gpu=gpu,
        fixed=fixed,
        candidates=found,
        base=compute_bill(model, plan, gpu),
        time=step_time(model, plan, gpu),
    )
