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


def kv_cache(model: ModelSpec, plan: TrainingPlan, *, context: int | None = None) -> int:
    """transformers' cache of every row at `context` tokens (default: prompt + completion, the last decode step),
    compute dtype."""
    cb = plan.precision.compute_bits // 8
    context = plan.seq_len + plan.completion_len if context is None else context
    return kv_cache_bytes(model, batch=rows_per_device(plan), context=context, bytes_per_element=cb)


def generate_peak(model: ModelSpec, plan: TrainingPlan) -> int:
    """The larger of generation's two peaks (transformers 5.24 `GenerationMixin._sample`, `DynamicLayer.update`):

    * the prefill: the prompts' cache (`seq_len` tokens per row) and the prefill's layer transient
      (`decode.prefill_activation_bytes`); the completion's cache does not exist yet;
    * the last decode step: the whole cache, one layer's keys (or values) at the full context twice over
      (`DynamicLayer.update`: `self.keys = torch.cat([self.keys, key_states], dim=-2)` builds the grown tensor
      while the old one is alive), and the last position's logits (16-bit + the fp32 copy).
    """
    cb, rows = plan.precision.compute_bits // 8, rows_per_device(plan)
    prefill = kv_cache(model, plan, context=plan.seq_len) + prefill_activation_bytes(model, rows * plan.seq_len, cb)
    full = kv_cache(model, plan)
    grow = full // (2 * model.num_layers)  # one layer's K at the full context, old and new alive in `torch.cat`
    return max(prefill, full + grow + rows * model.vocab_size * (cb + FP32))


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
        return generate_peak(model, plan) + gathered_weights(model, plan)
    return vllm_pool(plan, gpu)


def resident_pool(plan: TrainingPlan, gpu: GpuSpec | None) -> int:
    """vLLM's pool held through the training phases too (colocated, no sleep mode)."""
    return 0 if plan.vllm_sleep else vllm_pool(plan, gpu)


__all__ = [
    "gathered_weights",
    "generate_peak",
    "generation_bytes",
    "kv_cache",
    "resident_pool",
    "rows_per_device",
    "vllm_pool",
]
