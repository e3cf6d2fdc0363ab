"""The climb: the ladder's rungs (`rungs.RUNGS`) applied cheapest first, each on top of the last, until it fits.

A rung that does not apply to the plan (already on, or needs more GPUs) is skipped. Stop at the
first plan that fits comfortably by the one fit rule (`verdict.fit_answer`: more headroom over the
minimum memory than the bill's error band; a close call is not a stop): stacking more makes runs slower
and harder to debug — and then drop every remedy the final plan does not need ("enough is enough"): a
remedy taken early (a fused loss) can be made unnecessary by a later one (LoRA). Each rung's time is
the task's (`posttrain.steptime.task_step_seconds`: a GRPO rung is timed with its generation). A rung that breaks
TRL's rules across the post-training fields (`plan_post.check_post_training_request`: the generation batch a
multiple of the global batch and of `num_generations`) is not offered.

Plan values the user set (`fixed`: flags, recipe or config keys) stay as set: a rung that would change
one is passed over. Only when the rungs that keep them leave the plan short of a comfortable fit does
the climb go on with the passed-over rungs, each step naming the fixed value it changes
(`LadderStep.changes_fixed`).
"""

from __future__ import annotations

from dataclasses import dataclass

from memdoc.core.billing.bill import Bill, compute_bill
from memdoc.core.billing.bill_json import row_per_gpu_json
from memdoc.core.billing.posttrain.steptime import task_step_seconds as step_seconds
from memdoc.core.billing.posttrain.steptime import task_step_time as step_time
from memdoc.core.billing.verdict import Fit, row_fit_json
from memdoc.core.model.gpu import GpuSpec
from memdoc.core.model.lora import fit_lora_targets
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.plan import Precision, TrainingPlan, flag_for
from memdoc.core.model.plan_post import check_post_training_request
from memdoc.core.remedies.rungs import RUNGS, Rung
from memdoc.core.remedies.time_band import time_json
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
    changes_fixed: tuple[tuple[str, object, object], ...] = ()
    """(plan field, the user's value, this step's value) for each value the user set that this step changes."""

    @property
    def fits(self) -> bool:
        """Runs at all by the one fit rule (the minimum memory within the card's)."""
        return bool(self.bill.fits)

    @property
    def comfortable(self) -> bool:
        """Fits with more headroom than the bill's error band: where the climb stops."""
        return bool(self.bill.comfortable)

    @property
    def fit(self) -> Fit:
        """Comfortable, close call or does not fit (`verdict.Fit`)."""
        return self.bill.fit_kind

    @property
    def action(self) -> str:
        """The rung's action as this plan's task runs it (`Rung.action_for`)."""
        return self.rung.action_for(self.plan)

    @property
    def fixed_change(self) -> str | None:
        """'--method lora (you set --method full)' for each fixed value this step changes, or None."""
        if not self.changes_fixed:
            return None
        return "; ".join(
            f"{flag_for(name)} {_shown(new)} (you set {flag_for(name)} {_shown(old)})"
            for name, old, new in self.changes_fixed
        )

    def to_json(self) -> dict:
        return {
            "rung": self.rung.id,
            "action": self.action,
            "plan": self.plan.to_dict(),
            "peak_allocated": self.bill.peak_allocated,
            "process_total": self.bill.process_total,
            "per_gpu": row_per_gpu_json(self.bill.peak_allocated, self.bill.process_total),
            "saved_bytes": self.saved_bytes,
            "time": time_json(step_time(self.bill.model, self.plan, self.bill.gpu), self.plan.world_size),
            "step_seconds": round(self.step_seconds, 4),
            "relative_time": round(self.relative_time, 3),
            **row_fit_json(self.fits, self.fit),
            "changes_fixed": bool(self.changes_fixed),
            "fixed_changes": [{"field": n, "flag": flag_for(n), "set": o, "to": v} for n, o, v in self.changes_fixed],
        }


def _shown(value) -> str:
    """A plan value as a flag takes it (`TrainingPlan.to_dict` form)."""
    if isinstance(value, bool):
        return str(value).lower()
    return ",".join(value) if isinstance(value, (list, tuple)) else str(value)


def _fixed_changes(user: TrainingPlan, previous: TrainingPlan, plan: TrainingPlan, fixed: frozenset[str]):
    """(field, the user's value, `plan`'s value) for the fixed fields `plan` changes from `previous` away
    from what the user set."""
    mine, before, after = user.to_dict(), previous.to_dict(), plan.to_dict()
    return tuple(
        (name, mine[name], after[name])
        for name in sorted(fixed & after.keys())
        if after[name] != before[name] and after[name] != mine[name]
    )


DROP_TOLERANCE = 0.05
"""The final pass drops a remedy when the step without it is at most this fraction slower: a
remedy worth less than that (a fused loss on a small vocabulary, 8-bit states) is not worth its
dependency or its risk; one worth more (LoRA under weight offload) stays."""

MIN_SAVING = 0.01
"""A rung is taken only if it cuts the process total by at least this fraction: a remedy that saves
nothing on this plan (checkpointing when the optimizer step sets the peak) only costs time."""


def _apply(rung: Rung, plan: TrainingPlan, model: ModelSpec, gpu: GpuSpec) -> TrainingPlan | None:
    """The plan with the rung (sized to the model and card where it is `Rung.sized`), or None where it does not
    apply or breaks TRL's rules (`check_post_training_request`)."""
    try:
        candidate = rung.apply(plan)
        if candidate is not None and rung.sized is not None:
            candidate = rung.sized(plan, model, gpu)
        if candidate is not None:
            check_post_training_request(candidate)
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


def _worth(rung: Rung, previous: Bill, bill: Bill) -> bool:
    """Is the rung worth taking: does it make the plan fit comfortably (expandable) or cut tensors by `MIN_SAVING`?"""
    # (checked cheapest first: the tensor bill is arithmetic, reserved memory a simulation)
    if rung.id == "expandable":  # free, but only worth a line when fragmentation is what does not fit
        return bool(bill.comfortable)
    # tensor remedies must cut tensors: fragmentation they happen to remove does not pay their cost
    worth = previous.peak_allocated - bill.peak_allocated >= MIN_SAVING * previous.process_total
    return worth and previous.process_total > bill.process_total


@dataclass(frozen=True)
class _Climb:
    """What every step of one climb shares: the model, the user's plan and what they fixed, the card."""

    model: ModelSpec
    user: TrainingPlan
    gpu: GpuSpec
    base_time: float
    fixed: frozenset[str]


def _next_step(c: _Climb, plan: TrainingPlan, bill: Bill, remaining: list[Rung], keep: bool) -> LadderStep | None:
    """The cheapest remaining rung worth taking on top of `plan` (whose bill is `bill`), removed from
    `remaining`; rungs that no longer apply are removed too; with `keep`, rungs that change a fixed value
    are passed over (they stay). None when no remaining rung saves anything."""
    for rung in list(remaining):
        candidate = _apply(rung, plan, c.model, c.gpu)
        if candidate is None:
            remaining.remove(rung)
            continue
        candidate = _on_this_card(candidate, c.gpu)
        if candidate is None:
            continue
        changes = _fixed_changes(c.user, plan, candidate, c.fixed)
        if keep and changes:
            continue
        after = compute_bill(c.model, candidate, c.gpu)
        if _worth(rung, bill, after):
            remaining.remove(rung)
            seconds = step_seconds(c.model, candidate, c.gpu)
            return LadderStep(
                rung=rung,
                plan=candidate,
                bill=after,
                saved_bytes=bill.process_total - after.process_total,
                step_seconds=seconds,
                relative_time=seconds / c.base_time,
                changes_fixed=changes,
            )
    return None


def climb(
    model: ModelSpec, plan: TrainingPlan, gpu: GpuSpec, *, fixed: frozenset[str] = frozenset()
) -> list[LadderStep]:
    """Apply the rungs cheapest first, each on top of the last, until the plan fits `gpu` comfortably.

    Each round takes the cheapest remaining rung that saves at least `MIN_SAVING`; a rung that
    saves nothing yet stays a candidate, since a later rung can make it pay (checkpointing after
    LoRA has moved the peak from the optimizer step into backward). `fixed`: the plan fields the user
    set; the rungs that keep them are climbed first, and the others only when those fall short.
    """
    c = _Climb(model, plan, gpu, step_seconds(model, plan, gpu), frozenset(fixed))
    steps: list[LadderStep] = []
    remaining = list(RUNGS)
    current, bill = plan, compute_bill(model, plan, gpu)
    for keep in (True, False):  # first the rungs that keep what the user set; then, if short, the others
        while remaining and not bill.comfortable:
            step = _next_step(c, current, bill, remaining, keep)
            if step is None:
                break  # no remaining rung saves anything on this plan
            steps.append(step)
            current, bill = step.plan, step.bill
    if steps and steps[-1].comfortable:
        final = _drop_unneeded(model, plan, steps, gpu, c.base_time)
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

    A remedy is dropped when the plan without it still fits comfortably and is at most `DROP_TOLERANCE` slower: LoRA
    that makes a weight-offloaded 70B step five times faster is not "unneeded". Greedy: of the remedies that can go,
    drop the one that leaves the fastest plan, and repeat; what stays is minimal (undoing any one of them no longer
    fits, or is slower).
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
            if seconds <= current_seconds * (1 + DROP_TOLERANCE) and bill.comfortable:
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
