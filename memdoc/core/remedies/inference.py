"""What makes inference fit: the inference ladder and the largest batch or context.

vLLM's start-up (its KV-cache budget) is `memdoc.core.billing.vllm_budget`.

The ladder applies remedies cumulatively, cheapest first, and stops at the first that fits: a chunked prefill
(nearly free), fewer sequences at once (throughput only), an 8-bit then a 4-bit KV cache (a little accuracy), 8-bit
then 4-bit weights (accuracy and some speed), and last a shorter context (it changes what can be generated). Once
the batch has been lowered, each later remedy raises it back to the largest (up to the one asked for) that fits, so
a remedy is credited with the sequences it buys back.
"""

from __future__ import annotations

from dataclasses import dataclass

from memdoc.core.billing.bill_json import row_per_gpu_json
from memdoc.core.billing.inference import (
    InferenceBill,
    InferencePlan,
    KvCache,
    Weights,
    inference_bill,
)
from memdoc.core.billing.verdict import row_fit_json
from memdoc.core.model.gpu import GpuSpec
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.remedies.maximum import Maximum, largest_fitting, largest_value


def max_inference(model: ModelSpec, inference: InferencePlan, gpu: GpuSpec, knob: str) -> int | None:
    """Largest batch ('batch') or context ('seq', multiples of 128 up to the model's context) that fits at all."""
    field = "batch" if knob == "batch" else "context"
    return largest_value(
        knob,
        model,
        inference.plan.allow_long,
        lambda value: bool(inference_bill(model, inference.replace(**{field: value}), gpu).fits),
    )


def inference_maximum(model: ModelSpec, inference: InferencePlan, gpu: GpuSpec, knob: str) -> Maximum:
    """`bill --inference --max`: the largest batch or context that fits comfortably, and that fits at all.

    The inference bill has no allocator simulation, so no minimum memory below its process total: the one
    fit rule is applied to the process total (`InferenceBill.fit`), as its verdict is."""
    field = "batch" if knob == "batch" else "context"

    def comfortable(value: int) -> bool:
        return inference_bill(model, inference.replace(**{field: value}), gpu).fit.comfortable

    best = largest_value(knob, model, inference.plan.allow_long, comfortable)
    fits = max_inference(model, inference, gpu, knob)
    return Maximum(knob=knob, comfortable=best, fits=fits)


@dataclass(frozen=True)
class InferenceRung:
    id: str
    action: str
    cost: str


PREFILL_CHUNK = 2048
"""The chunk the ladder prefills in (`generate(prefill_chunk_size=2048)`; vLLM's scheduler chunks too)."""

RUNGS = (
    InferenceRung(
        "chunked-prefill",
        f"prefill in chunks of {PREFILL_CHUNK} tokens (generate prefill_chunk_size)",
        "none; slightly slower prefill",
    ),
    InferenceRung("batch", "fewer sequences at once", "lower throughput"),
    InferenceRung("kv-fp8", "KV cache in fp8 (vLLM/SGLang kv_cache_dtype: fp8)", "little accuracy"),
    InferenceRung(
        "kv-int4", "4-bit KV cache (transformers cache_implementation='quantized')", "some accuracy; slower decode"
    ),
    InferenceRung("weights-int8", "8-bit weights (bitsandbytes load_in_8bit)", "some accuracy; slower"),
    InferenceRung("weights-nf4", "4-bit NF4 weights (bitsandbytes load_in_4bit)", "more accuracy; slower"),
    InferenceRung("context", "shorter context (prompt + generated tokens)", "changes what can be generated"),
)


@dataclass(frozen=True)
class InferenceStep:
    rung: InferenceRung
    bill: InferenceBill
    saved_bytes: int
    """process_total of the previous step minus this one's."""

    @property
    def fits(self) -> bool:
        return bool(self.bill.fits)

    def to_json(self) -> dict:
        return {
            "rung": self.rung.id,
            "action": self.rung.action,
            "cost": self.rung.cost,
            "plan": self.bill.inference.to_dict(),
            "peak_allocated": self.bill.peak_allocated,
            "process_total": self.bill.process_total,
            "per_gpu": row_per_gpu_json(self.bill.peak_allocated, self.bill.process_total),
            "saved_bytes": self.saved_bytes,
            **row_fit_json(self.fits, None if self.bill.fit is None else self.bill.fit.fit),
        }


def _changed(rung_id: str, current: InferencePlan) -> InferencePlan | None:
    """The plan with the rung's storage change, or None when it does not apply."""
    dt = current.plan.precision.compute_bits // 8
    if rung_id == "chunked-prefill" and current.chunk > PREFILL_CHUNK:
        return current.replace(prefill_chunk=PREFILL_CHUNK)
    if rung_id == "kv-fp8" and current.kv_cache is KvCache.AUTO and dt > 1:
        return current.replace(kv_cache=KvCache.FP8)
    if rung_id == "kv-int4" and current.kv_cache is not KvCache.INT4:
        return current.replace(kv_cache=KvCache.INT4)
    if rung_id == "weights-int8" and current.weight_format is Weights.AUTO and dt > 1:
        return current.replace(weights=Weights.INT8)
    if rung_id == "weights-nf4" and current.weight_format is not Weights.NF4:
        return current.replace(weights=Weights.NF4)
    return None


def climb_inference(model: ModelSpec, inference: InferencePlan, gpu: GpuSpec) -> list[InferenceStep]:
    """The ladder for a plan that does not fit (see the module docstring); empty when it fits."""
    base = inference_bill(model, inference, gpu)
    if base.fits:
        return []
    wanted = inference.batch
    steps: list[InferenceStep] = []
    previous = base

    def record(rung: InferenceRung, bill: InferenceBill) -> None:
        nonlocal previous
        steps.append(InferenceStep(rung, bill, previous.process_total - bill.process_total))
        previous = bill

    def with_best_batch(plan: InferencePlan) -> InferenceBill:
        best = largest_fitting(lambda b: bool(inference_bill(model, plan.replace(batch=b), gpu).fits), wanted)
        return inference_bill(model, plan.replace(batch=best or 1), gpu)

    current = inference
    lowered = False  # once the batch rung has run, each later rung raises the batch back as far as it fits
    for rung in RUNGS:
        if rung.id == "batch":
            if wanted == 1:
                continue
            bill, lowered = with_best_batch(current), True
        elif rung.id == "context":
            single = current.replace(batch=1)
            longest = max_inference(model, single, gpu, "seq")
            if longest is None or longest >= single.context:
                continue
            bill = inference_bill(model, single.replace(context=longest), gpu)
        else:
            changed = _changed(rung.id, current)
            if changed is None:
                continue
            bill = with_best_batch(changed) if lowered else inference_bill(model, changed, gpu)
            if bill.process_total >= previous.process_total and not bill.fits:
                continue  # saves nothing here
        record(rung, bill)
        current = bill.inference
        if bill.fits:
            break
    return steps
