"""The generation of the online tasks (GRPO, RLOO, PPO) on the training GPUs: transformers' KV cache or vLLM's pool.

TRL 1.16 (`grpo_trainer.py`):
* the generation batch (`generation_batch_size`, default per-device batch × processes × `steps_per_generation`)
  is split over the processes; each generates its share (`_generate_single_turn`: `unwrapped_model.generate`
  under `torch.no_grad()`) with a `DynamicCache` growing to prompt + `max_completion_length` tokens per row, in
  the model's dtype (2 × layers × kv_heads × head_dim per token: `decode.kv_cache_bytes`); the prefill is one
  no-grad forward of the prompts (`decode.prefill_activation_bytes`), each decode step the last position's
  logits (`logits[:, -1, :]` copied to fp32 in transformers' `GenerationMixin._sample`);
* `use_vllm` + `vllm_mode="colocate"` (`trl/generation/vllm_generation.py` `VLLMGeneration`): a vLLM `LLM` in
  the process takes `gpu_memory_utilization` × the card for its weights and KV cache, held in every phase unless
  `enable_sleep_mode`: then `llm.sleep(level=2)` after each generation frees both until `wake_up` before the
  next (`sync_weights`, `_generate`); `vllm_mode="server"`: vLLM runs on other GPUs (`trl vllm-serve`);
* under ZeRO-3, transformers' generation runs inside `unwrap_model_for_generation` (trl/models/utils.py) with
  `gather_deepspeed3_params=ds3_gather_for_generation` (default True): every parameter is gathered whole.
"""

from __future__ import annotations

from memdoc.core.billing.decode import kv_cache_bytes, prefill_activation_bytes
from memdoc.core.engines.layout import Engine, engine_layout
from memdoc.core.model.gpu import GpuSpec
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.plan import TrainingPlan
from memdoc.core.model.plan_post import Vllm

FP32 = 4


def rows_per_device(plan: TrainingPlan) -> int:
    """Completions one GPU generates per generation: the global generation batch over the data-parallel GPUs
    (TRL's default: per-device batch × processes × accumulation steps)."""
    total = plan.generation_batch or plan.micro_batch * plan.dp_size * plan.grad_accum
    return max(total // plan.dp_size, 1)


def kv_cache(model: ModelSpec, plan: TrainingPlan) -> int:
    """transformers' cache at the last decode step: every row at prompt + completion tokens, compute dtype."""
    cb = plan.precision.compute_bits // 8
    return kv_cache_bytes(
        model, batch=rows_per_device(plan), context=plan.seq_len + plan.completion_len, bytes_per_element=cb
    )


def generate_transient(model: ModelSpec, plan: TrainingPlan) -> int:
    """On top of the cache: the prefill's layer transient or a decode step's logits (16-bit + fp32), the larger."""
    cb, rows = plan.precision.compute_bits // 8, rows_per_device(plan)
    prefill = prefill_activation_bytes(model, rows * plan.seq_len, cb)
    return max(prefill, rows * model.vocab_size * (cb + FP32))


def gathered_weights(model: ModelSpec, plan: TrainingPlan) -> int:
    """ZeRO-3: the parameters other ranks hold, gathered for generation (`ds3_gather_for_generation`); else 0."""
    layout = engine_layout(plan)
    if layout.engine is not Engine.ZERO3:
        return 0
    whole = model.params.total * layout.gather_bits // 8
    return whole - whole // plan.world_size


def vllm_pool(plan: TrainingPlan, gpu: GpuSpec | None) -> int:
    """Colocated vLLM's share of the card (`vllm_gpu_memory_utilization` × its memory); 0 otherwise or without a GPU."""
    if plan.vllm is not Vllm.COLOCATE or gpu is None:
        return 0
    return int(plan.vllm_memory * gpu.memory_bytes)


def generation_bytes(model: ModelSpec, plan: TrainingPlan, gpu: GpuSpec | None) -> int:
    """What generation adds on the training GPU while it runs: the cache and its transient (transformers), the pool
    (colocated vLLM), nothing (server mode)."""
    if plan.vllm is Vllm.NONE:
        return kv_cache(model, plan) + generate_transient(model, plan) + gathered_weights(model, plan)
    return vllm_pool(plan, gpu)


def resident_pool(plan: TrainingPlan, gpu: GpuSpec | None) -> int:
    """vLLM's pool held through the training phases too (colocated, no sleep mode)."""
    return 0 if plan.vllm_sleep else vllm_pool(plan, gpu)


__all__ = [
    "gathered_weights",
    "generate_transient",
    "generation_bytes",
    "kv_cache",
    "resident_pool",
    "rows_per_device",
    "vllm_pool",
]
