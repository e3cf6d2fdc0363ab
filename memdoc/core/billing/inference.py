"""Inference memory (`memdoc bill --inference`): weights + KV cache + one forward's transients.

KV cache (HF `DynamicCache`): 2 (K and V) × layers × KV heads × head_dim × context × batch ×
bytes per element. The forward's transient peak is the prefill of the whole context: the MLP's
intermediate tensors (gate, up, act·up: 3 × T × intermediate) and the attention output, while
`generate` computes logits only for the last token (`logits_to_keep=1`), upcast to fp32.
"""

from __future__ import annotations

from dataclasses import dataclass

from memdoc.core.billing.allocator import CachingAllocator
from memdoc.core.billing.bill import PROCESS_OVERHEAD_BYTES
from memdoc.core.billing.verdict import verdict
from memdoc.core.model.gpu import GpuSpec, gpu_json
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.plan import Method, TrainingPlan
from memdoc.core.billing.states import qlora_weight_bytes


@dataclass(frozen=True, kw_only=True)
class InferenceBill:
    model: ModelSpec
    plan: TrainingPlan
    gpu: GpuSpec | None
    weights: int
    kv_cache: int
    activations: int

    @property
    def peak_allocated(self) -> int:
        return self.weights + self.kv_cache + self.activations

    @property
    def process_total(self) -> int:
        """Reserved (each item as one block through the caching-allocator simulation: its segment
        rounding; inference has no per-tensor event stream yet) + the process's non-allocator memory."""
        alloc = CachingAllocator()
        for size in (self.weights, self.kv_cache, self.activations):
            if size:
                alloc.malloc(size)
        overhead = None if self.gpu is None else self.gpu.process_overhead_bytes
        return alloc.stats.peak_reserved + (PROCESS_OVERHEAD_BYTES if overhead is None else overhead)

    @property
    def fits(self) -> bool | None:
        return None if self.gpu is None else self.process_total <= self.gpu.memory_bytes

    def to_json(self) -> dict:
        return {
            "mode": "inference",
            "model": {"id": self.model.id, "params": self.model.params.total, "trainable_params": 0},
            "gpu": gpu_json(self.gpu, self.plan.world_size),
            "plan": self.plan.to_dict(),
            "per_gpu": {"weights": self.weights, "kv_cache": self.kv_cache, "activations": self.activations,
                        "peak_allocated": self.peak_allocated, "process_total": self.process_total},
            "peak_phase": "prefill",
            "fits": self.fits,
            "headroom_bytes": None if self.gpu is None else self.gpu.memory_bytes - self.process_total,
            "verdict": None if self.gpu is None else verdict(self.process_total, self.gpu.memory_bytes).to_json(),
        }


def kv_cache_bytes(model: ModelSpec, *, batch: int, context: int, bytes_per_element: int) -> int:
    """2 × layers × kv_heads × head_dim × context × batch × bytes (K and V of every layer)."""
    return 2 * model.num_layers * model.kv_dim * context * batch * bytes_per_element


def inference_bill(model: ModelSpec, plan: TrainingPlan, gpu: GpuSpec | None) -> InferenceBill:
    dt = plan.precision.compute_bits // 8
    if plan.method is Method.QLORA:
        weights = qlora_weight_bytes(model, dt)
    else:
        weights = model.params.total * dt
    tokens = plan.micro_batch * plan.seq_len
    width = max(model.intermediate_size, model.moe_intermediate_size * max(model.experts_per_token, 1))
    prefill = dt * tokens * (3 * width + 2 * model.hidden_size)
    logits = plan.micro_batch * model.vocab_size * (dt + 4)
    return InferenceBill(
        model=model, plan=plan, gpu=gpu, weights=weights,
        kv_cache=kv_cache_bytes(model, batch=plan.micro_batch, context=plan.seq_len, bytes_per_element=dt),
        activations=max(prefill, logits),
    )
