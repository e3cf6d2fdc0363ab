"""What makes inference fit: the inference ladder, the largest batch or context, and vLLM's budget.

The ladder applies remedies cumulatively, cheapest first, and stops at the first that fits: a chunked prefill
(nearly free), fewer sequences at once (throughput only), an 8-bit then a 4-bit KV cache (a little accuracy), 8-bit
then 4-bit weights (accuracy and some speed), and last a shorter context (it changes what can be generated). Once
the batch has been lowered, each later remedy raises it back to the largest (up to the one asked for) that fits, so
a remedy is credited with the sequences it buys back.
"""

from __future__ import annotations

from dataclasses import dataclass

from memdoc.core.billing.bill import process_overhead_bytes
from memdoc.core.billing.bill_json import row_per_gpu_json
from memdoc.core.billing.inference import (
    InferenceBill,
    InferencePlan,
    KvCache,
    Weights,
    inference_bill,
    inference_weight_bytes,
    kv_bytes_per_element,
    kv_cache_bytes,
    prefill_activation_bytes,
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


VLLM_UTILIZATION = 0.9
"""vLLM's default `gpu_memory_utilization`: the fraction of the card's memory the engine may use."""
VLLM_BLOCK_TOKENS = 16
"""vLLM's default KV-cache block size (tokens per page)."""


def vllm_defaults(gpu: GpuSpec) -> tuple[int, int]:
    """`vllm serve`'s `max_num_batched_tokens` and `max_num_seqs`: 8192 and 1024 on a card of ≥ 70 GiB
    that is not an A100, else 2048 and 256 (`vllm/engine/arg_utils.py: EngineArgs.get_batch_defaults`)."""
    if gpu.memory_bytes >= 70 * 1024**3 and "a100" not in gpu.id:
        return 8192, 1024
    return 2048, 256


@dataclass(frozen=True)
class VllmFit:
    """What vLLM would do with this model on this card (an estimate, not traced).

    vLLM profiles one forward of `max_num_batched_tokens` tokens and a sampler run over
    `max_num_seqs` rows, then gives the KV cache the rest of `gpu_memory_utilization` × the card:
    `gpu_worker.determine_available_memory` = total × utilization − (weights + the profiled peak
    activations + memory outside torch). The engine refuses to start when one sequence of
    `max_model_len` tokens does not fit that budget. CUDA-graph capture memory is not modelled
    (`--enforce-eager` removes it)."""

    utilization: float
    kv_budget_bytes: int
    kv_bytes_per_token: int
    kv_tokens: int
    """Tokens the cache holds at `utilization`, whole blocks of 16."""
    max_model_len: int
    """Longest context one sequence can have: kv_tokens capped at the model's context."""
    sequences: int
    """Sequences of the plan's context that fit at once."""
    utilization_needed: float
    """The utilization at which the plan's batch × context fits the cache."""

    def to_json(self) -> dict:
        return {
            "gpu_memory_utilization": self.utilization,
            "kv_budget_bytes": self.kv_budget_bytes,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "kv_cache_tokens": self.kv_tokens,
            "max_model_len": self.max_model_len,
            "sequences_at_context": self.sequences,
            "gpu_memory_utilization_needed": round(self.utilization_needed, 3),
        }


def vllm_fit(model: ModelSpec, inference: InferencePlan, gpu: GpuSpec) -> VllmFit:
    dt = inference.plan.precision.compute_bits // 8
    batched_tokens, max_seqs = vllm_defaults(gpu)
    weights = inference_weight_bytes(model, inference.weight_format, dt)
    profiled = max(
        prefill_activation_bytes(model, batched_tokens, dt), min(max_seqs, batched_tokens) * model.vocab_size * (dt + 4)
    )
    outside = process_overhead_bytes(gpu)
    fixed = weights + profiled + outside
    kv = KvCache.AUTO if inference.kv_cache is KvCache.INT4 else inference.kv_cache  # vLLM has no 4-bit cache
    per_token = kv_cache_bytes(model, batch=1, context=1, bytes_per_element=kv_bytes_per_element(kv, dt))
    budget = int(gpu.memory_bytes * VLLM_UTILIZATION) - fixed
    tokens = max(0, budget) // (per_token * VLLM_BLOCK_TOKENS) * VLLM_BLOCK_TOKENS
    longest = min(tokens, model.max_positions or tokens)
    wanted = inference.batch * inference.context
    return VllmFit(
        utilization=VLLM_UTILIZATION,
        kv_budget_bytes=budget,
        kv_bytes_per_token=per_token,
        kv_tokens=tokens,
        max_model_len=longest,
        sequences=tokens // inference.context,
        utilization_needed=(fixed + wanted * per_token) / gpu.memory_bytes,
    )
