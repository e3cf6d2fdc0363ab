"""Which format a parsed config document is, by its keys (a file extension never decides), and the
reader for it. The one table of formats: `FORMATS`.

Distinctive keys:
* axolotl: `base_model` with `micro_batch_size`, `sequence_len` or `datasets` entries that have a `type`
  (axolotl/utils/schemas/config.py);
* llamafactory: `model_name_or_path` with `stage`, `finetuning_type`, `cutoff_len` or `template`
  (llamafactory/hparams/finetuning_args.py, data_args.py);
* deepspeed: `zero_optimization`, `train_micro_batch_size_per_gpu`, `train_batch_size` (deepspeed/runtime/constants.py);
* accelerate: `distributed_type` (+ `compute_environment`, `num_processes`; accelerate/commands/config/config_args.py);
* trainer-args: TRL's ModelConfig/SFTConfig keys or TrainingArguments' (transformers/training_args.py).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from memdoc.core.model.stack import Stack
from memdoc.core.trainers.accelerate.read import ACCELERATE_KEYS, read_accelerate
from memdoc.core.trainers.deepspeed.read import DS_KEYS, read_deepspeed
from memdoc.core.trainers.reading import ConfigReading, SourceDoc
from memdoc.core.trainers.trl.read import HF_KEYS, TRL_KEYS, read_trainer_args
from memdoc.errors import ConfigError

Reader = Callable[[SourceDoc, Stack], ConfigReading]

LLAMAFACTORY_KEYS = frozenset({"stage", "finetuning_type", "cutoff_len", "template"})
AXOLOTL_KEYS = frozenset({"micro_batch_size", "sequence_len"})


def _is_axolotl(data: dict) -> bool:
    if "base_model" not in data:
        return False
    datasets = data.get("datasets")
    typed = isinstance(datasets, list) and any(isinstance(d, dict) and "type" in d for d in datasets)
    return bool(AXOLOTL_KEYS & set(data)) or typed


def _is_llamafactory(data: dict) -> bool:
    return "model_name_or_path" in data and bool(LLAMAFACTORY_KEYS & set(data))


def _is_deepspeed(data: dict) -> bool:
    return bool(DS_KEYS & set(data))


def _is_accelerate(data: dict) -> bool:
    return "distributed_type" in data or len(ACCELERATE_KEYS & set(data)) >= 2


def _is_trainer_args(data: dict) -> bool:
    return bool((TRL_KEYS | HF_KEYS) & set(data))


def _lazy(module: str, name: str) -> Reader:
    """A reader in a module another change adds (memdoc/core/trainers/axolotl/read.py, llamafactory/read.py),
    imported when a document of that format is read."""

    def read(doc: SourceDoc, stack: Stack) -> ConfigReading:
        try:
            reader = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            raise ConfigError(
                f"{doc.path}: a {module.rsplit('.', 1)[-1]} config, which this memdoc cannot read yet"
            ) from None
        return reader(doc, stack)

    return read


FORMATS: dict[str, tuple[Callable[[dict], bool], Reader]] = {
    "axolotl": (_is_axolotl, _lazy("memdoc.core.trainers.axolotl.read", "read_axolotl")),
    "llamafactory": (_is_llamafactory, _lazy("memdoc.core.trainers.llamafactory.read", "read_llamafactory")),
    "deepspeed": (_is_deepspeed, read_deepspeed),
    "accelerate": (_is_accelerate, read_accelerate),
    "trainer-args": (_is_trainer_args, read_trainer_args),
}
"""Format -> (does a document look like it, its reader); tried in this order (the most specific first)."""


def detect_format(doc: SourceDoc) -> str:
    """The format of `doc`, or a ConfigError naming the file and the formats memdoc reads."""
    for name, (looks_like, _) in FORMATS.items():
        if looks_like(doc.data):
            return name
    raise ConfigError(
        f"{doc.path}: not a config memdoc recognises (it reads {', '.join(FORMATS)}; "
        f"top-level keys: {', '.join(sorted(map(str, doc.data))[:8]) or 'none'})"
    )


def read_document(doc: SourceDoc, stack: Stack) -> ConfigReading:
    """Detect `doc`'s format and read it."""
    return FORMATS[detect_format(doc)][1](doc, stack)
