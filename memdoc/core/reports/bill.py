"""`memdoc bill`'s report: the bill, the step time, the ladder, --max and the dataset section;
and the inference report of `bill --inference` (the inference bill, its ladder, vLLM's budget)."""

from __future__ import annotations

from dataclasses import dataclass

from memdoc.core.billing.bill import Bill, bill_json, compute_bill
from memdoc.core.billing.inference import InferenceBill, InferencePlan, inference_bill
from memdoc.core.billing.posttrain.steptime import task_step_time
from memdoc.core.billing.run_phases import RunBill, run_bill
from memdoc.core.billing.run_verdict import RunVerdict, run_verdict
from memdoc.core.billing.steptime import StepTime
from memdoc.core.billing.vllm_budget import VllmStartup, vllm_startup
from memdoc.core.billing.vllm_startup import VllmArgs
from memdoc.core.model.gpu import GpuSpec
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.plan import TrainingPlan
from memdoc.core.remedies.climb import LadderStep, climb
from memdoc.core.remedies.inference import InferenceStep, climb_inference, inference_maximum
from memdoc.core.remedies.maximum import Maximum, maximum


@dataclass(frozen=True)
class BillReport:
    """One training step's bill with what `memdoc bill` adds to it."""

    bill: Bill
    time: StepTime
    world_size: int
    ladder: list[LadderStep]
    """The cheapest remedies, applied in order until the plan fits comfortably (empty when it does or was not
    asked)."""
    max_of: str | None = None
    """The knob --max searched ('batch' or 'seq'), or None."""
    maximum: Maximum | None = None
    """Its largest value that fits comfortably, and that fits at all."""
    dataset: dict | None = None
    """The --dataset section (the JSON `dataset` object), or None."""
    run: RunBill | None = None
    """The whole run: load, step, evaluation, save, per rank (`run_phases.run_bill`)."""
    verdict: RunVerdict | None = None
    """The whole run's verdict (`run_verdict`): the GPU's deciding part and the host RAM per node."""

    @property
    def fits(self) -> bool | None:
        """Does the whole run fit (every part on the GPU, and the host where it is judged)?"""
        return self.bill.fits if self.verdict is None else self.verdict.fits

    def to_json(self) -> dict:
        data = bill_json(self.bill)
        data["time"] = self.time.to_json(self.world_size)
        data["ladder"] = [step.to_json() for step in self.ladder]
        if self.maximum is not None:
            data["max"] = self.maximum.to_json()
        if self.dataset is not None:
            data["dataset"] = self.dataset
        data["run"] = None if self.run is None else self.run.to_json()
        if self.verdict is not None:
            data["run_verdict"] = self.verdict.to_json()
            data["fits"] = self.verdict.fits
        return data


def bill_report(
    model: ModelSpec,
    plan: TrainingPlan,
    gpu: GpuSpec | None,
    *,
    ladder: bool = True,
    max_of: str | None = None,
    dataset: dict | None = None,
    fixed: frozenset[str] = frozenset(),
    host=None,
) -> BillReport:
    """Bill the plan, time the step, climb the ladder when it does not fit comfortably (if `ladder`), and
    find the largest `max_of` ('batch' or 'seq') that fits comfortably and at all. `fixed`: the plan fields
    the user set (`Setup.explicit`), which the ladder keeps while it can (`climb`). `host`: the host RAM per node
    the whole run's verdict holds the host against (`bytes` and `source`, a `resolve.host.HostRam`; None: not
    judged)."""
    the_bill = compute_bill(model, plan, gpu)
    run = run_bill(the_bill)
    return BillReport(
        bill=the_bill,
        time=task_step_time(model, plan, gpu),
        world_size=plan.world_size,
        ladder=[] if (not ladder or gpu is None or the_bill.comfortable) else climb(model, plan, gpu, fixed=fixed),
        max_of=max_of,
        maximum=None if max_of is None or gpu is None else maximum(model, plan, gpu, max_of),
        dataset=dataset,
        run=run,
        verdict=run_verdict(run, *((host.bytes, host.source) if host is not None else ())),
    )


@dataclass(frozen=True)
class InferenceReport:
    """`memdoc bill --inference`: the inference bill, its ladder, --max, and vLLM's budget on the card."""

    bill: InferenceBill
    ladder: list[InferenceStep]
    vllm: VllmStartup | None
    engine: str | None = None
    """"vllm" or "hf" when one engine was asked for; None: transformers' bill with vLLM's start-up after it."""
    max_of: str | None = None
    maximum: Maximum | None = None
    """The largest batch or context that fits comfortably, and that fits at all (`inference_maximum`)."""

    @property
    def fits(self) -> bool | None:
        """vLLM's: does it start; otherwise the transformers bill's fit."""
        if self.engine == "vllm" and self.vllm is not None:
            return self.vllm.starts
        return self.bill.fits

    def to_json(self) -> dict:
        data = self.bill.to_json()
        data["engine"] = self.engine
        data["ladder"] = [step.to_json() for step in self.ladder]
        data["vllm"] = None if self.vllm is None else self.vllm.to_json()
        if self.maximum is not None:
            data["max"] = self.maximum.to_json()
        return data


def inference_report(
    model: ModelSpec,
    plan: InferencePlan,
    gpu: GpuSpec | None,
    *,
    ladder: bool = True,
    max_of: str | None = None,
    engine: str | None = None,
    vllm: VllmArgs | None = None,
) -> InferenceReport:
    """The inference bill; with a GPU, also its ladder (if `ladder`, not for engine "vllm"), the largest `max_of`
    and vLLM's start-up with `vllm` (its defaults when None; not for engine "hf")."""
    serving = gpu is not None and engine != "hf"
    return InferenceReport(
        bill=inference_bill(model, plan, gpu),
        ladder=[] if (not ladder or gpu is None or engine == "vllm") else climb_inference(model, plan, gpu),
        vllm=vllm_startup(model, plan, gpu, vllm or VllmArgs()) if serving else None,
        engine=engine,
        max_of=max_of,
        maximum=None if max_of is None or gpu is None else inference_maximum(model, plan, gpu, max_of),
    )
