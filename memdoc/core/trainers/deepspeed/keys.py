"""DeepSpeed's config keys (0.19.8: `deepspeed/runtime/zero/config.py` `DeepSpeedZeroConfig`,
`runtime/zero/offload_config.py`, `runtime/precision_config.py`, `runtime/constants.py`): one table for the reader
and the writer, the `zero_optimization` block and the precision blocks as tables of their own."""

from __future__ import annotations

from memdoc.core.trainers.table import Key, KeyTable

VERSION = "0.19.8"

KEYS = KeyTable(
    "deepspeed",
    VERSION,
    (
        Key("shard", "zero_optimization"),
        Key("micro_batch", "train_micro_batch_size_per_gpu"),
        Key("grad_accum", "gradient_accumulation_steps"),
        Key("micro_batch", "train_batch_size", name="train_batch_size"),
        Key("precision", "bf16", name="bf16"),
        Key("precision", "fp16", name="fp16"),
        Key("optimizer", "optimizer"),
        Key("optimizer", "zero_force_ds_cpu_optimizer", name="force_ds_cpu_optimizer"),
        Key("shard", "zero_allow_untested_optimizer", name="allow_untested_optimizer"),
        Key("checkpointing", "activation_checkpointing"),
    ),
)

SHARDS = {0: "none", 1: "zero1", 2: "zero2", 3: "zero3"}
"""`zero_optimization.stage` -> memdoc's shard."""

ZERO = KeyTable(
    "deepspeed",
    VERSION,
    (
        Key("shard", "zero_optimization.stage", {v: k for k, v in SHARDS.items()}, name="stage"),
        Key("offload", "zero_optimization.offload_optimizer", name="offload_optimizer"),
        Key("offload", "zero_optimization.offload_param", name="offload_param"),
        Key(
            "save_gather",
            "zero_optimization.stage3_gather_16bit_weights_on_model_save",
            read_also=("stage3_gather_fp16_weights_on_model_save",),
            default=False,
        ),
        Key("reduce_bucket_size", "zero_optimization.reduce_bucket_size", default=500_000_000),
        Key("allgather_bucket_size", "zero_optimization.allgather_bucket_size", default=500_000_000),
        Key("stage3_prefetch_bucket_size", "zero_optimization.stage3_prefetch_bucket_size", default=50_000_000),
        Key(
            "stage3_param_persistence_threshold",
            "zero_optimization.stage3_param_persistence_threshold",
            default=100_000,
        ),
        Key("stage3_max_live_parameters", "zero_optimization.stage3_max_live_parameters", default=1_000_000_000),
        Key("sub_group_size", "zero_optimization.sub_group_size", default=1_000_000_000),
        Key("overlap_comm", "zero_optimization.overlap_comm"),
        Key("contiguous_gradients", "zero_optimization.contiguous_gradients", default=True),
        Key("stage3_max_reuse_distance", "zero_optimization.stage3_max_reuse_distance"),
    ),
    block="zero_optimization",
)
"""`zero_optimization` (`DeepSpeedZeroConfig`); the bucket knobs are plan fields of the same names."""

OFFLOAD = KeyTable(
    "deepspeed",
    VERSION,
    (
        Key("offload_to", "offload_optimizer.device", name="device"),
        Key("offload_to", "offload_optimizer.pin_memory", name="pin_memory"),
        Key("offload_to", "offload_optimizer.nvme_path", name="nvme_path"),
    ),
    block="offload_optimizer",
)
"""An offload block (`offload_optimizer`, `offload_param`: `DeepSpeedZeroOffloadOptimizerConfig`)."""

PRECISION = KeyTable(
    "deepspeed",
    VERSION,
    (
        Key("precision", "bf16.enabled", name="enabled"),
        Key("master_weights", "bf16.bf16_master_weights_and_grads", name="master_weights_and_grads"),
        Key("master_weights", "bf16.bf16_optimizer_states", name="bf16_optimizer_states"),
    ),
    block="bf16",
)
"""The `bf16` / `fp16` blocks (`runtime/precision_config.py`)."""

BUCKET_DEFAULTS = {
    row.field: row.default
    for row in ZERO
    if row.field
    in (
        "reduce_bucket_size",
        "allgather_bucket_size",
        "stage3_prefetch_bucket_size",
        "stage3_param_persistence_threshold",
        "stage3_max_live_parameters",
        "sub_group_size",
    )
}
"""The bucket knobs the bill uses (plan fields of the same name) and DeepSpeed 0.19.8's defaults for a key the
config leaves out; "auto" is left to transformers, which fills reduce_bucket_size, stage3_prefetch_bucket_size and
stage3_param_persistence_threshold from the hidden size (the plan's None)."""

STAGE3_ONLY = frozenset(
    {
        "stage3_prefetch_bucket_size",
        "stage3_param_persistence_threshold",
        "stage3_max_live_parameters",
        "sub_group_size",
    }
)
"""Bucket knobs that only ZeRO-3 reads (`deepspeed/runtime/zero/stage3.py`)."""

DETECTING = frozenset(KEYS[k] for k in ("shard", "micro_batch", "train_batch_size", "allow_untested_optimizer"))
"""Top-level keys only a DeepSpeed config has (deepspeed/runtime/constants.py)."""

__all__ = ["BUCKET_DEFAULTS", "DETECTING", "KEYS", "OFFLOAD", "PRECISION", "SHARDS", "STAGE3_ONLY", "VERSION", "ZERO"]
