"""The post-training rungs of the ladder (`rungs.RUNGS` places them by rank), and the per-task wording of two
shared rungs (the Liger rung and LoRA).

Where each stands on the cost ladder, and why (TRL 1.16 is the reference; the mechanisms are billed by
`core/billing/posttrain/`):
* ① **precompute the reference log-probs** (DPO, KTO: `precompute_ref_log_probs`): one no-grad pass over the
  dataset before training, and no reference model held or run in the steps (`dpo_trainer.py` `DPOTrainer.__init__`
  builds none): every step gets faster, the objective is the same;
* ① **a leaner colocated vLLM fraction** (`vllm_gpu_memory_utilization`): the fraction that still holds vLLM's
  weights, its profiling pass and the KV cache of this GPU's whole generation batch, so every sequence still
  decodes at once (no slower). Below it vLLM's KV cache holds fewer concurrent sequences and generation slows:
  the climb does not go there;
* ② **a smaller generation batch** (`generation_batch_size`, TRL's `steps_per_generation` below the accumulation
  steps; transformers' generation only, whose KV cache scales with it): the smallest batch TRL accepts (a
  multiple of the global batch and of `num_generations`, `GRPOConfig.__post_init__`); it costs time (more, smaller
  generations, each reading the weights once per token), as checkpointing does;
* ② **vLLM sleep mode** (`vllm_enable_sleep_mode`): vLLM's weights and KV cache leave the card while the policy
  trains (`VLLMGeneration`: `llm.sleep(level=2)` after generating, `wake_up` before the next): the weights are
  reloaded every step;
* ⑦ **vLLM server mode on another GPU** (`vllm_mode="server"`, `trl vllm-serve`): nothing of generation on the
  training GPUs, but one more GPU, as sharding needs more GPUs;
* ⑨ **a change of the objective**: `beta` 0 (GRPO/RLOO: no reference model, no KL term), fewer generations per
  prompt (a smaller group: a noisier advantage), shorter completions (truncated answers). They change what is
  learned, not how, so they come after every rung that keeps the training (LoRA too, whose reference is the base
  with its adapter disabled: no second copy).
"""

from __future__ import annotations

import math

from memdoc.core.billing.decode import kv_cache_bytes, prefill_activation_bytes
from memdoc.core.billing.posttrain.generation import rows_per_device
from memdoc.core.model.gpu import GpuSpec
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.plan import TrainingPlan
from memdoc.core.model.plan_post import Task, Vllm
from memdoc.core.remedies.rung import Rung

VLLM_PROFILE_TOKENS = 4096
"""vLLM's profiling batch in TRL's colocated engine (`max_num_batched_tokens=4096`, trl/generation/vllm_generation.py
`VLLMGeneration._init_vllm`): the activation peak it reserves next to the weights."""
VLLM_FRACTION_STEP = 0.05
"""The lean fraction is rounded up to this step."""

LIGER_ACTIONS = dict.fromkeys(
    ("dpo", "kto", "grpo", "rloo"),
    "Liger's layer kernels (TRL keeps its own fused LM head: no Liger loss)",
)
"""The Liger rung under TRL's preference and RL trainers (`dpo_trainer.py`, `kto_trainer.py`, `grpo_trainer.py`,
`rloo_trainer.py` `__init__`: `use_liger_kernel` sets `liger_kernel_config["fused_linear_cross_entropy"] = False`,
since Liger's loss would replace the forward TRL patches with `add_fused_lm_head`)."""
LORA_ACTIONS = dict.fromkeys(
    ("dpo", "kto", "grpo", "rloo"),
    "LoRA adapters instead of full fine-tuning; the reference is the base, adapter disabled (no copy)",
)
"""LoRA on a task with a reference: TRL builds no reference model for a PEFT policy and runs the base under
`use_adapter(..., None)` (`dpo_trainer.py` `DPOTrainer.__init__` / `_compute_loss`)."""


def task_action(rung_id: str) -> dict[str, str]:
    """The per-task actions of a shared rung (`Rung.for_task`)."""
    return {"fused-loss": LIGER_ACTIONS, "lora": LORA_ACTIONS}.get(rung_id, {})


def _precompute(p: TrainingPlan) -> TrainingPlan | None:
    if p.task not in (Task.DPO, Task.KTO) or p.precompute_ref:
        return None
    return p.replace(precompute_ref=True)


def lean_vllm_memory(p: TrainingPlan, model: ModelSpec, gpu: GpuSpec | None) -> float | None:
    """The smallest fraction (rounded up to `VLLM_FRACTION_STEP`) that holds vLLM's weights in the compute dtype, its
    profiling forward and the KV cache of this GPU's generation batch at prompt + completion tokens; None without
    a card."""
    if gpu is None:
        return None
    cb = p.precision.compute_bits // 8
    rows = rows_per_device(p)
    need = (
        model.params.total * cb
        + prefill_activation_bytes(model, VLLM_PROFILE_TOKENS, cb)
        + kv_cache_bytes(model, batch=rows, context=p.seq_len + p.completion_len, bytes_per_element=cb)
    )
    return math.ceil(need / gpu.memory_bytes / VLLM_FRACTION_STEP - 1e-9) * VLLM_FRACTION_STEP


def _colocated(p: TrainingPlan) -> TrainingPlan | None:
    return p if p.vllm is Vllm.COLOCATE else None


def _lean_vllm(p: TrainingPlan, model: ModelSpec, gpu: GpuSpec | None) -> TrainingPlan | None:
    lean = lean_vllm_memory(p, model, gpu) if p.vllm is Vllm.COLOCATE else None
    if lean is None or lean >= p.vllm_memory - 1e-9 or lean > 1:
        return None
    return p.replace(vllm_memory=round(lean, 2))


def smallest_generation_batch(p: TrainingPlan, num_generations: int | None = None) -> int:
    """The smallest global generation batch TRL accepts: a multiple of the global batch (micro-batch × data-parallel
    GPUs) and of `num_generations` (`GRPOConfig.__post_init__`, 1.16)."""
    return math.lcm(p.micro_batch * p.dp_size, num_generations or p.num_generations)


def _generation_total(p: TrainingPlan) -> int:
    return p.generation_batch or p.micro_batch * p.dp_size * p.grad_accum


def _smaller_generation(p: TrainingPlan) -> TrainingPlan | None:
    if p.task not in (Task.GRPO, Task.RLOO) or p.vllm is not Vllm.NONE:
        return None
    smallest = smallest_generation_batch(p)
    return p.replace(generation_batch=smallest) if smallest < _generation_total(p) else None


def _sleep(p: TrainingPlan) -> TrainingPlan | None:
    return p.replace(vllm_sleep=True) if p.vllm is Vllm.COLOCATE and not p.vllm_sleep else None


def _server(p: TrainingPlan) -> TrainingPlan | None:
    if not p.task.is_online or p.vllm is Vllm.SERVER:
        return None
    return p.replace(vllm=Vllm.SERVER, vllm_sleep=False)


def _beta_zero(p: TrainingPlan) -> TrainingPlan | None:
    if p.task not in (Task.GRPO, Task.RLOO) or not (p.effective_beta or 0) > 0:
        return None
    return p.replace(beta=0.0)


def fewer_generations(p: TrainingPlan) -> tuple[int, int] | None:
    """(half the completions per prompt, the smallest generation batch TRL then accepts), or None when that batch is
    no smaller than the plan's: TRL's per-device batch counts completions, so fewer per prompt saves memory only
    through a smaller generation batch of whole groups (`GRPOConfig.__post_init__`, 1.16)."""
    if p.task not in (Task.GRPO, Task.RLOO) or p.num_generations <= 2:
        return None
    fewer = max(2, p.num_generations // 2)
    batch = smallest_generation_batch(p, fewer)
    current = p.generation_batch or p.micro_batch * p.dp_size * p.grad_accum
    return (fewer, batch) if batch < current else None


def _fewer_generations(p: TrainingPlan) -> TrainingPlan | None:
    fewer = fewer_generations(p)
    return None if fewer is None else p.replace(num_generations=fewer[0], generation_batch=fewer[1])


def _shorter(p: TrainingPlan) -> TrainingPlan | None:
    if not p.task.is_online or p.completion_len < 64:
        return None
    return p.replace(completion_len=p.completion_len // 2)


POST_RUNGS: tuple[Rung, ...] = (
    Rung(
        "precompute-ref",
        "precomputed reference log-probs (--precompute-ref): no reference model in the steps",
        _precompute,
        rank=1,
        lever={"precompute_ref": (True,)},
    ),
    Rung(
        "vllm-memory",
        "a leaner colocated vLLM (--vllm-memory) that still holds the whole generation batch",
        _colocated,
        rank=1,
        lever={"vllm_memory": ("lean",)},
        sized=_lean_vllm,
    ),
    Rung(
        "generation-batch",
        "a smaller generation batch (--generation-batch): a smaller KV cache, more generations",
        _smaller_generation,
        rank=2,
        lever={"generation_batch": ("smallest",)},
    ),
    Rung(
        "vllm-sleep",
        "vLLM sleep mode (--vllm-sleep): its memory freed while the policy trains",
        _sleep,
        rank=2,
        lever={"vllm_sleep": (True,)},
    ),
    Rung(
        "vllm-server",
        "vLLM in server mode on another GPU (--vllm server): no generation on the training GPUs",
        _server,
        rank=7,
        lever={"vllm": ("server",)},
    ),
    Rung(
        "beta-0",
        "beta 0: no reference model and no KL term (changes the objective)",
        _beta_zero,
        rank=9,
        lever={"beta": (0.0,)},
    ),
    Rung(
        "fewer-generations",
        "half the completions per prompt, so a smaller generation batch holds whole groups (--generations, "
        "--generation-batch; changes the training)",
        _fewer_generations,
        rank=9,
        lever={"num_generations": ("half",)},
    ),
    Rung(
        "shorter-completions",
        "half the completion length (--completion-len; changes the training)",
        _shorter,
        rank=9,
        lever={"completion_len": ("half",)},
    ),
)
"""The post-training rungs, cheapest first; `rungs.RUNGS` merges them into the ladder by rank."""

__all__ = ["POST_RUNGS", "lean_vllm_memory", "smallest_generation_batch", "task_action"]
