"""One OOM diagnosis: log text (+ the plan, + what a live run knows) → `OomDiagnosis`.

`diagnose_oom` is the doctor's single pipeline, used by `memdoc prescribe`, `memdoc diagnose
SCRIPT` (when the script runs out of memory) and the trainer callback alike:

1. the first OOM message (`oom.first_oom`) and what it looks like (`oom_symptom.infer_symptom`:
   phase, symptom, the causes its figures show, `oom_causes.read_causes`);
2. facts of a live run the log lacks (`RunContext`): an OOM in the first step is `startup-oom`, a
   failing batch longer than every earlier one `long-sample-oom`;
3. with a plan, the culprit tensor (`culprit.find_culprit`), which can turn a mid-run OOM into
   long-sample-oom;
4. prescriptions: each cause's own (`Cause.prescriptions`, or its own fix), first, in cause
   order; then the symptom's ladder, only when a cause says the plan needs less memory
   (`Cause.shrink_plan`), when no cause was read, when --symptom chose it, or when the symptom is
   a phase's own (eval, save, …: `LADDER_SYMPTOMS` lists the plan ladders). The ladder is sorted
   by its own time column (`symptoms.time_cost_rank`; the culprit's rows first among equals);
5. quantified with the bill (`quantify`); rows the log shows already done
   (`already.already_done`) and ladder rows already in the plan or not applicable to it are set
   apart, never ranked;
6. texts filled with the plan's figures (`hints.hint_values`).

Pure: no I/O, no torch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from memdoc.core.billing.inference import InferencePlan, KvCache, Weights
from memdoc.core.doctor.already import already_done
from memdoc.core.doctor.culprit import PlanTensor, find_culprit, plan_tensors, shrinks, symptom_for_culprit
from memdoc.core.doctor.hints import hint_values
from memdoc.core.doctor.oom import first_oom
from memdoc.core.doctor.oom_causes import Cause, card_from_capacity
from memdoc.core.doctor.oom_event import OomEvent
from memdoc.core.doctor.oom_symptom import LARGE_BLOCK_UNKNOWN, SymptomGuess, infer_symptom
from memdoc.core.doctor.quantify import Quantified, quantify, quantify_inference
from memdoc.core.doctor.symptoms import Prescription, Symptom, get_prescription, get_symptom, time_cost_rank
from memdoc.core.model.gpu import GpuSpec
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.plan import TrainingPlan

__all__ = ["LADDER_SYMPTOMS", "OomDiagnosis", "PlanContext", "Row", "RunContext", "diagnose_oom"]

LADDER_SYMPTOMS = ("startup-oom", "mid-run-oom", "long-sample-oom", "inference-oom")
"""Symptoms whose prescriptions are the plan's memory ladder (shown only when the plan must shrink).
Any other symptom's prescriptions address its phase (evaluation, checkpoint saving, …) and always follow."""
NOT_APPLICABLE = "already in this plan or not applicable to it"
NEEDS_GPUS = "needs more than one GPU"
"""`quantify`'s notes for rows set apart: the lever changes nothing on this plan, or cannot apply to it."""


@dataclass(frozen=True, kw_only=True)
class PlanContext:
    """What the user told about the run: model, plan, GPU, and the data's p99 length when measured."""

    model: ModelSpec
    plan: TrainingPlan
    gpu: GpuSpec | None = None
    max_length: int | None = None
    kv_cache: str = "auto"
    weights: str = "auto"
    prefill_chunk: int | None = None


@dataclass(frozen=True, kw_only=True)
class RunContext:
    """What a live run knows that a log may not say."""

    step: int | None = None
    first_step: bool = False
    batch: tuple[int, int] | None = None
    """(sequences, tokens) of the failing batch."""
    longest_before: int | None = None
    """The longest batch (tokens) of the earlier steps."""


@dataclass(frozen=True, kw_only=True)
class Row:
    """One prescription in the table: where it comes from, what it saves, why it is set apart."""

    prescription: Prescription
    source: str
    """'cause:<cause id>' (a cause calls for it) or 'symptom' (the symptom's ladder)."""
    quantified: Quantified | None = None
    shrinks_culprit: bool = False
    ladder: bool = False
    """A row of the symptom's ladder (not called for by one cause's evidence)."""
    apart: str | None = None
    """Why the row is not ranked (already done, already in the plan, not applicable); None when ranked."""

    def to_json(self) -> dict:
        p, q = self.prescription, self.quantified
        return {
            "id": p.id,
            "action": p.action,
            "why": p.why,
            "for": self.source,
            "saves_bytes": None if q is None else q.saves_bytes,
            "fits_alone": None if q is None else q.fits_alone,
            "note": (q.note if q is not None else "") if self.apart is None else self.apart,
            "time_cost": p.time_cost,
            "how": p.how,
            "shrinks_culprit": self.shrinks_culprit,
        }


@dataclass(frozen=True, kw_only=True)
class OomDiagnosis:
    """An OOM read end to end: what kind, when, why (ranked causes), which tensor, what to do."""

    symptom: Symptom
    event: OomEvent | None = None
    guess: SymptomGuess | None = None
    kind: str | None = None
    """What failed (the guess's `kind` when the doctor names one, else the message's format)."""
    phase: str | None = None
    causes: tuple[Cause, ...] = ()
    culprit: PlanTensor | None = None
    rows: tuple[Row, ...] = ()
    """Ranked: the causes' fixes, then the ladder (cheapest first)."""
    apart: tuple[Row, ...] = ()
    """Not ranked: already done or not applicable."""
    base: object = None
    """The bill (training or inference) of the plan as given, or None without one."""
    from_flag: bool = False
    reasons: tuple[str, ...] = ()
    assumptions: tuple[str, ...] = ()
    unknowns: tuple[str, ...] = ()
    step: int | None = None

    @property
    def first(self) -> Row | None:
        """The first ranked prescription."""
        return self.rows[0] if self.rows else None

    def to_json(self) -> dict:
        card, names = card_from_capacity(self.event.total if self.event is not None else None)
        return {
            "symptom": self.symptom.id,
            "symptom_from": "flag"
            if self.from_flag
            else ("assumption" if self.assumptions else ("log" if self.event is not None else "run")),
            "kind": self.kind,
            "phase": self.phase,
            "step": self.step,
            "causes": [dataclasses.asdict(c) for c in self.causes],
            "culprit": None if self.culprit is None else self.culprit.to_json(),
            "prescriptions": [r.to_json() for r in self.rows],
            "set_apart": [r.to_json() for r in self.apart],
            "reasons": list(self.reasons),
            "assumptions": list(self.assumptions),
            "unknowns": list(self.unknowns),
            "card": None if card is None else {"memory_bytes": card.memory_bytes, "matches": list(names)},
        }


def diagnose_oom(
    log_text: str | None,
    *,
    plan: PlanContext | None = None,
    run: RunContext | None = None,
    symptom: str | None = None,
) -> OomDiagnosis:
    """Diagnose the first OOM of `log_text` (see the module docstring). `symptom` overrides the guess.

    Without an OOM in the text and without `symptom`, the symptom falls back to the run's facts
    (first step: startup-oom) or mid-run-oom, the commonest case."""
    event = first_oom(log_text) if log_text else None
    guess = infer_symptom(event, log_text) if log_text is not None else None
    reasons = list(guess.reasons) if guess is not None else []
    chosen = symptom or _run_symptom(guess.symptom if guess else None, run, reasons)
    culprit = gpu = None
    if plan is not None:
        gpu = plan.gpu
        if event is not None:
            tensors = plan_tensors(plan.model, plan.plan, inference=chosen == "inference-oom")
            culprit = find_culprit(event.requested, tensors, guess.phase)
            if symptom is None:
                chosen = symptom_for_culprit(chosen, culprit)
            if gpu is None and event.total:
                limit = event.allowed if event.allowed and event.allowed < event.total else event.total
                gpu = card_from_capacity(limit)[0]
    kb = get_symptom(chosen)
    causes = guess.causes if guess is not None else ()
    rows = _rows(kb, causes, culprit, from_flag=symptom is not None)
    base, rows = _quantified(rows, kb, plan, gpu)
    rows, apart = _split(rows, already_done(log_text, event))
    values = hint_values(
        plan.plan if plan else None,
        base if kb.id != "inference-oom" else None,
        max_length=plan.max_length if plan else None,
    )
    unknowns = guess.unknowns if guess is not None else ()
    if culprit is not None:
        unknowns = tuple(u for u in unknowns if u != LARGE_BLOCK_UNKNOWN)
    return OomDiagnosis(
        symptom=kb.filled(values),
        event=event,
        guess=guess,
        kind=getattr(guess, "kind", None) or (event.format if event is not None else None),
        phase=guess.phase if guess is not None else None,
        causes=causes,
        culprit=culprit,
        rows=tuple(dataclasses.replace(r, prescription=r.prescription.filled(values)) for r in rows),
        apart=tuple(dataclasses.replace(r, prescription=r.prescription.filled(values)) for r in apart),
        base=base,
        from_flag=symptom is not None,
        reasons=tuple(reasons),
        assumptions=guess.assumptions if guess is not None and symptom is None else (),
        unknowns=unknowns,
        step=run.step if run is not None else None,
    )


def _run_symptom(guessed: str | None, run: RunContext | None, reasons: list[str]) -> str:
    """The guessed symptom, corrected by the run's facts (`RunContext`); mid-run-oom when nothing is known."""
    if run is not None and run.first_step and guessed in (None, "mid-run-oom"):
        reasons.append(
            "it happened in the first training step: the weights, gradients and optimizer states, "
            "or the first batch's activations, do not fit"
        )
        return "startup-oom"
    if run is not None and run.batch is not None and run.longest_before is not None:
        if run.batch[1] > run.longest_before and guessed in (None, "mid-run-oom"):
            reasons.append(
                f"the failing batch ({run.batch[0]} × {run.batch[1]} tokens) is longer than every earlier one "
                f"(longest before: {run.longest_before} tokens)"
            )
            return "long-sample-oom"
    return guessed or "mid-run-oom"


def _rows(kb: Symptom, causes: tuple[Cause, ...], culprit: PlanTensor | None, *, from_flag: bool) -> list[Row]:
    """The causes' rows (their prescriptions, or their own fix), then the ladder when it applies."""
    rows: list[Row] = []
    seen: set[str] = set()
    for cause in causes:
        if cause.shrink_plan:
            continue
        fixes = [get_prescription(pid) for pid in cause.prescriptions] or [_own_fix(cause)]
        for p in fixes:
            if p.id not in seen:
                seen.add(p.id)
                rows.append(Row(prescription=p, source=f"cause:{cause.id}", shrinks_culprit=shrinks(p, culprit)))
    ladder = from_flag or not causes or any(c.shrink_plan for c in causes) or kb.id not in LADDER_SYMPTOMS
    if not ladder:
        return rows
    source = next((f"cause:{c.id}" for c in causes if c.shrink_plan), "symptom")
    ladder_rows = [
        Row(prescription=p, source=source, shrinks_culprit=shrinks(p, culprit), ladder=True)
        for p in kb.prescriptions
        if p.id not in seen
    ]
    if "oom" in kb.id:  # cheapest first by the table's time column; the culprit's rows first among equals
        ladder_rows.sort(key=lambda r: (time_cost_rank(r.prescription.time_cost), not r.shrinks_culprit))
    else:
        ladder_rows.sort(key=lambda r: not r.shrinks_culprit)
    return rows + ladder_rows


def _own_fix(cause: Cause) -> Prescription:
    """A cause's own fix as a table row (it names no symptoms.yaml prescription)."""
    return Prescription(
        id=f"fix-{cause.id}",
        action=cause.fix[0].upper() + cause.fix[1:],
        why=cause.title,
        time_cost=cause.fix_cost,
        lever=None,
        how={},
    )


def _quantified(
    rows: list[Row], kb: Symptom, plan: PlanContext | None, gpu: GpuSpec | None
) -> tuple[object, list[Row]]:
    """The plan's bill and each row with what its lever saves on the plan (rows unchanged without a plan)."""
    if plan is None:
        return None, rows
    prescriptions = [r.prescription for r in rows]
    if kb.id == "inference-oom":
        inference = InferencePlan(
            plan=plan.plan,
            kv_cache=KvCache(plan.kv_cache),
            weights=Weights(plan.weights),
            prefill_chunk=plan.prefill_chunk,
        )
        base, quantified = quantify_inference(prescriptions, plan.model, inference, gpu)
    else:
        base, quantified = quantify(prescriptions, plan.model, plan.plan, gpu)
    return base, [dataclasses.replace(r, quantified=q) for r, q in zip(rows, quantified, strict=True)]


def _split(rows: list[Row], done: dict[str, str]) -> tuple[list[Row], list[Row]]:
    """(ranked, set apart): rows the log shows done, and ladder rows already in the plan or not applicable."""
    ranked, apart = [], []
    for r in rows:
        q = r.quantified
        why = done.get(r.prescription.id)
        # a row that shrinks the culprit stays: the failed allocation shows its lever is not in effect
        if (
            why is None
            and r.ladder
            and not r.shrinks_culprit
            and q is not None
            and q.note in (NOT_APPLICABLE, NEEDS_GPUS)
        ):
            why = q.note
        if why is None:
            ranked.append(r)
        else:
            apart.append(dataclasses.replace(r, apart=why))
    return ranked, apart
