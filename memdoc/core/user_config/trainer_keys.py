"""Keys the Axolotl and LLaMA-Factory YAML readers share: typed access to a value (a wrong type is a
one-line `SourceDoc.error`), transformers' optimizer names, the `deepspeed:` reference and FSDP options.

Both trainers hand `optim`/`optimizer` to transformers' `TrainingArguments` (transformers/training_args.py,
`OptimizerNames`), point `deepspeed:` at a JSON file, and describe FSDP with transformers' `fsdp` words
(`full_shard`, `shard_grad_op`, `offload`, …) or an `fsdp_config` mapping.
"""

from __future__ import annotations

import posixpath
from typing import Any

from memdoc.core.user_config.reading import ConfigReading, SourceDoc
from memdoc.errors import quoted

_TRUE, _FALSE = ("true", "yes"), ("false", "no")


def get_bool(doc: SourceDoc, key: str, data: dict | None = None, *, where: str | None = None) -> bool | None:
    """A boolean (or 'true'/'false' text, which pydantic and argparse accept); None when absent or null."""
    value = (doc.data if data is None else data).get(key)
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise doc.error(where or key, f"must be true or false, got {quoted(value)}")


def get_int(doc: SourceDoc, key: str, data: dict | None = None, *, where: str | None = None) -> int | None:
    """A positive integer (4, 4.0 or "4"); None when absent or null."""
    value = (doc.data if data is None else data).get(key)
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and value.strip().isdigit() and value.strip().isascii():
        value = int(value.strip())
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise doc.error(where or key, f"must be a positive integer, got {quoted(value)}")
    return value


def get_float(doc: SourceDoc, key: str) -> float | None:
    """A number (LoRA dropout); None when absent or null."""
    value = doc.data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise doc.error(key, f"must be a number, got {quoted(value)}")
    try:
        return float(value)
    except ValueError:
        raise doc.error(key, f"must be a number, got {quoted(value)}") from None


def get_str(doc: SourceDoc, key: str, data: dict | None = None, *, where: str | None = None) -> str | None:
    value = (doc.data if data is None else data).get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise doc.error(where or key, f"must be text, got {quoted(value)}")
    return value


def get_mapping(doc: SourceDoc, key: str) -> dict | None:
    value = doc.data.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise doc.error(key, f"must be a mapping of options, got {quoted(value)}")
    return value


def is_set(value: Any) -> bool:
    """Does a key's value turn its feature on (true, a non-empty list or text, a number above 1)?"""
    if isinstance(value, bool) or value is None:
        return bool(value)
    if isinstance(value, (int, float)):
        return value > 1
    return bool(value)


def skip_set_keys(reading: ConfigReading, doc: SourceDoc, reasons: dict[str, str]) -> None:
    """Record every key of `reasons` that the document turns on as not billed, with its reason."""
    for key, reason in reasons.items():
        if is_set(doc.data.get(key)):
            reading.skip(doc, key, reason)


# ---------------------------------------------------------------------------------------------
# Optimizer

HF_OPTIM_TO_PLAN = {
    "adamw_torch_fused": "adamw-fused",
    "adamw_torch": "adamw-foreach",
    "adamw_bnb_8bit": "adamw-8bit",
    "adamw_8bit": "adamw-8bit",
    "paged_adamw_8bit": "paged-adamw-8bit",
    "sgd": "sgd",
    "adafactor": "adafactor",
    "lion_32bit": "lion",
}
"""transformers `OptimizerNames` value -> memdoc optimizer, for every name memdoc bills (the inverse of
`memdoc.core.emit.base.HF_OPTIMIZERS`, plus `adamw_8bit`, transformers' alias of `adamw_bnb_8bit`). Every
other name the trainers accept (8-bit Lion, paged 32-bit AdamW, torchao 4/8-bit AdamW, GaLore, APOLLO,
schedule-free, RMSprop, Adagrad, AdEMAMix, LOMO, Axolotl's own optimi/ADOPT/Muon/…) is not billed."""


def _sgd_momentum(doc: SourceDoc, args_key: str) -> bool:
    """Does `optim_args` give SGD a momentum (`momentum=0.9` text, or a mapping)? transformers' `sgd` has
    none otherwise (torch.optim.SGD's default momentum is 0: no state)."""
    args = doc.data.get(args_key)
    if isinstance(args, dict):
        pairs = {str(k): str(v) for k, v in args.items()}
    elif isinstance(args, str):
        pairs = dict(p.split("=", 1) for p in args.replace(" ", "").split(",") if "=" in p)
    else:
        return False
    try:
        return float(pairs.get("momentum", "0")) > 0
    except ValueError:
        return False


def read_optimizer(reading: ConfigReading, doc: SourceDoc, key: str, default: str) -> None:
    """The optimizer named by `key` (an HF `optim` name), else `default` (the trainer's own default name)."""
    name = get_str(doc, key)
    if name is None:
        reading.plan["optimizer"] = HF_OPTIM_TO_PLAN[default]
        return
    value = HF_OPTIM_TO_PLAN.get(name.strip().lower())
    if value is None:
        reading.skip(doc, key, f"optimizer {name!r} is not one memdoc bills (billed: {', '.join(HF_OPTIM_TO_PLAN)})")
        return
    reading.set(doc, key, "optimizer", value)
    if value == "sgd" and not _sgd_momentum(doc, "optim_args"):
        reading.skip(
            doc, key, "SGD without momentum keeps no state; memdoc bills SGD with momentum (one state per weight)"
        )


# ---------------------------------------------------------------------------------------------
# DeepSpeed and FSDP


def read_deepspeed(reading: ConfigReading, doc: SourceDoc, key: str = "deepspeed") -> bool:
    """`deepspeed: path` -> the path, relative to this file's directory, in `reading.referenced` (its stage,
    offload and precision are the DeepSpeed reader's). Returns whether DeepSpeed is used."""
    value = doc.data.get(key)
    if value is None:
        return False
    if isinstance(value, dict):
        reading.skip(doc, key, "an inline DeepSpeed config is not read; put it in a JSON file and name the file")
        return True
    path = get_str(doc, key)
    if not path.strip():
        return False
    path = path.strip()
    if not posixpath.isabs(path):
        path = posixpath.normpath(posixpath.join(posixpath.dirname(doc.path), path))
    reading.referenced.append(path)
    return True


_FSDP_GRAD_OP = ("shard_grad_op", "hybrid_shard_zero2")
_FSDP_FULL = ("full_shard", "hybrid_shard")


def fsdp_words(doc: SourceDoc, key: str = "fsdp") -> list[str]:
    """transformers' `fsdp` option as lower-case words ("full_shard auto_wrap" or a list of them)."""
    value = doc.data.get(key)
    if value is None or value is False:
        return []
    if isinstance(value, str):
        return value.lower().split()
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return [w.lower() for v in value for w in v.split()]
    raise doc.error(key, f"must be FSDP options (e.g. full_shard auto_wrap), got {quoted(value)}")


def fsdp_option(config: dict, name: str) -> Any:
    """`fsdp_config[name]`, also under its accelerate-style `fsdp_` prefix (`fsdp_offload_params`)."""
    return config.get(name, config.get(f"fsdp_{name}"))


def read_fsdp_shard(reading: ConfigReading, doc: SourceDoc, words: list[str], config: dict) -> None:
    """FSDP's sharding strategy -> shard (FULL_SHARD/HYBRID_SHARD: fsdp; SHARD_GRAD_OP or
    `reshard_after_forward: false`: gradients and optimizer states only, memdoc's zero2 layout) and
    `offload_params`/`offload` -> offload optimizer+params (FSDP offloads weights, gradients and states)."""
    strategy = fsdp_option(config, "sharding_strategy")
    strategy = str(strategy).lower() if strategy is not None else ""
    reshard = fsdp_option(config, "reshard_after_forward")
    grad_op = any(w in _FSDP_GRAD_OP for w in words) or strategy in _FSDP_GRAD_OP or reshard is False
    key = "fsdp_config" if config else "fsdp"
    if "no_shard" in words or strategy == "no_shard":
        reading.set(doc, key, "shard", "none")
    else:
        reading.set(doc, key, "shard", "zero2" if grad_op else "fsdp")
    offload = fsdp_option(config, "offload_params")
    if not isinstance(offload, (bool, type(None))):
        raise doc.error("fsdp_config", f"offload_params must be true or false, got {quoted(offload)}")
    if offload or "offload" in words:
        reading.set(doc, key, "offload", "optimizer+params")
