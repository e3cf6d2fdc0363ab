"""accelerate `--config_file` YAML for FSDP full-shard (weights, gradients and optimizer states sharded)."""

from __future__ import annotations

from memdoc.core.emit.base import EmitContext
from memdoc.core.model.plan import (
    Method,
    Offload,
    OffloadTarget,
    Precision,
)


def fsdp_accelerate_config(ctx: EmitContext, notes: list[str]) -> dict:
    """An `accelerate launch --config_file` YAML for FSDP full-shard."""
    plan = ctx.plan
    mixed = {Precision.BF16: "bf16", Precision.AMP_BF16: "bf16", Precision.AMP_FP16: "fp16"}.get(plan.precision, "no")
    if plan.precision is Precision.FP16 and plan.method is not Method.FULL:
        mixed = "fp16"
    offload = plan.offload is not Offload.NONE
    if plan.offload is Offload.OPTIMIZER:
        notes.append(
            "FSDP cannot offload only the optimizer: fsdp_offload_params offloads weights, "
            "gradients and optimizer states to the CPU (less GPU memory than billed, slower)"
        )
    if offload and plan.offload_to is OffloadTarget.NVME:
        notes.append("FSDP offloads to CPU memory only: --offload-to nvme emitted as cpu")
    fsdp = {
        "fsdp_version": 1,
        "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "fsdp_backward_prefetch": "BACKWARD_PRE",
        "fsdp_cpu_ram_efficient_loading": True,
        "fsdp_forward_prefetch": False,
        "fsdp_offload_params": offload,
        "fsdp_reshard_after_forward": "FULL_SHARD",
        "fsdp_state_dict_type": "SHARDED_STATE_DICT",
        "fsdp_sync_module_states": True,
        "fsdp_use_orig_params": plan.method is Method.FULL,
        "fsdp_activation_checkpointing": False,
    }
    return {
        "compute_environment": "LOCAL_MACHINE",
        "debug": False,
        "distributed_type": "FSDP",
        "downcast_bf16": "no",
        "fsdp_config": fsdp,
        "machine_rank": 0,
        "main_training_function": "main",
        "mixed_precision": mixed,
        "num_machines": plan.nodes,
        "num_processes": plan.world_size,
        "rdzv_backend": "static",
        "same_network": True,
        "use_cpu": False,
    }
