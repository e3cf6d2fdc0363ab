"""`memdoc diagnose`'s reports, each with `to_json()`: a dry run's traced step (and the real CUDA step) next
to the bill, a traced prefill next to the inference bill, and a script's run with the bill of the HF model it
trained and the doctor's reading of its OOM.

What is measured comes from `memdoc.probe` (the tracers, the CUDA step, the script runner); these reports
only put it next to the bill, in the bill's words (docs/output.md, "diagnose").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memdoc.core.billing.bill import Bill, compute_bill
from memdoc.core.billing.bill_json import bill_json, billed_phases, with_bill
from memdoc.core.billing.inference import InferenceBill
from memdoc.core.model.gpu import GpuSpec, gpu_json
from memdoc.core.model.model_spec import ModelSpec, model_json, spec_from_config
from memdoc.core.model.plan import TrainingPlan

if TYPE_CHECKING:
    from memdoc.core.billing.measurement import Measurement


@dataclass(frozen=True)
class TracedStepReport:
    """`memdoc diagnose MODEL`: one traced training step (`Measurement`) next to the bill of its plan."""

    model: ModelSpec
    plan: TrainingPlan
    gpu: GpuSpec | None
    measurement: Measurement
    bill: Bill
    cuda: dict | None = None
    """The real step on the local GPU (`--device cuda`: `memdoc.probe.cuda_step.run_cuda_step`), or None."""

    def to_json(self) -> dict:
        """The measurement's own JSON with the bill's `per_gpu` (`billed`), its peak phase, the bill's total of
        each traced phase, the model, the GPU and the plan (and `cuda` when the step ran for real)."""
        data = self.measurement.to_json()
        data["billed"] = bill_json(self.bill)["per_gpu"]
        data["bill_peak_phase"] = self.bill.peak_phase
        phases = billed_phases(self.bill)
        data["bill"] = {"phases": {p: v for p, v in phases.items() if p in self.measurement.phases}}
        data["model"] = model_json(self.model, self.bill.states.trainable_params)
        data["gpu"] = gpu_json(self.gpu, self.plan.world_size)
        data["plan"] = self.plan.to_dict()
        if self.cuda is not None:
            data["cuda"] = self.cuda
        return data


@dataclass(frozen=True)
class TracedPrefillReport:
    """`memdoc diagnose MODEL --inference`: a traced prefill (`memdoc.probe.inference_trace.InferenceTrace`)
    next to the inference bill."""

    traced: Any
    bill: InferenceBill

    def to_json(self) -> dict:
        """The inference bill's model, GPU and plan, the trace's JSON, and the bill's `per_gpu` less its
        process total (`billed`: what a trace of tensors can be compared with)."""
        data = self.bill.to_json()
        return {
            "mode": "inference-traced",
            "model": data["model"],
            "gpu": data["gpu"],
            "plan": data["plan"],
            "traced": self.traced.to_json(),
            "billed": {k: v for k, v in data["per_gpu"].items() if k != "process_total"},
        }


@dataclass(frozen=True)
class ScriptReport:
    """`memdoc diagnose SCRIPT`: the run (`memdoc.probe.script.ScriptResult`), the bill of the HF model and
    plan it was seen to train (None when it trained none the bill knows), and the files written."""

    result: Any
    bill: Bill | None = None
    written: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        """The run's JSON, `hf` (the detected model and plan, and their bill), `post_training` (each phase's
        billed bytes next to the measured ones) and `written`."""
        result, bill = self.result, self.bill
        data = result.to_json()
        if bill is not None:
            data["hf"] = {
                "model_id": result.hf["model_id"],
                "detected_plan": result.hf["detected"],
                "billed": bill_json(bill)["per_gpu"],
                "bill_peak_phase": bill.peak_phase,
            }
        if result.post is not None:
            data["post_training"] = with_bill(result.post, bill)
        data["written"] = list(self.written)
        return data


def script_bill(hf: dict) -> tuple[Bill | None, str | None]:
    """(the bill, None) of the plan detected for a script's HF model (`ScriptResult.hf`), or (None, the
    note saying why there is none) when its config is not billable."""
    try:
        spec = spec_from_config(hf["config"], model_id=hf["model_id"], source="local")
        return compute_bill(spec, hf["plan"], None), None
    except Exception as exc:  # noqa: BLE001 (an architecture the bill does not know: the run is reported without it)
        return None, f"note: no bill for {hf['model_id']}: {exc}"


def read_oom(oom: dict, traceback_text: str | None, steps: int) -> None:
    """Add the doctor's diagnosis of a script's OOM (`memdoc.core.doctor.diagnosis.diagnose_oom`, the pipeline
    `memdoc prescribe --log` runs) to its `oom` record: its kind, symptom, causes and prescriptions; an OOM
    before the first optimizer step (`steps` == 0) is the first step."""
    from memdoc.core.doctor.diagnosis import RunContext, diagnose_oom

    text = f"{traceback_text or ''}\n{oom.get('message') or ''}"
    d = diagnose_oom(text, run=RunContext(step=oom.get("step"), first_step=steps == 0))
    data = d.to_json()
    oom["symptom"] = d.symptom.id
    oom["kind"] = d.kind
    oom["traceback_phase"] = d.phase
    oom["causes"] = data["causes"]
    oom["prescriptions"] = data["prescriptions"]
    oom["set_apart"] = data["set_apart"]
    oom["prescribe"] = f"memdoc prescribe --symptom {d.symptom.id}"
