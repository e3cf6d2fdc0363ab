"""accelerate's config-file keys (1.15: `accelerate/commands/config/config_args.py` `ClusterConfig`,
`utils/dataclasses.py` `FullyShardedDataParallelPlugin` / `DeepSpeedPlugin`, `parallelism_config.py`): one table for
the reader and the writer; the `fsdp_config`, `deepspeed_config` and `parallelism_config` blocks are tables of their
own."""

from __future__ import annotations

from memdoc.core.trainers.table import Key, KeyTable

VERSION = "1.15.0"

KEYS = KeyTable(
    "accelerate",
    VERSION,
    (
        Key("shard", "distributed_type"),
        Key("gpus_per_node", "num_processes"),
        Key("nodes", "num_machines"),
        Key("nodes", "machine_rank", name="machine_rank"),
        Key("precision", "mixed_precision"),
        Key("nodes", "compute_environment", name="compute_environment"),
        Key("shard", "fsdp_config", name="fsdp_config"),
        Key("shard", "deepspeed_config", name="deepspeed_config"),
        Key("cp", "parallelism_config", name="parallelism_config"),
    ),
)

FSDP = KeyTable(
    "accelerate",
    VERSION,
    (
        Key("shard", "fsdp_config.fsdp_version", {"fsdp": 1, "fsdp2": 2}, default=1),
        Key("offload", "fsdp_config.fsdp_offload_params"),
        Key("save_gather", "fsdp_config.fsdp_state_dict_type", {True: "FULL_STATE_DICT", None: "SHARDED_STATE_DICT"}),
        Key("low_mem_load", "fsdp_config.fsdp_cpu_ram_efficient_loading"),
        Key("checkpointing", "fsdp_config.fsdp_activation_checkpointing"),
        Key("shard", "fsdp_config.fsdp_reshard_after_forward", name="reshard_after_forward"),
    ),
    block="fsdp_config",
)
"""`fsdp_config` (`FullyShardedDataParallelPlugin`; the reader also takes the keys without their `fsdp_` prefix)."""

DEEPSPEED = KeyTable(
    "accelerate",
    VERSION,
    (
        Key("shard", "deepspeed_config.zero_stage"),
        Key("offload", "deepspeed_config.offload_optimizer_device"),
        Key("offload", "deepspeed_config.offload_param_device", name="offload_param_device"),
        Key("grad_accum", "deepspeed_config.gradient_accumulation_steps"),
        Key("shard", "deepspeed_config.deepspeed_config_file", name="config_file"),
    ),
    block="deepspeed_config",
)
"""`deepspeed_config` (`DeepSpeedPlugin`)."""

PARALLELISM = KeyTable(
    "accelerate",
    VERSION,
    (
        Key("cp", "parallelism_config.parallelism_config_cp_size"),
        Key("cp", "parallelism_config.parallelism_config_sp_size", name="sp_size"),
        Key("tp", "parallelism_config.parallelism_config_tp_size"),
        Key("dp_size", "parallelism_config.parallelism_config_dp_shard_size"),
        Key("dp_size", "parallelism_config.parallelism_config_dp_replicate_size", name="dp_replicate_size"),
        Key("cp_impl", "parallelism_config.parallelism_config_cp_backend", {"ring": "torch"}),
    ),
    block="parallelism_config",
)
"""`parallelism_config` (accelerate 1.15 `commands/launch.py` copies its `parallelism_config_*` keys onto the launch
arguments; FSDP2 only)."""

DETECTING = frozenset(
    KEYS[k] for k in ("shard", "compute_environment", "gpus_per_node", "nodes", "machine_rank", "precision")
)
"""Keys of an accelerate config (`distributed_type` alone, or two of these)."""

__all__ = ["DEEPSPEED", "DETECTING", "FSDP", "KEYS", "PARALLELISM", "VERSION"]
