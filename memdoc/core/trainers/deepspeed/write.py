"""DeepSpeed JSON for the HF Trainer: `zero_optimization` stage 1/2/3 and offload of optimizer/params
to cpu or nvme; batch, accumulation, clipping and precision are 'auto' (filled from the trainer config); the
bucket knobs the bill uses are written out (`bucket_keys`)."""

from __future__ import annotations

from memdoc.core.model.plan import MasterWeights, Offload, OffloadTarget, Optimizer, Shard, TrainingPlan
from memdoc.core.trainers.base import DS_CONFIG_NAME, NVME_PLACEHOLDER, EmitContext, header_text
from memdoc.core.trainers.deepspeed.keys import KEYS, OFFLOAD, PRECISION, ZERO


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
    device = {OFFLOAD["device"]: target, OFFLOAD["pin_memory"]: True} | (
        {OFFLOAD["nvme_path"]: NVME_PLACEHOLDER} if target == "nvme" else {}
    )
    keys = {ZERO["offload_optimizer"]: device}
    if plan.offload is Offload.OPTIMIZER_PARAMS:
        keys[ZERO["offload_param"]] = dict(device)
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
            KEYS["optimizer"]: {
                "type": "AdamW",
                "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"},
            }
        }
    notes.append(
        f"optimizer {plan.optimizer.value} with offload: DeepSpeed runs the trainer's "
        "optimizer on offloaded states (zero_force_ds_cpu_optimizer: false); slower than its "
        "CPU Adam"
    )
    return {KEYS["force_ds_cpu_optimizer"]: False}


def bucket_keys(plan: TrainingPlan, stage: int) -> dict:
    """The bucket knobs the bill uses (`core/engines/buffers.py`), written out: a value the plan sets, else
    "auto" for the three transformers fills from the hidden size (`integrations/deepspeed.py`), else DeepSpeed's
    default written explicitly (`deepspeed/runtime/zero/config.py` `DeepSpeedZeroConfig`)."""
    auto = lambda value: "auto" if value is None else value  # noqa: E731
    keys: dict = {ZERO["reduce_bucket_size"]: auto(plan.reduce_bucket_size), ZERO["overlap_comm"]: plan.overlap_comm}
    keys[ZERO["contiguous_gradients"]] = plan.contiguous_gradients
    if stage < 3:
        keys[ZERO["allgather_bucket_size"]] = plan.allgather_bucket_size
        return keys
    return keys | {
        ZERO["stage3_prefetch_bucket_size"]: auto(plan.stage3_prefetch_bucket_size),
        ZERO["stage3_param_persistence_threshold"]: auto(plan.stage3_param_persistence_threshold),
        ZERO["stage3_max_live_parameters"]: plan.stage3_max_live_parameters,
        ZERO["sub_group_size"]: plan.sub_group_size,
    }


def deepspeed_config(ctx: EmitContext, notes: list[str]) -> dict:
    """A DeepSpeed JSON for the HF Trainer: zero_optimization stage + offload; batch keys 'auto'."""
    plan = ctx.plan
    stage = _zero_stage(plan, notes)
    zero: dict = {ZERO["stage"]: stage}
    if stage == 3:
        # the save gathers the 16-bit model on rank 0 unless the plan says not to (`run_phases.save_gathers`)
        zero[ZERO["save_gather"]] = plan.save_gather is not False
    if plan.offload is not Offload.NONE:
        zero.update(_offload_keys(plan, stage, notes))
    zero.update(bucket_keys(plan, stage))
    bf16: dict = {PRECISION["enabled"]: "auto"}
    if plan.master_weights is MasterWeights.BF16:
        # deepspeed/runtime/precision_config.py (0.19.8): bf16 master weights, gradients and optimizer states
        bf16.update(bf16_master_weights_and_grads=True, bf16_optimizer_states=True)
        notes.append("bf16 master weights and optimizer states (bf16_master_weights_and_grads): a numerical risk")
    config: dict = {
        "_comment": header_text(ctx, one_line=True),
        KEYS["bf16"]: bf16,
        KEYS["fp16"]: {PRECISION["enabled"]: "auto"},
        KEYS["shard"]: zero,
        KEYS["grad_accum"]: "auto",
        "gradient_clipping": "auto",
        KEYS["train_batch_size"]: "auto",
        KEYS["micro_batch"]: "auto",
    }
    if plan.offload is not Offload.NONE:
        config.update(_offloaded_optimizer(plan, notes))
    return config
