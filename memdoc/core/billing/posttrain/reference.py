"""The reference model (and the old policy): whether it is held and run, its weights, its no-grad forward.

TRL 1.16:
* DPO/KTO (`dpo_trainer.py`, `kto_trainer.py` `__init__`, "Reference model"): with a PEFT model, or with
  `precompute_ref_log_probs` (outside FSDP), no reference model is built; otherwise `create_model_from_path` in
  the policy's dtype (`dtype=self.model.dtype`), prepared like the policy (`prepare_deepspeed`/`prepare_fsdp`:
  sharded under ZeRO-3/FSDP). The reference forward runs under `torch.no_grad()` AFTER the policy's forward
  (`_compute_loss`: `outputs = model(...)` then `ref_outputs = ...`), so the policy's saved activations are
  alive; with PEFT it is the same model under `use_adapter(..., None)` (adapter disabled);
* GRPO/RLOO (`grpo_trainer.py` `__init__`): `beta == 0.0` builds no reference; PEFT disables the adapter. The
  reference and old-policy log-probs run under `torch.no_grad()` in `_generate_and_score_completions`, after
  generation and BEFORE the training forward, in chunks of `per_device_train_batch_size` rows
  (`_get_per_token_logps_and_entropies`); the old policy's (`old_policy_runs`) when `gradient_accumulation_steps %
  (steps_per_generation × num_iterations) != 0` or with vLLM's importance-sampling correction
  (`vllm_importance_sampling_correction`, default True), and always in RLOO;
* PPO (OpenRLHF / LLaMA-Factory `stage: ppo`): a frozen reference and a frozen reward model (scalar head) next
  to the policy, plus a trained value model (scalar head).
"""

from __future__ import annotations

from memdoc.core.billing.activations.head import head_saved
from memdoc.core.billing.decode import prefill_activation_bytes
from memdoc.core.engines.layout import engine_layout
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.plan import Method, TrainingPlan
from memdoc.core.model.plan_post import Task, Vllm


def reference_runs(plan: TrainingPlan) -> bool:
    """A reference forward runs in the step: the task has a reference term, its beta is above 0, and its
    log-probs are not precomputed."""
    if not plan.task.may_use_reference or plan.precompute_ref:
        return False
    return not plan.task.is_online or (plan.effective_beta or 0) > 0


def steps_per_generation(plan: TrainingPlan) -> int:
    """Optimizer micro-steps fed by one generation: TRL 1.16 `GRPOConfig.__post_init__`, the generation batch over the
    global batch (per-device batch × processes); the accumulation steps when no generation batch is given."""
    if plan.generation_batch is None:
        return plan.grad_accum
    return max(plan.generation_batch // (plan.micro_batch * plan.dp_size), 1)


def old_policy_runs(plan: TrainingPlan) -> bool:
    """The old policy's log-probs are computed under no_grad: RLOO always (`rloo_trainer.py`
    `_generate_and_score_completions`); GRPO when generation and optimisation are misaligned,
    `gradient_accumulation_steps % (steps_per_generation × num_iterations) != 0`, or with vLLM's importance-sampling
    correction (default True) (`grpo_trainer.py` `_generate_and_score_completions`)."""
    if plan.task is Task.RLOO:
        return True
    if plan.task is not Task.GRPO:
        return False
    return plan.grad_accum % (steps_per_generation(plan) * plan.num_iterations) != 0 or plan.vllm is not Vllm.NONE


def frozen_copies(plan: TrainingPlan) -> int:
    """Frozen full models held beside the policy: the reference (full fine-tuning only: a PEFT policy disables
    its adapter instead), and PPO's reward model."""
    reference = reference_runs(plan) and plan.method is Method.FULL
    return int(reference) + (1 if plan.task is Task.PPO else 0)


def frozen_weight_bytes(model: ModelSpec, plan: TrainingPlan) -> int:
    """Per-GPU bytes of the frozen models: every parameter in the policy's dtype (`dtype=self.model.dtype`),
    sharded over the GPUs when the engine shards weights (ZeRO-3/FSDP, TRL's `prepare_deepspeed`/`prepare_fsdp`)."""
    copies = frozen_copies(plan)
    if not copies:
        return 0
    per = model.params.total * (plan.precision.param_bits // 8)
    if engine_layout(plan).shards_weights:
        per = -(-per // plan.world_size)
    return copies * per


def no_grad_forward_bytes(model: ModelSpec, scoring: TrainingPlan) -> int:
    """The transient peak of one no-grad forward of `scoring`'s micro-batch (rows × seq_len tokens) that returns
    per-token log-probs: the larger of a decoder layer's transient (`decode.prefill_activation_bytes`) and the
    head's fused log-prob path (`activations.head.head_saved` with the plan's loss: TRL's chunked tiles, the
    gathered hidden states and per-token statistics), plus the fp32 log-probs it returns (rows × seq)."""
    cb = scoring.precision.compute_bits // 8
    tokens = scoring.micro_batch * scoring.seq_len
    amp = scoring.precision.is_amp and scoring.method is Method.FULL
    saved, forward, _ = head_saved(model, scoring, dt=cb, amp=amp)
    head = saved + forward + cb * tokens * model.hidden_size  # + the final hidden states feeding it
    return max(prefill_activation_bytes(model, tokens, cb), head) + 4 * tokens


__all__ = [
    "frozen_copies",
    "frozen_weight_bytes",
    "no_grad_forward_bytes",
    "old_policy_runs",
    "reference_runs",
    "steps_per_generation",
]
