"""Read an accelerate config (`accelerate launch --config_file`): the inverse of
`memdoc.core.trainers.accelerate.write`.

Keys from accelerate 1.15 (`accelerate/commands/config/config_args.py` `ClusterConfig`,
`accelerate/utils/dataclasses.py` `FullyShardedDataParallelPlugin` / `DeepSpeedPlugin`):

* `distributed_type`: FSDP -> shard fsdp (or zero2 for SHARD_GRAD_OP, none for NO_SHARD); DEEPSPEED ->
  the plugin's `deepspeed_config` (`zero_stage`, `offload_optimizer_device`, `offload_param_device`,
  or a `deepspeed_config_file`, read next); MULTI_GPU / NO set no sharding (a trainer config's
  `deepspeed:` key still turns DeepSpeed on, as the HF Trainer does);
* `num_processes` (all GPUs) and `num_machines` -> gpus_per_node = num_processes / num_machines, nodes;
* `fsdp_config.fsdp_offload_params` -> offload optimizer+params to the CPU (FSDP offloads weights,
  gradients and optimizer states together); `fsdp_activation_checkpointing` -> full checkpointing;
* `parallelism_config` (FSDP2 only) -> --cp, --cp-impl and --tp (`_parallelism`).

`mixed_precision` is not read: it is the autocast the HF Trainer sets from its own `bf16`/`fp16`
(TrainingArguments wins over the launch config), and the weights' dtype comes from the model load.
"""

from __future__ import annotations

from memdoc.core.model.stack import Stack
from memdoc.core.trainers.accelerate.keys import DEEPSPEED, DETECTING, FSDP, KEYS
from memdoc.core.trainers.deepspeed.keys import SHARDS
from memdoc.core.trainers.deepspeed.read import reference
from memdoc.core.trainers.fsdp import fsdp_option, read_fsdp
from memdoc.core.trainers.reading import ConfigReading, SourceDoc
from memdoc.core.trainers.values import fail, get_choice, get_int, get_mapping, get_str

DISTRIBUTED = (
    "NO",
    "MULTI_GPU",
    "FSDP",
    "DEEPSPEED",
    "MULTI_CPU",
    "XLA",
    "MEGATRON_LM",
    "MULTI_XPU",
    "MULTI_NPU",
    "MULTI_MLU",
    "MULTI_MUSA",
    "MULTI_HPU",
    "MULTI_SDAA",
    "MULTI_NEURON",
)
"""accelerate's `DistributedType` values (accelerate/utils/dataclasses.py)."""


def looks_like(data: dict) -> bool:
    """`distributed_type`, or two of accelerate's cluster keys (accelerate/commands/config/config_args.py)."""
    return KEYS["shard"] in data or len(DETECTING & set(data)) >= 2


def read_accelerate(doc: SourceDoc, stack: Stack) -> ConfigReading:
    """An accelerate config -> GPUs, nodes, shard, offload (module docstring)."""
    reading = ConfigReading(formats=["accelerate"])
    kind = get_choice(doc, KEYS["shard"], DISTRIBUTED) or "no"
    kind = kind.upper()
    if kind not in ("NO", "MULTI_GPU", "FSDP", "DEEPSPEED"):
        reading.skip(doc, KEYS["shard"], f"{kind}: memdoc bills CUDA GPUs (NO, MULTI_GPU, FSDP, DEEPSPEED)")
        return reading
    _counts(doc, reading)
    if kind == "FSDP":
        _fsdp(doc, reading)
        _parallelism(doc, reading)
    elif kind == "DEEPSPEED":
        _deepspeed(doc, reading)
    return reading


def _counts(doc: SourceDoc, reading: ConfigReading) -> None:
    processes = get_int(doc, KEYS["gpus_per_node"])
    machines = get_int(doc, KEYS["nodes"]) or 1
    if KEYS["nodes"] in doc.data:
        reading.set(doc, KEYS["nodes"], "nodes", machines)
    if processes is None:
        return
    if processes % machines:
        raise fail(doc, KEYS["gpus_per_node"], f"{processes} processes do not split evenly over {machines} machines")
    reading.set(doc, KEYS["gpus_per_node"], "gpus_per_node", processes // machines)


def _fsdp(doc: SourceDoc, reading: ConfigReading) -> None:
    """`fsdp_config` (`fsdp_sharding_strategy` or `fsdp_reshard_after_forward`, default FULL_SHARD;
    `fsdp_offload_params`; `fsdp_activation_checkpointing`) through `fsdp.read_fsdp`; `fsdp_version` 1 or 2."""
    config = get_mapping(doc, KEYS["fsdp_config"]) or {}
    version = config.get(FSDP["shard"], 1)
    read_fsdp(reading, doc, KEYS["shard"], [], config)
    if version not in (1, 2, "1", "2"):
        raise fail(doc, "fsdp_config.fsdp_version", f"must be 1 or 2, got {version!r}")
    if str(version) == "2" and reading.plan.get("shard") == "fsdp":  # `fully_shard`: billed with FSDP2's rules
        reading.set(doc, KEYS["fsdp_config"], "shard", "fsdp2")
    if str(version) == "1" and fsdp_option(config, "state_dict_type")[1] is None:
        # accelerate/utils/dataclasses.py `set_state_dict_type`: FSDP1's default is FULL_STATE_DICT
        reading.plan["save_gather"] = True


def _parallelism(doc: SourceDoc, reading: ConfigReading) -> None:
    """`parallelism_config` (accelerate 1.15 `commands/launch.py` copies its `parallelism_config_*` keys onto the
    launch arguments, `parallelism_config.py` `ParallelismConfig` reads them): `cp_size` -> --cp (torch's ring
    attention), `sp_size` -> --cp with Ulysses (`sp_backend: deepspeed`), `tp_size` -> --tp."""
    config = get_mapping(doc, KEYS["parallelism_config"]) or {}
    for key, field, impl in (("cp_size", "cp", "ring"), ("sp_size", "cp", "ulysses"), ("tp_size", "tp", None)):
        name = f"parallelism_config_{key}"
        value = get_int(doc, name, config, where=f"parallelism_config.{name}")
        if value is not None and value > 1:
            reading.set(doc, f"parallelism_config.{name}", field, value)
            if impl:
                reading.plan["cp_impl"] = impl


def _deepspeed(doc: SourceDoc, reading: ConfigReading) -> None:
    """The DeepSpeed plugin (`deepspeed_config`): a `deepspeed_config_file` (read next), or zero_stage +
    offload devices (accelerate's `DeepSpeedPlugin` builds the DeepSpeed config from them)."""
    plugin = get_mapping(doc, KEYS["deepspeed_config"]) or {}
    path = get_str(doc, DEEPSPEED["config_file"], plugin, where="deepspeed_config.deepspeed_config_file")
    if path:
        reading.referenced.append(reference(doc, path))
        return
    stage = plugin.get(DEEPSPEED["shard"])
    if stage is not None:
        if isinstance(stage, bool) or stage not in (0, 1, 2, 3):
            raise fail(doc, "deepspeed_config.zero_stage", f"must be 0, 1, 2 or 3, got {stage!r}")
        reading.set(doc, "deepspeed_config.zero_stage", "shard", SHARDS[stage])
    devices = {}
    for key in (DEEPSPEED["offload"], DEEPSPEED["offload_param_device"]):
        device = get_choice(doc, key, ("none", "cpu", "nvme"), plugin, where=f"deepspeed_config.{key}")
        if device in ("cpu", "nvme"):
            devices[key] = device
    if DEEPSPEED["offload"] in devices:
        both = DEEPSPEED["offload_param_device"] in devices
        reading.set(
            doc, "deepspeed_config.offload_optimizer_device", "offload", "optimizer+params" if both else "optimizer"
        )
        reading.set(doc, "deepspeed_config.offload_optimizer_device", "offload_to", devices[DEEPSPEED["offload"]])
    elif devices:
        reading.skip(
            doc, "deepspeed_config.offload_param_device", "weights offloaded without the optimizer: not billed"
        )
    accum = get_int(doc, DEEPSPEED["grad_accum"], plugin, where="deepspeed_config.gradient_accumulation_steps")
    if accum is not None:
        reading.set(doc, "deepspeed_config.gradient_accumulation_steps", "grad_accum", accum)
