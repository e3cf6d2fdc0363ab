"""`memdoc plan`'s report: the best-ranked plans that fit the GPU, next to the plan as given."""

from __future__ import annotations

from dataclasses import dataclass

from memdoc.core.billing.bill import Bill, compute_bill
from memdoc.core.billing.bill_json import row_per_gpu_json
from memdoc.core.billing.posttrain.steptime import task_step_time
from memdoc.core.billing.steptime import StepTime
from memdoc.core.billing.verdict import MIN_MEMORY_ERROR
from memdoc.core.model.gpu import GpuSpec, gpu_json
from memdoc.core.model.model_spec import ModelSpec, model_json
from memdoc.core.model.plan import TrainingPlan
from memdoc.core.remedies.search import Candidate, search
from memdoc.core.remedies.search_post import suggestions
from memdoc.core.remedies.time_band import TimeBand, time_band, time_json


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
    """Plans that fit comfortably (`verdict.fit_answer`) and within the host RAM, best-ranked first (empty: none)."""
    base: Bill
    time: StepTime
    host_ram_bytes: int | None = None
    """The host RAM per node offloaded states may use (None: no limit known)."""
    host_ram_source: str = "unknown"
    """Where `host_ram_bytes` comes from, in words ("--host-ram", "this machine's RAM (/proc/meminfo)")."""

    @property
    def suggestions(self) -> tuple[str, ...]:
        """Post-training changes the search does not try, since they change the training (`search_post.suggestions`)."""
        return suggestions(self.plan)

    @property
    def band(self) -> TimeBand:
        return time_band(self.plan, self.time)

    def to_json(self, emitted: dict | None = None) -> dict:
        """The JSON of `memdoc plan --json`; `emitted` is the `memdoc emit --json` object of --emit."""
        return {
            "model": model_json(self.model, self.base.states.trainable_params),
            "gpu": gpu_json(self.gpu, self.plan.world_size),
            "fit_rule": {"fit": "comfortable", "min_memory_error": MIN_MEMORY_ERROR},
            "host_ram": {"limit_bytes": self.host_ram_bytes, "source": self.host_ram_source},
            "fixed": sorted(self.fixed),
            "given": {
                "plan": self.plan.to_dict(),
                "process_total": self.base.process_total,
                "per_gpu": row_per_gpu_json(self.base.peak_allocated, self.base.process_total),
                "time": time_json(self.time, self.plan.world_size, self.band),
            },
            "plans": [c.to_json() for c in self.candidates],
            "suggestions": list(self.suggestions),
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
    host_ram_bytes: int | None = None,
    host_ram_source: str = "unknown",
) -> PlanReport:
    """Search the `top` best-ranked plans that fit `gpu` (and `host_ram_bytes`), keeping the `fixed`
    fields of `plan`."""
    found = search(model, plan, gpu, fixed=fixed, global_batch=global_batch, top=top, host_ram_bytes=host_ram_bytes)
    return PlanReport(
        model=model,
        plan=plan,
        gpu=gpu,
        fixed=fixed,
        candidates=found,
        base=compute_bill(model, plan, gpu),
        time=task_step_time(model, plan, gpu),
        host_ram_bytes=host_ram_bytes,
        host_ram_source=host_ram_source,
    )
