"""DeepSpeed JSON for the HF Trainer: `zero_optimization` stage 1/2/3 and offload of optimizer/params
to cpu or nvme; batch, accumulation, clipping and precision are 'auto' (filled from the trainer config)."""

from __future__ import annotations

from memdoc.core.emit.base import DS_CONFIG_NAME, NVME_PLACEHOLDER, EmitContext, header_text
from memdoc.core.model.plan import (
    Method,
    Offload,
    OffloadTarget,
    Optimizer,
    Precision,
    Shard,
)


def _zero_stage(plan, notes: list[str]) -> int:
    """The ZeRO stage of the plan's sharding; offload without sharding runs as ZeRO-Offload."""
    stage = {Shard.ZERO1: 1, Shard.ZERO2: 2, Shard.ZERO3: 3}.get(plan.shard)
    if stage is not None:
        return stage
    if plan.world_size > 1:
        notes.append(
            "offload without sharding is run as ZeRO-1 + optimizer offload (DeepSpeed has no unsharded offload): "
            "optimizer states are also partitioned over the GPUs, less GPU memory than billed"
        )
        return 1
    notes.append("optimizer offload on one GPU is run as DeepSpeed ZeRO-2 + offload_optimizer (ZeRO-Offload)")
    return 2


def _offload_keys(plan, stage: int, notes: list[str]) -> dict:
    """`offload_optimizer` (and `offload_param`) of `zero_optimization`: cpu, or nvme under ZeRO-3."""
    target = plan.offload_to.value
    if plan.offload_to is OffloadTarget.NVME and stage != 3:
        notes.append("offload to nvme needs ZeRO-3 in DeepSpeed: optimizer offloaded to cpu instead")
        target = "cpu"
    device = {"device": target, "pin_memory": True} | ({"nvme_path": NVME_PLACEHOLDER} if target == "nvme" else {})
    keys = {"offload_optimizer": device}
    if plan.offload is Offload.OPTIMIZER_PARAMS:
        keys["offload_param"] = dict(device)
    if target == "nvme":
        notes.append(
            f"offload to nvme: set nvme_path ({NVME_PLACEHOLDER}) in {DS_CONFIG_NAME} to a fast local NVMe mount"
        )
    return keys


def _offloaded_optimizer(plan, notes: list[str]) -> dict:
    """With offload: DeepSpeed's CPU AdamW for AdamW plans, else the trainer's own optimizer on the host."""
    if plan.optimizer in (Optimizer.ADAMW, Optimizer.ADAMW_FUSED):
        notes.append(
            "with offload the optimizer step runs as DeepSpeed's CPU AdamW on the host (the "
            "`optimizer` block of the DeepSpeed JSON)"
        )
        return {
            "optimizer": {
                "type": "AdamW",
                "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"},
            }
        }
    notes.append(
        f"optimizer {plan.optimizer.value} with offload: DeepSpeed runs the trainer's "
        "optimizer on offloaded states (zero_force_ds_cpu_optimizer: false); slower than its "
        "CPU Adam"
    )
    return {"zero_force_ds_cpu_optimizer": False}


def deepspeed_config(ctx: EmitContext, notes: list[str]) -> dict:
    """A DeepSpeed JSON for the HF Trainer: zero_optimization stage + offload; batch keys 'auto'."""
    plan = ctx.plan
    stage = _zero_stage(plan, notes)
    zero: dict = {"stage": stage, "overlap_comm": True, "contiguous_gradients": True}
    if stage == 3:
        zero["stage3_gather_16bit_weights_on_model_save"] = True
    if plan.offload is not Offload.NONE:
        zero.update(_offload_keys(plan, stage, notes))
    if plan.precision in (Precision.BF16, Precision.FP16) and plan.method is Method.FULL:
        notes.append(
            f"precision {plan.precision.value} (pure) with DeepSpeed ZeRO: DeepSpeed keeps fp32 "
            "master weights and fp32 "
            "optimizer states for 16-bit training, so the model states use more memory than billed; "
            "bill with --precision amp-" + plan.precision.value + " for the DeepSpeed layout"
        )
    config: dict = {
        "_comment": header_text(ctx, one_line=True),
        "bf16": {"enabled": "auto"},
        "fp16": {"enabled": "auto"},
        "zero_optimization": zero,
        "gradient_accumulation_steps": "auto",
        "gradient_clipping": "auto",
        "train_batch_size": "auto",
        "train_micro_batch_size_per_gpu": "auto",
    }
    if plan.offload is not Offload.NONE:
        config.update(_offloaded_optimizer(plan, notes))
    return config
