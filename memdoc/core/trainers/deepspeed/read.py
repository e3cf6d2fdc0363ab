"""Read a DeepSpeed JSON (the HF Trainer's `deepspeed:` file): the inverse of `memdoc.core.trainers.deepspeed.write`.

Keys and meanings from DeepSpeed 0.19 (`deepspeed/runtime/zero/config.py` `DeepSpeedZeroConfig`,
`deepspeed/runtime/zero/offload_config.py`, `deepspeed/runtime/config.py`) and the HF integration
(`transformers/integrations/deepspeed.py`, which fills "auto" values from TrainingArguments):

* `zero_optimization.stage` 0–3 -> shard none/zero1/zero2/zero3;
* `zero_optimization.offload_optimizer.device` cpu/nvme -> offload optimizer (to cpu/nvme), with
  `offload_param.device` -> optimizer+params;
* `bf16.enabled` / `fp16.enabled` true -> amp-bf16/amp-fp16 (DeepSpeed keeps fp32 master weights and
  optimizer states for 16-bit training); "auto" takes the trainer's flags;
* `train_micro_batch_size_per_gpu`, `gradient_accumulation_steps`: a number sets the plan, "auto"
  takes the trainer's;
* the bucket knobs (`reduce_bucket_size`, `allgather_bucket_size`, `overlap_comm`, `contiguous_gradients`,
  `stage3_prefetch_bucket_size`, `stage3_param_persistence_threshold`, `stage3_max_live_parameters`,
  `sub_group_size`) -> the plan fields of the same names (DeepSpeed's default when absent, None for "auto");
* `bf16.bf16_master_weights_and_grads` + `bf16.bf16_optimizer_states` -> master_weights bf16;
* `stage3_max_reuse_distance` is not billed (listed with the reason).

A trainer config's `deepspeed:` key (TrainingArguments, Axolotl, LLaMA-Factory) is a path to such a file
(read next) or the config itself, inline: both go through `read_deepspeed` (`read_deepspeed_key`).
"""

from __future__ import annotations

import posixpath

from memdoc.core.model.stack import Stack
from memdoc.core.trainers.deepspeed.keys import (
    BUCKET_DEFAULTS,
    DETECTING,
    KEYS,
    OFFLOAD,
    PRECISION,
    SHARDS,
    STAGE3_ONLY,
    ZERO,
)
from memdoc.core.trainers.reading import ConfigReading, KeyRead, SourceDoc
from memdoc.core.trainers.values import fail, get_bool, get_int, get_mapping
from memdoc.errors import quoted

BUCKETS = {
    ZERO["stage3_max_reuse_distance"]: "ZeRO-3's gathered parameters kept for reuse",
}
"""`zero_optimization` keys that size caches which memdoc does not bill."""


def looks_like(data: dict) -> bool:
    """Any key only a DeepSpeed config has (deepspeed/runtime/constants.py)."""
    return bool(DETECTING & set(data))


def read_deepspeed(doc: SourceDoc, stack: Stack) -> ConfigReading:
    """A DeepSpeed config -> shard, offload, precision, micro-batch and accumulation (module docstring)."""
    reading = ConfigReading(formats=["deepspeed"])
    zero = get_mapping(doc, KEYS["shard"]) or {}
    if ZERO["stage"] in zero:
        stage = zero[ZERO["stage"]]
        if not isinstance(stage, int) or isinstance(stage, bool) or stage not in SHARDS:
            raise fail(doc, "zero_optimization.stage", f"must be 0, 1, 2 or 3, got {quoted(stage)}")
        reading.set(doc, "zero_optimization.stage", "shard", SHARDS[stage])
    _offload(doc, zero, reading)
    _precision(doc, reading)
    for key, plan_field in (
        (KEYS["micro_batch"], "micro_batch"),
        (KEYS["grad_accum"], "grad_accum"),
    ):
        if doc.data.get(key) not in (None, "auto"):
            reading.set(doc, key, plan_field, get_int(doc, key))
    if doc.data.get(KEYS["train_batch_size"]) not in (None, "auto") and KEYS["micro_batch"] not in doc.data:
        reading.skip(
            doc,
            KEYS["train_batch_size"],
            "the global batch; memdoc bills the per-GPU micro-batch (train_micro_batch_size_per_gpu, or the trainer's)",
        )
    if KEYS["shard"] in doc.data:
        _buckets(doc, zero, reading)
    _save_gather(doc, zero, reading)
    for key, what in BUCKETS.items():
        if key in zero:
            reading.skip(doc, f"zero_optimization.{key}", f"sizes {what}: not billed")
    _extras(doc, reading)
    return reading


def _buckets(doc: SourceDoc, zero: dict, reading: ConfigReading) -> None:
    """The bucket knobs (`BUCKET_DEFAULTS`) and `overlap_comm` / `contiguous_gradients` into the plan: the
    config's number, None for "auto", DeepSpeed's default when absent (overlap_comm: true under ZeRO-3 only,
    `DeepSpeedZeroConfig.overlap_comm_valid`)."""
    for key, default in BUCKET_DEFAULTS.items():
        if key not in zero and zero.get(ZERO["stage"]) != 3 and key in STAGE3_ONLY:
            continue  # only ZeRO-3 reads it: the plan keeps its default (what emit writes back for ZeRO-3)
        where = f"zero_optimization.{key}"
        value = zero.get(key, default)
        if value == "auto":
            reading.set(doc, where, key, None)
            continue
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise fail(doc, where, f'must be a number of elements or "auto", got {quoted(value)}')
        _knob(reading, doc, zero, key, value)
    for key, default in ((ZERO["overlap_comm"], zero.get(ZERO["stage"]) == 3), (ZERO["contiguous_gradients"], True)):
        where = f"zero_optimization.{key}"
        value = get_bool(doc, key, zero, where=where) if zero.get(key) is not None else default
        _knob(reading, doc, zero, key, value)


def _save_gather(doc: SourceDoc, zero: dict, reading: ConfigReading) -> None:
    """ZeRO-3's `stage3_gather_16bit_weights_on_model_save` (DeepSpeedZeroConfig's default False; the old
    spelling `stage3_gather_fp16_weights_on_model_save`) -> `save_gather`: True is the plan's default for ZeRO-3
    (None, what memdoc emits), False: each rank saves its own partition."""
    if zero.get(ZERO["stage"]) != 3:
        return
    for key in (ZERO["save_gather"], "stage3_gather_fp16_weights_on_model_save"):
        if key in zero:
            where = f"zero_optimization.{key}"
            reading.set(doc, where, "save_gather", None if get_bool(doc, key, zero, where=where) else False)
            return
    reading.plan["save_gather"] = False


def _knob(reading: ConfigReading, doc: SourceDoc, zero: dict, key: str, value) -> None:
    """Set plan field `key`: read from `zero_optimization.key`, or DeepSpeed's default when the key is absent
    (the plan holds it; no key is listed as read)."""
    if key in zero:
        reading.set(doc, f"zero_optimization.{key}", key, value)
    else:
        reading.plan[key] = value


def _offload(doc: SourceDoc, zero: dict, reading: ConfigReading) -> None:
    """`offload_optimizer` / `offload_param`: {"device": "cpu"|"nvme"|"none", …} (offload_config.py)."""
    devices = {}
    for key in (ZERO["offload_optimizer"], ZERO["offload_param"]):
        block = get_mapping(doc, key, zero, where=f"zero_optimization.{key}")
        if block is None:
            continue
        device = block.get(OFFLOAD["device"], "none")
        if device not in ("none", "cpu", "nvme", None):
            raise fail(doc, f"zero_optimization.{key}.device", f"must be cpu, nvme or none, got {quoted(device)}")
        if device in ("cpu", "nvme"):
            devices[key] = device
    if not devices:
        return
    if ZERO["offload_param"] in devices and ZERO["offload_optimizer"] not in devices:
        reading.skip(doc, "zero_optimization.offload_param", "weights offloaded without the optimizer: not billed")
        return
    both = ZERO["offload_param"] in devices
    key = "zero_optimization.offload_param" if both else "zero_optimization.offload_optimizer"
    reading.set(doc, key, "offload", "optimizer+params" if both else KEYS["optimizer"])
    reading.set(doc, "zero_optimization.offload_optimizer.device", "offload_to", devices[ZERO["offload_optimizer"]])


def _precision(doc: SourceDoc, reading: ConfigReading) -> None:
    """`bf16.enabled` / `fp16.enabled` (true, false or "auto"); both true is a contradiction."""
    enabled = {}
    for key in (KEYS["bf16"], KEYS["fp16"]):
        block = get_mapping(doc, key)
        if block is None or block.get(PRECISION["enabled"], False) == "auto":
            continue
        enabled[key] = get_bool(doc, PRECISION["enabled"], block, where=f"{key}.enabled")
    if enabled.get(KEYS["bf16"]) and enabled.get(KEYS["fp16"]):
        raise fail(doc, "fp16.enabled", "bf16.enabled and fp16.enabled are both true; DeepSpeed trains in one of them")
    for key in (KEYS["bf16"], KEYS["fp16"]):
        if enabled.get(key):
            reading.set(doc, f"{key}.enabled", "precision", f"amp-{key}")
    bf16 = get_mapping(doc, KEYS["bf16"]) or {}
    if bf16.get(PRECISION["master_weights_and_grads"]) is True and bf16.get(PRECISION["bf16_optimizer_states"]) is True:
        reading.set(doc, "bf16.bf16_master_weights_and_grads", "master_weights", "bf16")
        reading.set(doc, "bf16.enabled", "precision", "bf16")
    elif bf16.get(PRECISION["master_weights_and_grads"]) is True:
        reading.skip(
            doc,
            "bf16.bf16_master_weights_and_grads",
            "bf16 master weights with fp32 optimizer states (no bf16_optimizer_states): billed as fp32 master",
        )


def _extras(doc: SourceDoc, reading: ConfigReading) -> None:
    """DeepSpeed's own activation checkpointing and optimizer block."""
    ac = doc.data.get(KEYS["checkpointing"])
    if isinstance(ac, dict) and (ac.get("partition_activations") or ac.get("cpu_checkpointing")):
        reading.skip(
            doc,
            KEYS["checkpointing"],
            "DeepSpeed's partitioned/CPU activation checkpoints (Megatron models only): not billed",
        )
    optimizer = doc.data.get(KEYS["optimizer"])
    if isinstance(optimizer, dict):
        kind = str(optimizer.get("type", "")).lower()
        if kind not in ("adam", "adamw", "cpuadam", "fusedadam", ""):
            reading.skip(
                doc, KEYS["optimizer"], f"DeepSpeed optimizer {optimizer.get('type')}: memdoc bills AdamW's 2 states"
            )


def reference(doc: SourceDoc, path: str) -> str:
    """A path a config names (a DeepSpeed JSON), relative to that config's directory unless absolute."""
    path = path.strip()
    return path if posixpath.isabs(path) else posixpath.normpath(posixpath.join(posixpath.dirname(doc.path), path))


def read_deepspeed_key(reading: ConfigReading, doc: SourceDoc, stack: Stack, key: str = "deepspeed") -> bool:
    """A trainer config's `deepspeed:` (transformers/training_args.py `TrainingArguments.deepspeed`: a path
    or a dict; Axolotl's and LLaMA-Factory's pass it on): a path goes to `reading.referenced` (read next),
    a mapping is read here as a DeepSpeed config (its keys listed as `file:line (deepspeed)`). Returns
    whether DeepSpeed is used."""
    value = doc.data.get(key)
    if value is None or (isinstance(value, str) and not value.strip()):
        return False
    if isinstance(value, str):
        reading.referenced.append(reference(doc, value))
        reading.read.append(KeyRead(doc.path, key, "shard"))
    elif isinstance(value, dict):
        inline = SourceDoc(f"{doc.where(key)} ({key})", value, {})
        merged = reading.merge(read_deepspeed(inline, stack))
        reading.plan, reading.read, reading.not_billed = merged.plan, merged.read, merged.not_billed
    else:
        raise fail(doc, key, f"must be a path to a DeepSpeed JSON or a mapping, got {quoted(value)}")
    return True
