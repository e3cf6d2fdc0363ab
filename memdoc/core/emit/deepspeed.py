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


def deepspeed_config(ctx: EmitContext, notes: list[str]) -> dict:
    """A DeepSpeed JSON for the HF Trainer: zero_optimization stage + offload; batch keys 'auto'."""
    plan = ctx.plan
    stage = {Shard.ZERO1: 1, Shard.ZERO2: 2, Shard.ZERO3: 3}.get(plan.shard)
    if stage is None:  # offload without sharding: ZeRO-Offload
        stage = 2 if plan.world_size == 1 else 1
        if plan.world_size > 1:
            notes.append(
                "offload without sharding is run as ZeRO-1 + optimizer offload (DeepSpeed has no unsharded offload): "
                "optimizer states are also partitioned over the GPUs, less GPU memory than billed"
            )
        else:
            notes.append("optimizer offload on one GPU is run as DeepSpeed ZeRO-2 + offload_optimizer (ZeRO-Offload)")
    zero: dict = {"stage": stage, "overlap_comm": True, "contiguous_gradients": True}
    if stage == 3:
        zero["stage3_gather_16bit_weights_on_model_save"] = True
    if plan.offload is not Offload.NONE:
        target = plan.offload_to.value
        if plan.offload_to is OffloadTarget.NVME and stage != 3:
            notes.append("offload to nvme needs ZeRO-3 in DeepSpeed: optimizer offloaded to cpu instead")
            target = "cpu"
        opt = {"device": target, "pin_memory": True}
        if target == "nvme":
            opt["nvme_path"] = NVME_PLACEHOLDER
        zero["offload_optimizer"] = opt
        if plan.offload is Offload.OPTIMIZER_PARAMS:
            param = {"device": target, "pin_memory": True}
            if target == "nvme":
                param["nvme_path"] = NVME_PLACEHOLDER
            zero["offload_param"] = param
        if target == "nvme":
            notes.append(
                f"offload to nvme: set nvme_path ({NVME_PLACEHOLDER}) in {DS_CONFIG_NAME} to a fast local NVMe mount"
            )
    if plan.precision in (Precision.BF16, Precision.FP16) and plan.method is Method.FULL:
        notes.append(
            f"precision {plan.precision.value} (pure) with DeepSpeed ZeRO: DeepSpeed keeps fp32 master weights and fp32 "
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
        if plan.optimizer in (Optimizer.ADAMW, Optimizer.ADAMW_FUSED):
            config["optimizer"] = {
                "type": "AdamW",
                "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"},
            }
            notes.append(
                "with offload the optimizer step runs as DeepSpeed's CPU AdamW on the host (the `optimizer` block of the DeepSpeed JSON)"
            )
        else:
            config["zero_force_ds_cpu_optimizer"] = False
            notes.append(
                f"optimizer {plan.optimizer.value} with offload: DeepSpeed runs the trainer's optimizer on offloaded states (zero_force_ds_cpu_optimizer: false); slower than its CPU Adam"
            )
    return config
