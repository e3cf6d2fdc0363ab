"""The step time of a post-training task: the policy's step, its no-grad scoring forwards and generation.

First-order and uncalibrated (no post-training step was timed on a GPU): a no-grad forward costs a third of the
policy's forward + backward compute (`steptime.step_time` of `rows.policy_plan`); generation decodes
`completion_len` tokens, each step reading the weights and the mean cache once at `steptime.MEMORY_EFFICIENCY` of
the card's bandwidth (decode is memory-bound; the prefill is left out). TRL 1.16 runs generation synchronously in
the step whatever the backend (`GRPOTrainer._generate`), so server-mode vLLM's decode counts too, at the same rate.
"""

from __future__ import annotations

import dataclasses

from memdoc.core.billing.decode import kv_cache_bytes
from memdoc.core.billing.posttrain.generation import rows_per_device
from memdoc.core.billing.posttrain.reference import old_policy_runs, reference_runs
from memdoc.core.billing.posttrain.rows import policy_plan
from memdoc.core.billing.steptime import DEFAULT_BANDWIDTH_GBPS, MEMORY_EFFICIENCY, StepTime, step_time
from memdoc.core.model.gpu import GpuSpec
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.plan import TrainingPlan
from memdoc.core.model.plan_post import Task

FIRST_ORDER = "post-training time is first-order, uncalibrated: the policy's step + no-grad forwards + decode"


def scoring_passes(plan: TrainingPlan) -> int:
    """No-grad forwards over the step's rows: the reference, the old policy, KTO's KL rows (`posttrain.reference`)."""
    return int(reference_runs(plan)) + int(old_policy_runs(plan)) + int(plan.task is Task.KTO)


def generations_per_step(plan: TrainingPlan) -> float:
    """Generation batches per optimizer step: the step's completions over the generation batch (TRL 1.16
    `GRPOTrainer._prepare_inputs`: one generation every `steps_per_generation` micro-steps; below 1 when a
    generation batch spans several optimizer steps)."""
    step = plan.micro_batch * plan.dp_size * plan.grad_accum
    return step / (plan.generation_batch or step)


def generation_seconds(model: ModelSpec, plan: TrainingPlan, gpu: GpuSpec | None) -> float:
    """Decode of the step's generation batches: per new token, the weights and the mean cache read once."""
    if not plan.task.is_online:
        return 0.0
    bandwidth = (gpu.memory_bandwidth_gbps if gpu and gpu.memory_bandwidth_gbps else DEFAULT_BANDWIDTH_GBPS) * 1e9
    cb = plan.precision.compute_bits // 8
    mean_context = plan.seq_len + plan.completion_len // 2
    cache = kv_cache_bytes(model, batch=rows_per_device(plan), context=mean_context, bytes_per_element=cb)
    per_token = model.params.total * cb + cache
    return generations_per_step(plan) * plan.completion_len * per_token / (bandwidth * MEMORY_EFFICIENCY)


def post_step_time(model: ModelSpec, plan: TrainingPlan, gpu: GpuSpec | None) -> StepTime:
    """The policy's step time plus its scoring forwards and generation, with the first-order note."""
    base = step_time(model, policy_plan(plan), gpu)
    extra = scoring_passes(plan) * base.compute / 3 + generation_seconds(model, plan, gpu)
    return dataclasses.replace(base, compute=base.compute + extra, note=FIRST_ORDER)


def task_step_time(model: ModelSpec, plan: TrainingPlan, gpu: GpuSpec | None) -> StepTime:
    """The step time of the plan's task: `steptime.step_time` for supervised fine-tuning, else `post_step_time`.
    Everything that times a plan of any task (the bill, the ladder's rungs, the plan search) reads this."""
    return step_time(model, plan, gpu) if plan.task is Task.SFT else post_step_time(model, plan, gpu)


def task_step_seconds(model: ModelSpec, plan: TrainingPlan, gpu: GpuSpec | None) -> float:
    """`task_step_time` in seconds."""
    return task_step_time(model, plan, gpu).seconds


__all__ = [
    "FIRST_ORDER",
    "generation_seconds",
    "generations_per_step",
    "post_step_time",
    "scoring_passes",
    "task_step_seconds",
    "task_step_time",
]
