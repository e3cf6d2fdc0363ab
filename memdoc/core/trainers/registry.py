"""The one list of trainers memdoc reads and writes: `TRAINERS`, each a folder of this package answering
`memdoc.core.trainers.trainer.Trainer` (`Format` for those `memdoc emit --format` writes).

Adding a trainer format is one folder (`keys.py`, `read.py`, `write.py`, `facts.py` and its `TRAINER` in
`__init__.py`) and one line here. Importing this module imports each folder's `__init__` only: its key table and
its answers; the readers and writers are imported where a config is read or written, so that `bill` and `plan`
start without them.
"""

from __future__ import annotations

from memdoc.core.trainers import accelerate, axolotl, deepspeed, hf, llamafactory, trl
from memdoc.core.trainers.trainer import Format, Trainer

TRAINERS: tuple[Trainer, ...] = (
    trl.TRAINER,
    hf.TRAINER,
    axolotl.TRAINER,
    llamafactory.TRAINER,
    deepspeed.TRAINER,
    accelerate.TRAINER,
)
"""Every trainer; the formats (`FORMATS`) in this order are the `--format` choices."""


def formats() -> tuple[str, ...]:
    """The formats `memdoc emit` writes a main config for, from `TRAINERS` as it is now."""
    return tuple(t.name for t in TRAINERS if getattr(t, "emits", False))


FORMATS: tuple[str, ...] = formats()
"""`formats()` at import: the `--format` choices."""


def trainer(name: str) -> Trainer:
    """The trainer named `name` (KeyError when none is)."""
    for t in TRAINERS:
        if t.name == name:
            return t
    raise KeyError(name)


def format_of(name: str) -> Format:
    """The format `name` (KeyError when it is not one `memdoc emit` writes)."""
    if name not in formats():
        raise KeyError(name)
    return trainer(name)  # type: ignore[return-value]


def readers() -> list[Trainer]:
    """The trainers whose documents `detect` recognises, in the order tried (the most specific keys first)."""
    return sorted((t for t in TRAINERS if t.document), key=lambda t: t.detect_rank)


def default_filename(fmt: str, task: str = "sft") -> str:
    """The config file name written by default for `fmt` and the plan's task."""
    return format_of(fmt).default_filename(task)


def how(**fields) -> dict[str, dict]:
    """Each format's keys for plan fields -> values (the `how` of a dataset fit or a prescription): only the formats
    whose key table has a key for every field."""
    out = {}
    for name in formats():
        keys = format_of(name).keys
        ids = {row.id for row in keys}
        if all(f in ids for f in fields):
            out[name] = {keys[f]: value for f, value in fields.items()}
    return out


__all__ = ["FORMATS", "TRAINERS", "default_filename", "format_of", "formats", "how", "readers", "trainer"]
