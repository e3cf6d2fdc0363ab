"""TRL `trl sft --config` YAML: SFTConfig + ModelConfig + ScriptArguments keys in one file."""

from __future__ import annotations

from memdoc.core.emit.base import (
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
from memdoc.core.emit.common import distributed_side_files, multinode_note, training_arguments
from memdoc.core.emit.kbit import kbit_notes
from memdoc.core.emit.packing import packing_keys
from memdoc.core.model.lora import lora_alpha
from memdoc.core.model.plan import Loss, Method


def emit_trl(ctx: EmitContext) -> Emitted:
    plan = ctx.plan
    notes: list[str] = []
    placeholders: dict[str, str] = {}
    config: dict = {
        "model_name_or_path": ctx.model_id,
        "dtype": load_dtype(plan),
        "attn_implementation": plan.attention.value,
        "dataset_name": ctx.dataset or DATASET_PLACEHOLDER,
    }
    comments = {"dataset_name": TRL_DATASET_FORMAT}
    if not ctx.dataset:
        placeholders["dataset_name"] = f"a Hub dataset id or local path (--dataset); {TRL_DATASET_FORMAT}"
    config["max_length"] = plan.seq_len
    config.update(packing_keys("trl", plan, notes))
    config.update(training_arguments(ctx, notes, placeholders))
    notes.append(precision_note(plan))
    if plan.is_peft:
        config["use_peft"] = True
        config["lora_r"] = plan.lora_rank
        config["lora_alpha"] = lora_alpha(plan)
        config["lora_target_modules"] = "all-linear" if all_linear(plan) else list(plan.lora_targets)
        config["lora_dropout"] = plan.lora_dropout
    if plan.method is Method.QLORA:
        config["load_in_4bit"] = True
        config["bnb_4bit_quant_type"] = "nf4"
        config["use_bnb_nested_quant"] = True
        if uses_fsdp(plan):
            config["bnb_4bit_quant_storage"] = plan.precision.compute_dtype_name
    if uses_liger(plan):
        config["use_liger_kernel"] = (
            True  # all of Liger's kernels for the model: RMSNorm, RoPE, SwiGLU/GeGLU, fused loss
        )
        if plan.loss is Loss.FUSED_CE:
            config["liger_kernel_config"] = dict(LIGER_CE_ONLY_CONFIG)
        notes.append(LIGER_NOTE)
    notes.extend(kbit_notes("trl", plan))
    multinode_note(ctx, notes)
    side = distributed_side_files(ctx, notes)
    if uses_fsdp(plan):
        launch = (
            f"accelerate launch --config_file {ctx.side_arg(FSDP_CONFIG_NAME)} -m trl.scripts.sft "
            f"--config {ctx.config_arg}"
        )
    elif uses_deepspeed(plan) or ctx.multi_gpu:
        launch = f"accelerate launch --num_processes {plan.world_size} -m trl.scripts.sft --config {ctx.config_arg}"
    else:
        launch = f"trl sft --config {ctx.config_arg}"
    return Emitted("trl", config, launch, notes, side, placeholders, comments)
