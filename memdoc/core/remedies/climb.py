"""The climb: the ladder's rungs (`rungs.RUNGS`) applied cheapest first, each on top of the last, until it fits.

A rung that does not apply to the plan (already on, or needs more GPUs) is skipped. Stop at the
first plan that fits: stacking more makes runs slower and harder to debug — and then drop every
remedy the final plan does not need ("enough is enough"): a remedy taken early (a fused loss) can
be made unnecessary by a later one (LoRA). Each rung's time is `steptime.step_seconds`.
"""

from __future__ import annotations

from dataclasses import dataclass

from memdoc.core.billing.bill import Bill, compute_bill
from memdoc.core.billing.steptime import step_seconds
from memdoc.core.model.gpu import GpuSpec
from memdoc.core.model.lora import fit_lora_targets
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.plan import Precision, TrainingPlan
from memdoc.core.remedies.rungs import RUNGS, Rung
from memdoc.errors import PlanError


@dataclass(frozen=True)
class LadderStep:
    """One rung applied on top of the previous ones."""

    rung: Rung
    plan: TrainingPlan
    bill: Bill
    saved_bytes: int
    """process_total of the previous step minus this one's."""
    step_seconds: float
    """Modelled seconds per optimizer step on one GPU (`steptime.step_seconds`)."""
    relative_time: float
    """Modelled step time relative to the user's plan (1.0 = unchanged)."""

    @property
    def fits(self) -> bool:
        return bool(self.bill.fits)

    def to_json(self) -> dict:
        return {
            "rung": self.rung.id,
            "action": self.rung.action,
            "plan": self.plan.to_dict(),
            "peak_allocated": self.bill.peak_allocated,
            "process_total": self.bill.process_total,
            "saved_bytes": self.saved_bytes,
            "step_seconds": round(self.step_seconds, 4),
            "relative_time": round(self.relative_time, 3),
            "fits": self.fits,
        }


DROP_TOLERANCE = 0.05
"""The final pass drops a remedy when the step without it is at most this fraction slower: a
remedy worth less than that (a fused loss on a small vocabulary, 8-bit states) is not worth its
dependency or its risk; one worth more (LoRA under weight offload) stays."""

MIN_SAVING = 0.01
"""A rung is taken only if it cuts the process total by at least this fraction: a remedy that saves
nothing on this plan (checkpointing when the optimizer step sets the peak) only costs time."""


def _apply(rung: Rung, plan: TrainingPlan, model: ModelSpec) -> TrainingPlan | None:
    try:
        candidate = rung.apply(plan)
    except PlanError:
        return None
    return None if candidate is None else fit_lora_targets(candidate, model)


def _on_this_card(candidate: TrainingPlan, gpu: GpuSpec) -> TrainingPlan | None:
    """The candidate as this card runs it; None when it cannot yet (the rung stays: it may apply after LoRA)."""
    if candidate.precision not in (Precision.BF16, Precision.AMP_BF16) or gpu.supports_bf16:
        return candidate
    # No bf16 on this card (T4, V100): a LoRA plan goes to fp16 instead; a full fine-tune keeps its
    # fp32 master weights (the HF loss scaler refuses pure-fp16 gradients).
    return candidate.replace(precision=Precision.FP16) if candidate.is_peft else None


def _worth(rung: Rung, previous: Bill, bill: Bill, gpu: GpuSpec) -> bool:
    """Is the rung worth taking: does it make the plan fit (expandable) or cut tensors by `MIN_SAVING`?"""
    # (checked cheapest first: the tensor bill is arithmetic, reserved memory a simulation)
    if rung.id == "expandable":  # free, but only worth a line when fragmentation is what does not fit
        return bill.peak_allocated + bill.overhead_bytes <= gpu.memory_bytes and bool(bill.fits)
    # tensor remedies must cut tensors: fragmentation they happen to remove does not pay their cost
    worth = previous.peak_allocated - bill.peak_allocated >= MIN_SAVING * previous.process_total
    return worth and previous.process_total > bill.process_total


def _next_step(
    model: ModelSpec, previous: Bill, remaining: list[Rung], gpu: GpuSpec, base_time: float
) -> LadderStep | None:
    """The cheapest remaining rung worth taking on top of `previous`, removed from `remaining`; rungs
    that no longer apply are removed too. None when no remaining rung saves anything."""
    for rung in list(remaining):
        candidate = _apply(rung, previous.plan, model)
        if candidate is None:
            remaining.remove(rung)
            continue
        candidate = _on_this_card(candidate, gpu)
        if candidate is None:
            continue
        bill = compute_bill(model, candidate, gpu)
        if _worth(rung, previous, bill, gpu):
            remaining.remove(rung)
            seconds = step_seconds(model, candidate, gpu)
            saved = previous.process_total - bill.process_total
            return LadderStep(
                rung=rung,
                plan=candidate,
                bill=bill,
                saved_bytes=saved,
                step_seconds=seconds,
                relative_time=seconds / base_time,
            )
    return None


def climb(model: ModelSpec, plan: TrainingPlan, gpu: GpuSpec) -> list[LadderStep]:
    """Apply the rungs cheapest first, each on top of the last, until the plan fits `gpu`.

    Each round takes the cheapest remaining rung that saves at least `MIN_SAVING`; a rung that
    saves nothing yet stays a candidate, since a later rung can make it pay (checkpointing after
    LoRA has moved the peak from the optimizer step into backward).
    """
    base_time = step_seconds(model, plan, gpu)
    previous = compute_bill(model, plan, gpu)
    steps: list[LadderStep] = []
    remaining = list(RUNGS)
    while remaining and not previous.fits:
        step = _next_step(model, previous, remaining, gpu, base_time)
        if step is None:
            break  # no remaining rung saves anything on this plan
        steps.append(step)
        previous = step.bill
    if steps and steps[-1].fits:
        final = _drop_unneeded(model, plan, steps, gpu, base_time)
        if final is not None:
            steps.append(final)
    return steps


def _reverts(plan: TrainingPlan, steps: list[LadderStep]) -> list[tuple[str, dict]]:
    """(rung id, the fields it changed with their values before it) for every rung taken."""
    out, previous = [], plan
    for step in steps:
        before, after = previous.to_dict(), step.plan.to_dict()
        changed = {k: getattr(previous, k) for k in after if after[k] != before[k]}
        out.append((step.rung.id, changed))
        previous = step.plan
    return out


def _drop_unneeded(
    model: ModelSpec, plan: TrainingPlan, steps: list[LadderStep], gpu: GpuSpec, base_time: float
) -> LadderStep | None:
    """A last step without the remedies the final plan does not need, or None when each is needed.

    A remedy is dropped when the plan without it still fits and is at most `DROP_TOLERANCE`
    slower: LoRA that makes a weight-offloaded 70B step five times faster is not "unneeded". Greedy: of the remedies that can go, drop the one that leaves the fastest plan,
    and repeat; what stays is minimal (undoing any one of them no longer fits, or is slower).
    """
    current = steps[-1].plan
    current_bill = steps[-1].bill
    current_seconds = steps[-1].step_seconds
    pending = _reverts(plan, steps)
    dropped: list[str] = []
    while True:
        options = []
        for rung_id, fields in pending:
            try:
                candidate = fit_lora_targets(current.replace(**fields), model)
            except PlanError:
                continue
            if candidate == current:
                continue
            bill = compute_bill(model, candidate, gpu)
            seconds = step_seconds(model, candidate, gpu)
            if seconds <= current_seconds * (1 + DROP_TOLERANCE) and bill.fits:
                options.append((seconds, rung_id, fields, candidate, bill))
        if not options:
            break
        current_seconds, rung_id, fields, current, current_bill = min(options, key=lambda o: o[0])
        dropped.append(rung_id)
        pending = [(r, f) for r, f in pending if r != rung_id]
    if not dropped:
        return None
    rung = Rung("drop-unneeded", "drop what the final plan does not need: " + ", ".join(dropped), lambda p: None)
    seconds = step_seconds(model, current, gpu)
    return LadderStep(
        rung=rung,
        plan=current,
        bill=current_bill,
        saved_bytes=steps[-1].bill.process_total - current_bill.process_total,
        step_seconds=seconds,
        relative_time=seconds / base_time,
    )
