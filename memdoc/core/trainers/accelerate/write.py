"""accelerate `--config_file` YAML for FSDP full-shard (weights, gradients and optimizer states sharded): FSDP1
(`--shard fsdp`) or FSDP2 (`--shard fsdp2`, `fsdp_version: 2`)."""

from __future__ import annotations

from memdoc.core.model.plan import (
    MasterWeights,
    Method,
    Offload,
    Precision,
    Shard,
)
from memdoc.core.trainers.accelerate.keys import FSDP, KEYS, PARALLELISM
from memdoc.core.trainers.base import EmitContext
from memdoc.errors import PlanError


def fsdp_accelerate_config(ctx: EmitContext, notes: list[str]) -> dict:
    """An `accelerate launch --config_file` YAML for FSDP full-shard."""
    plan = ctx.plan
    mixed = {Precision.BF16: "bf16", Precision.AMP_BF16: "bf16", Precision.AMP_FP16: "fp16"}.get(plan.precision, "no")
    if plan.precision is Precision.FP16 and plan.method is not Method.FULL:
        mixed = "fp16"
    if plan.master_weights is MasterWeights.BF16:
        # accelerate 1.15 upcasts trainable parameters to fp32 whenever mixed_precision != "no"
        # (accelerator.py prepare_model; utils/fsdp_utils.py fsdp2_prepare_model): "no" keeps the bf16 model
        mixed = "no"
        notes.append(
            "mixed_precision: no keeps the bf16-loaded model's parameters, gradients and optimizer states in bf16 "
            "(--master-weights bf16): a numerical risk; set the trainer's bf16 flag off too, or accelerate upcasts"
        )
    offload = plan.offload is not Offload.NONE
    fsdp = {
        FSDP["shard"]: 2 if plan.shard is Shard.FSDP2 else 1,
        "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "fsdp_backward_prefetch": "BACKWARD_PRE",
        FSDP["low_mem_load"]: plan.low_mem_load,
        "fsdp_forward_prefetch": False,
        FSDP["offload"]: offload,
        FSDP["reshard_after_forward"]: "FULL_SHARD",
        FSDP["save_gather"]: "FULL_STATE_DICT" if plan.save_gather else "SHARDED_STATE_DICT",
        "fsdp_sync_module_states": True,
        "fsdp_use_orig_params": plan.method is Method.FULL,
        FSDP["checkpointing"]: False,
    }
    if plan.shard is Shard.FSDP2:  # accelerate/utils/dataclasses.py: FSDP2 drops these, reshard is a bool
        for key in (
            "fsdp_backward_prefetch",
            "fsdp_forward_prefetch",
            "fsdp_sync_module_states",
            "fsdp_use_orig_params",
        ):
            del fsdp[key]
        fsdp[FSDP["reshard_after_forward"]] = True
    return {
        KEYS["compute_environment"]: "LOCAL_MACHINE",
        "debug": False,
        KEYS["shard"]: "FSDP",
        "downcast_bf16": "no",
        KEYS["fsdp_config"]: fsdp,
        KEYS["machine_rank"]: 0,
        "main_training_function": "main",
        KEYS["precision"]: mixed,
        KEYS["nodes"]: plan.nodes,
        KEYS["gpus_per_node"]: plan.world_size,
        "rdzv_backend": "static",
        "same_network": True,
        "use_cpu": False,
    }


def check_parallelism(fmt: str, plan) -> None:
    """`--cp`/`--tp` as accelerate's `parallelism_config`: accelerate 1.15's `_validate_launch_command` refuses a
    parallelism config without FSDP2, so the plan needs `--shard fsdp2`."""
    if plan.shard is not Shard.FSDP2:
        raise PlanError(
            f"--format {fmt} writes --cp/--tp as accelerate's parallelism_config, which accelerate 1.15 launches "
            "with FSDP2 only: add --shard fsdp2 (or use --format axolotl)"
        )


def accelerate_parallelism(plan) -> dict:
    """The accelerate config file's `parallelism_config` (keys as `accelerate launch` takes them)."""
    return {
        PARALLELISM["dp_replicate_size"]: 1,
        PARALLELISM["dp_size"]: plan.dp_size,
        PARALLELISM["tp"]: plan.tp,
        PARALLELISM["cp"]: plan.cp,
        PARALLELISM["cp_impl"]: "torch",
    }


def add_parallelism(plan, emitted) -> None:
    """Write the plan's CP/TP as the FSDP side file's `parallelism_config` (CP: torch's ring attention)."""
    for side in emitted.side_files:
        if side.data.get(KEYS["shard"]) == "FSDP":
            side.data[KEYS["parallelism_config"]] = accelerate_parallelism(plan)
    emitted.notes.append(
        f"accelerate parallelism_config: dp_shard {plan.dp_size} × cp {plan.cp} × tp {plan.tp}; CP runs torch's "
        "ring attention under SDPA, TP transformers' tp_plan"
    )
