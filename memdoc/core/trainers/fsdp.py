"""FSDP options -> shard, offload and checkpointing: the one FSDP parser of the trainer-args, Axolotl,
LLaMA-Factory and accelerate readers.

Where the keys come from:
* transformers' legacy `fsdp` words (`FSDPOption`: "full_shard auto_wrap", "shard_grad_op", "offload", …;
  `fsdp: true` turns FSDP on) and `fsdp_config` (transformers/training_args.py: a `fsdp_` prefix is
  stripped; `_apply_legacy_fsdp_to_config` turns the words into `reshard_after_forward` and
  `cpu_offload`, the config's own keys winning; FSDP2's `reshard_after_forward` is a bool, FSDP1's a
  strategy name; `activation_checkpointing`);
* accelerate's `fsdp_config` (accelerate/utils/dataclasses.py `FullyShardedDataParallelPlugin`:
  `fsdp_sharding_strategy`, or `fsdp_reshard_after_forward` as a name, torch's enum number or a bool;
  `fsdp_offload_params`; `fsdp_activation_checkpointing`), which Axolotl writes too (`offload_params`,
  with or without the prefix).

Shard: FULL_SHARD/HYBRID_SHARD -> fsdp; SHARD_GRAD_OP/HYBRID_SHARD_ZERO2 or `reshard_after_forward: false`
(gradients and states sharded, weights kept gathered) -> memdoc's zero2 layout; NO_SHARD -> none. Offload
moves weights, gradients and optimizer states to the CPU together: optimizer+params.
"""

from __future__ import annotations

from typing import Any

from memdoc.core.trainers.reading import ConfigReading, SourceDoc
from memdoc.core.trainers.values import fail, get_bool
from memdoc.errors import quoted

STRATEGIES = {
    "FULL_SHARD": "fsdp",
    "1": "fsdp",
    "SHARD_GRAD_OP": "zero2",
    "2": "zero2",
    "NO_SHARD": "none",
    "3": "none",
    "HYBRID_SHARD": "fsdp",
    "4": "fsdp",
    "HYBRID_SHARD_ZERO2": "zero2",
    "5": "zero2",
}
"""A sharding strategy (name or torch's `ShardingStrategy` number) -> shard."""

HYBRID = "hybrid sharding shards within a node only: memdoc bills sharding over every GPU"


def fsdp_words(doc: SourceDoc, key: str = "fsdp") -> list[str]:
    """transformers' `fsdp` option as lower-case words ("full_shard auto_wrap" or a list of them; `true`:
    full_shard, FSDP on with the default strategy); [] when absent, false or empty."""
    value = doc.data.get(key)
    if value is None or value is False or (isinstance(value, str) and value.strip().lower() in ("", "false")):
        return []
    if value is True or (isinstance(value, str) and value.strip().lower() == "true"):
        return ["full_shard"]
    if isinstance(value, str):
        return value.lower().split()
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return [w.lower() for v in value for w in v.split()]
    raise fail(doc, key, f"must be FSDP options (e.g. full_shard auto_wrap), got {quoted(value)}")


def fsdp_option(config: dict, name: str) -> tuple[str, Any]:
    """(the key it is under, the value) of `name` in an FSDP config, also under its `fsdp_` prefix."""
    for key in (name, f"fsdp_{name}"):
        if config.get(key) is not None:
            return key, config[key]
    return name, None


def _strategy(doc: SourceDoc, words: list[str], config: dict, config_key: str) -> tuple[str, str | None, str]:
    """(shard, the config key that chose it or None for the words, the strategy as written). The config's
    strategy wins over the words (`_apply_legacy_fsdp_to_config` only fills keys the config lacks)."""
    for name in ("sharding_strategy", "reshard_after_forward"):
        key, value = fsdp_option(config, name)
        if value is None:
            continue
        where = f"{config_key}.{key}"
        text = str(value).strip().upper()
        if isinstance(value, bool) or text in ("TRUE", "FALSE"):
            return ("fsdp" if get_bool(doc, key, config, where=where) else "zero2"), where, text
        if text in STRATEGIES:
            return STRATEGIES[text], where, text
        names = ", ".join(k for k in STRATEGIES if not k.isdigit())
        raise fail(doc, where, f"{value!r} is not one of: {names}")
    chosen = next((w.upper() for w in words if w.upper() in STRATEGIES), "FULL_SHARD")
    return STRATEGIES[chosen], None, chosen


def read_fsdp(
    reading: ConfigReading,
    doc: SourceDoc,
    key: str,
    words: list[str],
    config: dict,
    *,
    config_key: str = "fsdp_config",
) -> None:
    """FSDP turned on by `key` (the `fsdp` words, `fsdp_config` or accelerate's `distributed_type`) ->
    shard (read from `key`), offload and checkpointing (from `key` for a word, else from `config_key`, the
    config mapping's top-level key); see the module docstring. Offload goes to the CPU, the plan's default
    `offload_to`, so it is not set."""
    shard, strategy_key, strategy = _strategy(doc, words, config, config_key)
    reading.set(doc, key, "shard", shard)
    if strategy.startswith("HYBRID") or strategy in ("4", "5"):
        reading.skip(doc, strategy_key or key, HYBRID)
    offload_key = key if "offload" in words else None
    for name in ("cpu_offload", "offload_params"):
        option, value = fsdp_option(config, name)
        if value is not None:  # the config wins over the words
            offload_key = config_key if get_bool(doc, option, config, where=f"{config_key}.{option}") else None
    if offload_key:
        reading.set(doc, offload_key, "offload", "optimizer+params")
    option, value = fsdp_option(config, "activation_checkpointing")
    if value is not None and get_bool(doc, option, config, where=f"{config_key}.{option}"):
        reading.set(doc, config_key, "checkpointing", "full")
    _save_and_load(reading, doc, config, config_key)


def _save_and_load(reading: ConfigReading, doc: SourceDoc, config: dict, config_key: str) -> None:
    """`state_dict_type` -> whether the save gathers the full model on rank 0 (FULL_STATE_DICT: `save_gather`;
    SHARDED/LOCAL: each rank its shard, the plan's default None), and `cpu_ram_efficient_loading` ->
    `low_mem_load` (accelerate/utils/dataclasses.py `FullyShardedDataParallelPlugin`)."""
    option, value = fsdp_option(config, "state_dict_type")
    if value is not None:
        kind = str(value).upper().rsplit(".", 1)[-1]
        if kind not in ("FULL_STATE_DICT", "SHARDED_STATE_DICT", "LOCAL_STATE_DICT"):
            raise fail(
                doc,
                f"{config_key}.{option}",
                f"must be FULL_STATE_DICT, SHARDED_STATE_DICT or LOCAL_STATE_DICT, got {value!r}",
            )
        if kind == "FULL_STATE_DICT":  # sharded is the plan's default (None)
            reading.set(doc, config_key, "save_gather", True)
    option, value = fsdp_option(config, "cpu_ram_efficient_loading")
    if value is not None and not get_bool(doc, option, config, where=f"{config_key}.{option}"):
        reading.set(doc, config_key, "low_mem_load", False)  # True is the plan's default
