"""TRL `trl <task> --config` YAML: the task's config class (SFTConfig, DPOConfig, KTOConfig, RewardConfig, GRPOConfig,
RLOOConfig) + ModelConfig + ScriptArguments keys in one file (the post-training keys: `post.py`)."""

from __future__ import annotations

from memdoc.core.model.lora import lora_alpha
from memdoc.core.model.plan import Loss, Method
from memdoc.core.model.plan_post import Task
from memdoc.core.trainers.base import (
    DATASET_PLACEHOLDER,
    FSDP_CONFIG_NAME,
    LIGER_CE_ONLY_CONFIG,
    LIGER_NOTE,
    TRL_DATASET_FORMAT,
    EmitContext,
    Emitted,
    all_linear,
    load_dtype,
    precision_note,
    uses_deepspeed,
    uses_fsdp,
    uses_liger,
)
from memdoc.core.trainers.hf.args import distributed_side_files, multinode_note, training_arguments
from memdoc.core.trainers.hf.keys import KEYS as HF
from memdoc.core.trainers.trl.facts import kbit_notes, packing_keys
from memdoc.core.trainers.trl.keys import KEYS
from memdoc.core.trainers.trl.post import (
    REWARD_FUNCS_NOTE,
    REWARD_FUNCS_PLACEHOLDER,
    TRL_TASK_DATASETS,
    TRL_TRAINERS,
    trl_length_keys,
    trl_script,
    trl_task_keys,
)
from memdoc.core.trainers.vision import TRL_VISION_ROWS, is_vlm, trl_vision_keys, trl_vision_notes
from memdoc.errors import PlanError


def _task_keys(ctx: EmitContext, config: dict, notes: list[str], placeholders: dict[str, str]) -> dict[str, str]:
    """The dataset (its rows as the task's trainer reads them), the lengths, packing and the task's own keys
    (`trl_post`); GRPO/RLOO also `reward_funcs` (a placeholder the user must choose). Returns the key comments."""
    plan = ctx.plan
    rows = TRL_TASK_DATASETS.get(plan.task, TRL_DATASET_FORMAT)
    if plan.has_vision and plan.task is Task.SFT:
        rows = TRL_VISION_ROWS
    config[KEYS["dataset"]] = ctx.dataset or DATASET_PLACEHOLDER
    comments = {KEYS["dataset"]: rows}
    if not ctx.dataset:
        placeholders[KEYS["dataset"]] = f"a Hub dataset id or local path (--dataset); {rows}"
    config.update(trl_length_keys(plan, notes, ctx.key(KEYS, "seq_len")))
    if is_vlm(ctx.model_type):
        config.update(trl_vision_keys(plan, ctx.image_family or ctx.model_type, notes))
        trl_vision_notes(plan, notes)
    if plan.packing and plan.task is not Task.SFT:
        raise PlanError(
            f"--packing --task {plan.task.value}: TRL's {TRL_TRAINERS[plan.task]} has no packing key",
            hint="drop --packing (TRL packs SFT rows only)",
        )
    config.update(packing_keys(plan, notes))
    config.update(trl_task_keys(plan, notes))
    if plan.task in (Task.GRPO, Task.RLOO):
        config[KEYS["reward_funcs"]] = list(REWARD_FUNCS_PLACEHOLDER)
        placeholders[KEYS["reward_funcs"]] = REWARD_FUNCS_NOTE
    return comments


def emit_trl(ctx: EmitContext) -> Emitted:
    plan = ctx.plan
    script = trl_script(plan)
    notes: list[str] = []
    placeholders: dict[str, str] = {}
    config: dict = {
        KEYS["model"]: ctx.model_id,
        ctx.key(KEYS, "precision"): load_dtype(plan),
        KEYS["attention"]: plan.attention.value,
    }
    comments = _task_keys(ctx, config, notes, placeholders)
    config.update(training_arguments(ctx, notes, placeholders))
    notes.append(precision_note(plan))
    if plan.is_peft:
        config[KEYS["method"]] = True
        config[KEYS["lora_rank"]] = plan.lora_rank
        config[KEYS["lora_alpha"]] = lora_alpha(plan)
        config[KEYS["lora_targets"]] = "all-linear" if all_linear(plan) else list(plan.lora_targets)
        config[KEYS["lora_dropout"]] = plan.lora_dropout
    if plan.method is Method.QLORA:
        config[KEYS["load_in_4bit"]] = True
        config[KEYS["quant_type"]] = "nf4"
        config[KEYS["nested_quant"]] = True
        if uses_fsdp(plan):
            config[KEYS["quant_storage"]] = plan.precision.compute_dtype_name
    if uses_liger(plan):
        config[HF["loss"]] = True  # all of Liger's kernels for the model: RMSNorm, RoPE, SwiGLU/GeGLU, fused loss
        if plan.loss is Loss.FUSED_CE:
            config[HF["liger_kernel_config"]] = dict(LIGER_CE_ONLY_CONFIG)
        notes.append(LIGER_NOTE)
    notes.extend(kbit_notes(plan))
    multinode_note(ctx, notes)
    side = distributed_side_files(ctx, notes)
    if uses_fsdp(plan):
        launch = (
            f"accelerate launch --config_file {ctx.side_arg(FSDP_CONFIG_NAME)} -m trl.scripts.{script} "
            f"--config {ctx.config_arg}"
        )
    elif uses_deepspeed(plan) or ctx.multi_gpu:
        launch = (
            f"accelerate launch --num_processes {plan.world_size} -m trl.scripts.{script} --config {ctx.config_arg}"
        )
    else:
        launch = f"trl {script} --config {ctx.config_arg}"
    return Emitted("trl", config, launch, notes, side, placeholders, comments)
