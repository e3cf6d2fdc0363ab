"""`memdoc prescribe`'s result: the symptom (given, or read from an OOM log), its causes, and its
prescriptions ranked (the plan's culprit tensor first) and quantified with the bill."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from memdoc.core.billing.inference import InferencePlan, KvCache, Weights
from memdoc.core.doctor.culprit import (
    PlanTensor,
    culprit_first,
    find_culprit,
    plan_tensors,
    shrinks,
    symptom_for_culprit,
)
from memdoc.core.doctor.oom import OomEvent, first_oom
from memdoc.core.doctor.oom_causes import card_from_capacity
from memdoc.core.doctor.oom_symptom import LARGE_BLOCK_UNKNOWN, SymptomGuess, infer_symptom
from memdoc.core.doctor.quantify import Quantified, quantify, quantify_inference
from memdoc.core.doctor.symptoms import Symptom, get_symptom
from memdoc.core.model.gpu import GpuSpec
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.plan import TrainingPlan
from memdoc.errors import ConfigError


@dataclass(frozen=True)
class Reading:
    """The symptom to treat and, from a log, the OOM and what it suggests."""

    symptom: Symptom
    oom: OomEvent | None = None
    guess: SymptomGuess | None = None
    from_flag: bool = False
    """The symptom was given with --symptom (else guessed from the log)."""


def read_symptom(symptom: str | None, log_text: str | None) -> Reading:
    """The symptom named, or guessed from the first OOM of `log_text` (a log without one needs `symptom`)."""
    oom = guess = None
    if log_text is not None:
        oom = first_oom(log_text)
        if oom is None and symptom is None:
            raise ConfigError(
                "no CUDA/HIP out-of-memory message found in the log",
                hint="pass --symptom NAME (see memdoc prescribe --list)",
            )
        guess = infer_symptom(oom, log_text)
    return Reading(get_symptom(symptom or guess.symptom), oom, guess, from_flag=symptom is not None)


@dataclass(frozen=True)
class PrescribeResult:
    """The prescriptions of a symptom in the order to try them, with what each saves on the plan."""

    symptom: Symptom
    order: list
    """The symptom's prescriptions, those that shrink the culprit first."""
    oom: OomEvent | None = None
    guess: SymptomGuess | None = None
    quantified: list[Quantified] | None = None
    base: object = None
    """The bill (training or inference) of the plan as given, or None without a model."""
    culprit: PlanTensor | None = None
    from_flag: bool = False

    def to_json(self) -> dict:
        by_id = {q.prescription.id: q for q in self.quantified or []}
        base = self.base
        return {
            "symptom": self.symptom.id,
            "oom": self._oom_json(),
            "diagnosis": self._diagnosis_json(),
            "bill": None if base is None else {"per_gpu": {"process_total": base.process_total}, "fits": base.fits},
            "prescriptions": [
                {
                    "id": p.id,
                    "action": p.action,
                    "why": p.why,
                    "saves_bytes": by_id[p.id].saves_bytes if p.id in by_id else None,
                    "fits_alone": by_id[p.id].fits_alone if p.id in by_id else None,
                    "time_cost": p.time_cost,
                    "how": p.how,
                    "shrinks_culprit": shrinks(p, self.culprit),
                }
                for p in self.order
            ],
        }

    def _oom_json(self) -> dict | None:
        if self.oom is None:
            return None
        data = {k: v for k, v in dataclasses.asdict(self.oom).items() if k != "raw"}
        data["culprit"] = None if self.culprit is None else self.culprit.to_json()
        return data

    def _diagnosis_json(self) -> dict | None:
        guess = self.guess
        if guess is None:
            return None
        card, names = card_from_capacity(self.oom.total if self.oom is not None else None)
        return {
            "symptom_from": "flag" if self.from_flag else ("assumption" if guess.assumptions else "log"),
            "guessed_symptom": guess.symptom,
            "phase": guess.phase,
            "causes": [dataclasses.asdict(c) for c in guess.causes],
            "reasons": list(guess.reasons),
            "assumptions": list(guess.assumptions),
            "unknowns": list(guess.unknowns),
            "card": None if card is None else {"memory_bytes": card.memory_bytes, "matches": list(names)},
        }


def prescribe(
    reading: Reading,
    model: ModelSpec | None = None,
    plan: TrainingPlan | None = None,
    gpu: GpuSpec | None = None,
    *,
    kv_cache: str = "auto",
    weights: str = "auto",
    prefill_chunk: int | None = None,
) -> PrescribeResult:
    """Rank and, given a model and plan, quantify the prescriptions of `reading`.

    With an OOM, "Tried to allocate X" is matched to the plan's tensor of that size (the culprit):
    prescriptions that shrink it come first, and a guessed symptom follows the culprit. Without
    `gpu`, the card is the one the OOM's capacity names. inference-oom is quantified with the
    inference bill (`kv_cache`, `weights`, `prefill_chunk`).
    """
    chosen, guess = reading.symptom, reading.guess
    quantified = base = culprit = None
    if model is not None:
        oom = reading.oom
        if oom is not None:
            tensors = plan_tensors(model, plan, inference=chosen.id == "inference-oom")
            culprit = find_culprit(oom.requested, tensors, guess.phase)
            if culprit is not None:
                guess = dataclasses.replace(
                    guess, unknowns=tuple(u for u in guess.unknowns if u != LARGE_BLOCK_UNKNOWN)
                )
            if not reading.from_flag:
                chosen = get_symptom(symptom_for_culprit(chosen.id, culprit))
            if gpu is None and oom.total:
                gpu = card_from_capacity(oom.allowed if oom.allowed and oom.allowed < oom.total else oom.total)[0]
        if chosen.id == "inference-oom":
            inference = InferencePlan(
                plan=plan, kv_cache=KvCache(kv_cache), weights=Weights(weights), prefill_chunk=prefill_chunk
            )
            base, quantified = quantify_inference(chosen.prescriptions, model, inference, gpu)
        else:
            base, quantified = quantify(chosen.prescriptions, model, plan, gpu)
    return PrescribeResult(
        symptom=chosen,
        order=culprit_first(chosen.prescriptions, culprit),
        oom=reading.oom,
        guess=guess,
        quantified=quantified,
        base=base,
        culprit=culprit,
        from_flag=reading.from_flag,
    )
