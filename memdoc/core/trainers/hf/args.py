"""TrainingArguments keys shared by every HF-Trainer-based format (HF, TRL, LLaMA-Factory)."""

from __future__ import annotations

from memdoc.core.trainers.accelerate.write import fsdp_accelerate_config
from memdoc.core.trainers.base import (
    DS_CONFIG_NAME,
    FSDP_CONFIG_NAME,
    LR_SCHEDULER,
    OUTPUT_DIR_PLACEHOLDER,
    WARMUP_RATIO,
    EmitContext,
    SideFile,
    checkpointing_keys,
    default_learning_rate,
    optimizer_keys,
    trainer_amp_flags,
    uses_deepspeed,
    uses_fsdp,
)
from memdoc.core.trainers.deepspeed.write import deepspeed_config
from memdoc.core.trainers.hf.keys import KEYS as HF


def training_arguments(ctx: EmitContext, notes: list[str], placeholders: dict[str, str]) -> dict:
    """output_dir, batch, accumulation, learning rate, optimizer, autocast, checkpointing, DeepSpeed."""
    plan = ctx.plan
    out: dict = {HF["output_dir"]: ctx.output_dir or OUTPUT_DIR_PLACEHOLDER}
    if not ctx.output_dir:
        placeholders[HF["output_dir"]] = "where checkpoints go (--output-dir)"
    out[HF["micro_batch"]] = plan.micro_batch
    out[HF["grad_accum"]] = plan.grad_accum
    out[HF["learning_rate"]] = default_learning_rate(plan)
    placeholders[HF["learning_rate"]] = "a common default for this method; tune it"
    out[HF["epochs"]] = 1
    out[HF["lr_scheduler"]] = LR_SCHEDULER
    out[ctx.key(HF, "warmup")] = WARMUP_RATIO
    out.update(optimizer_keys(plan, notes))
    out.update(trainer_amp_flags(plan, notes))
    out.update(_as_spelled(ctx, checkpointing_keys(plan, notes)))
    if uses_deepspeed(plan):
        out[HF["shard"]] = ctx.side_path(DS_CONFIG_NAME)
    out[HF["logging_steps"]] = 10
    out[HF["save_strategy"]] = "epoch"
    out[HF["report_to"]] = "none"
    return out


def _as_spelled(ctx: EmitContext, keys: dict) -> dict:
    """`checkpointing_keys` under the names the stack's transformers reads without a deprecation warning."""
    names = {
        HF["checkpointing"]: ctx.key(HF, "activation_checkpointing"),
        HF["checkpointing_kwargs"]: ctx.key(HF, "activation_checkpointing_kwargs"),
    }
    return {names[key]: value for key, value in keys.items()}


def distributed_side_files(ctx: EmitContext, notes: list[str]) -> list[SideFile]:
    if uses_deepspeed(ctx.plan):
        return [SideFile(DS_CONFIG_NAME, deepspeed_config(ctx, notes), "json")]
    if uses_fsdp(ctx.plan):
        return [SideFile(FSDP_CONFIG_NAME, fsdp_accelerate_config(ctx, notes), "yaml")]
    return []


def multinode_note(ctx: EmitContext, notes: list[str]) -> None:
    if ctx.plan.nodes > 1:
        notes.append(
            f"{ctx.plan.nodes} nodes: run the launch command on every node with its rank "
            "(accelerate: --num_machines/--machine_rank/--main_process_ip; deepspeed: --hostfile)"
        )
