"""The post-training knobs of the plan search (`search.py`): what it may change in an online task's generation,
and what it only suggests.

The task is never changed. Of its knobs, the search tries those the user left free that change memory and not the
objective (TRL 1.16 trains the same thing either way):
* `precompute_ref` (DPO, KTO: `precompute_ref_log_probs`, no reference model in the steps);
* `vllm_sleep` (colocated vLLM: `vllm_enable_sleep_mode`, the pool released while the policy trains);
* `vllm_memory` (colocated vLLM: the user's fraction, or the lean one that still holds the weights and this GPU's
  whole generation batch, `rungs_post.lean_vllm_memory`);
* `generation_batch` (transformers' generation: TRL's default, or the smallest batch it accepts at the plan's
  micro-batch, `rungs_post.smallest_generation_batch`).
Tokens stand for the sized values ("given", "lean", "smallest") until `resolve` turns them into numbers at a
micro-batch. `beta` and `num_generations` change the training: `suggestions` lists them instead.
"""

from __future__ import annotations

from memdoc.core.model.gpu import GpuSpec
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.plan import TrainingPlan
from memdoc.core.model.plan_post import Task, Vllm
from memdoc.core.remedies.rungs_post import fewer_generations, lean_vllm_memory, smallest_generation_batch

GIVEN = "given"
"""The user's value (or the trainer's default) of a sized knob."""

POST_MEMORY_RANK: dict[str, dict] = {
    "precompute_ref": {False: 1, True: 0},
    "vllm_sleep": {False: 1, True: 0},
    "vllm_memory": {GIVEN: 1, "lean": 0},
    "generation_batch": {GIVEN: 1, "smallest": 0},
}
"""Per post-training knob, values ordered by the memory they need (`search._MEMORY_RANK`'s convention)."""


def post_values(knob: str, base: TrainingPlan, fixed: frozenset[str]) -> tuple:
    """The values the search tries for a post-training knob: both where it applies and the user left it free, else
    the plan's own (`GIVEN` for the sized knobs)."""
    kept = (getattr(base, knob),) if knob in ("vllm_sleep", "precompute_ref") else (GIVEN,)
    if knob in fixed or kept == (True,):
        return kept
    colocated = base.vllm is Vllm.COLOCATE
    applies = {
        "precompute_ref": base.task in (Task.DPO, Task.KTO),
        "vllm_sleep": colocated,
        "vllm_memory": colocated,
        "generation_batch": base.task in (Task.GRPO, Task.RLOO) and base.vllm is Vllm.NONE,
    }[knob]
    return tuple(POST_MEMORY_RANK[knob]) if applies else kept


def plan_knobs(knobs: dict) -> dict:
    """The knobs that are plan values as they stand (the sized ones are set by `resolve`)."""
    return {k: v for k, v in knobs.items() if k not in ("vllm_memory", "generation_batch")}


def resolve(plan: TrainingPlan, knobs: dict, model: ModelSpec, gpu: GpuSpec | None) -> TrainingPlan:
    """`plan` (at its micro-batch) with the sized knobs' values: the smallest generation batch TRL accepts at this
    micro-batch, then the lean vLLM fraction for it (kept where it is not lower than the user's)."""
    if knobs.get("generation_batch") == "smallest":
        plan = plan.replace(generation_batch=smallest_generation_batch(plan))
    if knobs.get("vllm_memory") == "lean":
        lean = lean_vllm_memory(plan, model, gpu)
        if lean is not None and lean < plan.vllm_memory:
            plan = plan.replace(vllm_memory=round(lean, 2))
    return plan


def suggestions(base: TrainingPlan) -> tuple[str, ...]:
    """What the search does not try because it changes the training, with what it would save (in words)."""
    out = []
    if base.task in (Task.GRPO, Task.RLOO) and (base.effective_beta or 0) > 0:
        out.append(
            "--beta 0: no reference model (its frozen copy with full fine-tuning) and no reference forward — "
            "changes the objective (no KL term)"
        )
    fewer = fewer_generations(base)
    if fewer is not None:
        out.append(
            f"--generations {fewer[0]} --generation-batch {fewer[1]}: a smaller generation batch of whole groups, a "
            "smaller KV cache — a smaller group per prompt, a noisier advantage"
        )
    if base.task.is_online and base.completion_len >= 64:
        out.append(f"--completion-len {base.completion_len // 2}: shorter rows and cache — longer answers truncated")
    return tuple(out)


__all__ = ["GIVEN", "POST_MEMORY_RANK", "plan_knobs", "post_values", "resolve", "suggestions"]
