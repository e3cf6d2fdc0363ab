"""One rung of the cost-increasing ladder (`rungs.RUNGS`): its remedy, its place on the ladder and its lever."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from memdoc.core.model.gpu import GpuSpec
    from memdoc.core.model.model_spec import ModelSpec
    from memdoc.core.model.plan import TrainingPlan


@dataclass(frozen=True)
class Rung:
    id: str
    action: str
    apply: Callable[[TrainingPlan], TrainingPlan | None]
    """The plan with this remedy, or None when it does not apply."""
    rank: int | None = None
    """Place on the cost ladder (1 = cheapest; ①a–①d share ①); None: off the documented ladder."""
    lever: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    """Plan field -> the values (as `TrainingPlan.to_dict` writes them) that count as this remedy; the
    first is the one `apply` sets. A prescription lever with one of them is ranked `rank`."""
    undo: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    """Plan field -> the values that take this remedy back (a descending ladder's levers), ranked `rank`."""
    for_task: dict[str, str] = field(default_factory=dict)
    """Task (`Task.value`) -> the action as that task's trainer runs the remedy (the Liger rung under TRL's fused
    LM head, LoRA's adapter-disabled reference); other tasks read `action`."""
    sized: Callable[[TrainingPlan, ModelSpec, GpuSpec | None], TrainingPlan | None] | None = None
    """For a rung whose value depends on the model and the card (the vLLM fraction): the plan with it, used by
    the climb instead of `apply` (which then only says whether the rung applies)."""

    def action_for(self, plan: TrainingPlan) -> str:
        """The action as the plan's task runs it."""
        return self.for_task.get(plan.task.value, self.action)
