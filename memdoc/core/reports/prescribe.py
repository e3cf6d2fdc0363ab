"""`memdoc prescribe`'s result: the doctor's one diagnosis (`memdoc.core.doctor.diagnosis`) of the
symptom given, or of the OOM a log shows, with its prescriptions quantified on the plan."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from memdoc.core.billing.bill import Bill
from memdoc.core.billing.inference import InferenceBill
from memdoc.core.billing.verdict import fit_json
from memdoc.core.doctor.diagnosis import OomDiagnosis, PlanContext, diagnose_oom
from memdoc.core.doctor.oom import first_oom
from memdoc.core.doctor.symptoms import get_symptom
from memdoc.core.model.gpu import GpuSpec
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.plan import TrainingPlan
from memdoc.errors import ConfigError


@dataclass(frozen=True)
class Reading:
    """What to diagnose: the log text (None with --symptom alone) and the symptom named with --symptom."""

    log_text: str | None
    symptom: str | None = None


def read_symptom(symptom: str | None, log_text: str | None) -> Reading:
    """The symptom named and/or the log to read; a log without an OOM needs `symptom` (ConfigError)."""
    if symptom is not None:
        get_symptom(symptom)  # an unknown name fails here, with the suggestion
    if log_text is not None and symptom is None and first_oom(log_text) is None:
        raise ConfigError(
            "no CUDA/HIP out-of-memory message found in the log",
            hint="pass --symptom NAME (see memdoc prescribe --list)",
        )
    return Reading(log_text, symptom)


@dataclass(frozen=True)
class PrescribeResult:
    """The diagnosis, as `memdoc prescribe --json` writes it."""

    diagnosis: OomDiagnosis

    def to_json(self) -> dict:
        d = self.diagnosis
        base = d.base
        diagnosis = d.to_json()
        return {
            "symptom": d.symptom.id,
            "oom": self._oom_json(),
            "diagnosis": None if d.guess is None else diagnosis | {"guessed_symptom": d.guess.symptom},
            "bill": None
            if base is None
            else {
                "per_gpu": {"process_total": base.process_total},
                **_fit_json(base),
            },
            "prescriptions": diagnosis["prescriptions"],
            "set_apart": diagnosis["set_apart"],
        }

    def _oom_json(self) -> dict | None:
        d = self.diagnosis
        if d.event is None:
            return None
        data = {k: v for k, v in dataclasses.asdict(d.event).items() if k != "raw"}
        data["culprit"] = None if d.culprit is None else d.culprit.to_json()
        return data


def _fit_json(base: Bill | InferenceBill) -> dict:
    """The fit of the bill the prescriptions were quantified on: a training bill's, or an inference bill's
    (with its own error source, `InferenceBill.fit_json`)."""
    if isinstance(base, InferenceBill):
        return base.fit_json()
    return fit_json(base.fits, base.headroom_bytes, base.fit)


def prescribe(
    reading: Reading,
    model: ModelSpec | None = None,
    plan: TrainingPlan | None = None,
    gpu: GpuSpec | None = None,
    *,
    kv_cache: str = "auto",
    weights: str = "auto",
    prefill_chunk: int | None = None,
    max_length: int | None = None,
) -> PrescribeResult:
    """Diagnose `reading` (`diagnose_oom`); given a model and plan, the culprit tensor and each
    prescription quantified with the bill (the card from the OOM's capacity when `gpu` is None;
    inference-oom with the inference bill: `kv_cache`, `weights`, `prefill_chunk`)."""
    context = None
    if model is not None and plan is not None:
        context = PlanContext(
            model=model,
            plan=plan,
            gpu=gpu,
            max_length=max_length,
            kv_cache=str(getattr(kv_cache, "value", kv_cache)),
            weights=str(getattr(weights, "value", weights)),
            prefill_chunk=prefill_chunk,
        )
    return PrescribeResult(diagnose_oom(reading.log_text, plan=context, symptom=reading.symptom))
