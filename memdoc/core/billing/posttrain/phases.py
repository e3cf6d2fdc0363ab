"""The phases of one post-training step, from the policy's supervised bill and the task's extra terms.

Order (`vocabulary.STEP_PHASES`) and content, TRL 1.16:
* generation (online tasks): the policy's weights and optimizer states (gradients were freed by the last
  step's `zero_grad`), the frozen models, and what generation holds (`generation.generation_bytes`);
* reference: the no-grad scoring forward (`reference.no_grad_forward_bytes`). DPO/KTO run it after the policy's
  forward (`DPOTrainer._compute_loss`), so on top of the forward phase; GRPO/RLOO/PPO before it
  (`_generate_and_score_completions`), on top of the states only;
* forward, backward, optimizer: the policy's phases (its rows: `rows.policy_plan`) with the frozen models'
  weights, PPO's value model states and a colocated vLLM pool that does not sleep, in every phase.
"""

from __future__ import annotations

from dataclasses import dataclass

from memdoc.core.billing.posttrain.generation import generation_bytes, resident_pool, rows_per_device
from memdoc.core.billing.posttrain.reference import (
    frozen_weight_bytes,
    no_grad_forward_bytes,
    old_policy_runs,
    reference_runs,
)
from memdoc.core.billing.posttrain.rows import policy_plan
from memdoc.core.billing.vocabulary import LINE_ITEMS
from memdoc.core.model.gpu import GpuSpec
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.plan import TrainingPlan
from memdoc.core.model.plan_post import Task, Vllm


@dataclass(frozen=True, kw_only=True)
class PostTerms:
    """Per-GPU bytes a post-training task adds to its policy's supervised step."""

    frozen: int
    """Frozen models' weights (reference, PPO's reward model), resident."""
    value: tuple[int, int, int] = (0, 0, 0)
    """PPO's value model: weights, gradients, optimizer states (the policy's, first-order)."""
    pool: int = 0
    """Colocated vLLM's pool held through the training phases (no sleep mode)."""
    online: bool = False
    """The step generates (GRPO, RLOO, PPO): it has a generation phase, empty on the training GPUs in server mode."""
    generation: int = 0
    """What generation holds on top of the states while it runs (0: not an online task, or vLLM in server mode)."""
    scoring: int = 0
    """The no-grad scoring forward's transient (reference / old policy; 0: none runs)."""
    scoring_after_forward: bool = False
    """DPO/KTO: the scoring forward runs with the policy's forward activations alive."""
    wakes_vllm: bool = False
    """Colocated vLLM in sleep mode: each generation starts with `torch.cuda.empty_cache()` and vLLM's wake-up
    (TRL 1.16 `trl/generation/vllm_generation.py`, "required to avoid OOM"), so the caching allocator hands its
    free segments back before the pool returns."""
    forward_transient: int = 0
    """The policy's loss-head transient at its forward peak, freed before the scoring forward after it runs."""
    notes: tuple[str, ...] = ()

    @property
    def resident(self) -> int:
        """Allocated once and held: frozen weights, the value model's weights and states, the pool."""
        return self.frozen + self.value[0] + self.value[2] + self.pool


def post_terms(
    model: ModelSpec, plan: TrainingPlan, gpu: GpuSpec | None, optimizer_phase: dict, forward_transient: int
) -> PostTerms:
    """The task's terms; `optimizer_phase`: the policy's optimizer phase by line item (PPO's value model copies it);
    `forward_transient`: the policy's loss-head transient in its forward phase (`Activations.loss_forward_peak`)."""
    scoring_plan = policy_plan(plan)
    scores = reference_runs(plan) or old_policy_runs(plan) or plan.task is Task.KTO  # KTO: its KL rows, no_grad
    value = (optimizer_phase["weights"], optimizer_phase["gradients"], optimizer_phase["optimizer"])
    notes = []
    if plan.task.is_online:
        notes.append(
            f"generation: {rows_per_device(plan)} completions per GPU of {plan.seq_len} + {plan.completion_len} "
            f"tokens ({'transformers KV cache' if plan.vllm is Vllm.NONE else 'vLLM ' + plan.vllm.value})"
        )
    if plan.vllm is Vllm.COLOCATE and gpu is None:
        notes.append("colocated vLLM's pool is a fraction of the card: give --gpu to bill it")
    if plan.task is Task.RM:
        notes.append(
            "reward model: a sequence classifier, its score head hidden × 1 (no LM head, no vocabulary logits)"
        )
    if plan.task is Task.PPO:
        notes.append("PPO: reference and reward models frozen, value model trained (its states ≈ the policy's)")
    return PostTerms(
        frozen=frozen_weight_bytes(model, plan),
        value=value if plan.task is Task.PPO else (0, 0, 0),
        pool=resident_pool(plan, gpu),
        online=plan.task.is_online,
        generation=generation_bytes(model, plan, gpu) if plan.task.is_online else 0,
        scoring=no_grad_forward_bytes(model, scoring_plan) if scores else 0,
        scoring_after_forward=not plan.task.is_online,
        wakes_vllm=plan.vllm is Vllm.COLOCATE and plan.vllm_sleep,
        forward_transient=forward_transient,
        notes=tuple(notes),
    )


def post_phases(policy: dict[str, dict[str, int]], t: PostTerms) -> dict[str, dict[str, int]]:
    """The step's phases by line item, in `STEP_PHASES` order, from the policy's phases by line item."""
    value_w, value_g, value_o = t.value

    def held(items: dict[str, int], *, grads: bool) -> dict[str, int]:
        out = {k: items[k] for k in LINE_ITEMS}
        out["weights"] += t.frozen + value_w
        out["optimizer"] += value_o
        out["gradients"] += value_g if grads else 0
        out["other"] += t.pool
        return out

    states = held(policy["optimizer"], grads=False) | {"gradients": 0, "activations": 0, "other": 0}
    phases: dict[str, dict[str, int]] = {}
    if t.online:  # the pool is inside `generation` with vLLM
        phases["generation"] = states | {"other": max(t.generation, t.pool)}
    if t.scoring:
        if t.scoring_after_forward:  # the policy's saved tensors stay, its head's transient is gone
            base = held(policy["forward"], grads=False)
            base["other"] -= t.forward_transient
        else:
            base = states | {"other": t.pool}
        phases["reference"] = base | {"other": base["other"] + t.scoring}
    phases["forward"] = held(policy["forward"], grads=False)
    phases["backward"] = held(policy["backward"], grads=True)
    phases["optimizer"] = held(policy["optimizer"], grads=True)
    return phases


__all__ = ["PostTerms", "post_phases", "post_terms"]
