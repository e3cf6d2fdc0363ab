"""Which format a parsed config document is, by its keys (a file extension never decides), and the
reader for it: each trainer of `registry.TRAINERS` that reads documents, tried by its `detect_rank`.

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

from memdoc.core.model.stack import Stack
from memdoc.core.trainers.reading import ConfigReading, SourceDoc
from memdoc.core.trainers.registry import readers
from memdoc.core.trainers.trainer import Trainer
from memdoc.errors import ConfigError

FORMATS: dict[str, Trainer] = {t.document: t for t in readers()}
"""Document format -> the trainer that recognises and reads it, in the order tried (the most specific first), at
import (`detect_format` asks the registry each time)."""


def detect_format(doc: SourceDoc) -> str:
    """The format of `doc`, or a ConfigError naming the file and the formats memdoc reads."""
    for trainer in readers():
        if trainer.looks_like(doc.data):
            return trainer.document
    raise ConfigError(
        f"{doc.path}: not a config memdoc recognises (it reads {', '.join(t.document for t in readers())}; "
        f"top-level keys: {', '.join(sorted(map(str, doc.data))[:8]) or 'none'})"
    )


def read_document(doc: SourceDoc, stack: Stack) -> ConfigReading:
    """Detect `doc`'s format and read it."""
    name = detect_format(doc)
    return next(t for t in readers() if t.document == name).read(doc, stack)
