"""What a trainer is to memdoc: the `Trainer` protocol every folder of `memdoc.core.trainers` answers, and `Format`,
the trainers `memdoc emit --format` writes a main config for.

A trainer reads its own documents (`looks_like`, `read`) from its key table (`keys`); a format also writes one
(`emit`) and answers every plan knob it is asked about with keys, or with a refusal naming the nearest format that
has them (`packing_keys`, `check_parallel`), never with another trainer's keys.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from memdoc.core.model.plan import TrainingPlan
    from memdoc.core.model.stack import Stack
    from memdoc.core.trainers.base import EmitContext, Emitted
    from memdoc.core.trainers.reading import ConfigReading, SourceDoc
    from memdoc.core.trainers.table import KeyTable


class Trainer(Protocol):
    """A trainer whose files memdoc reads (and writes, as a side file or a main config)."""

    name: str
    """Its name: the `--format` value of a format, the reading's format otherwise."""
    version: str
    """The release its keys and facts were read from."""
    keys: KeyTable
    document: str | None
    """The format a reading of its files records ('trainer-args' for TRL's and HF's); None: its files are read by
    another trainer's reader (HF TrainingArguments by TRL's, whose configs subclass them)."""
    detect_rank: int
    """Where `detect` tries it: lower first (the most specific keys first)."""

    def looks_like(self, data: dict) -> bool:
        """Is a parsed document one of this trainer's files (by its keys; a file extension never decides)?"""
        ...

    def read(self, doc: SourceDoc, stack: Stack) -> ConfigReading:
        """What the document says about the plan."""
        ...


class Format(Trainer, Protocol):
    """A trainer `memdoc emit --format NAME` writes the main config of."""

    emits: bool
    seq_len_key: str | None
    """The key that sets the sequence length (the dataset fit's `how`); None: the format has none."""

    def default_filename(self, task: str) -> str:
        """The config file name written by default for the plan's task."""
        ...

    def emit(self, ctx: EmitContext) -> Emitted:
        """The plan as this format's config."""
        ...

    def packing_keys(self, plan: TrainingPlan, notes: list[str]) -> dict:
        """The keys that pack the rows as billed ({} without `--packing`), or a PlanError naming the nearest format."""
        ...

    def check_parallel(self, plan: TrainingPlan) -> None:
        """Refuse the CP/TP (and tiled MLP) the format cannot express, naming the nearest format or flag."""
        ...

    def add_parallel_keys(self, plan: TrainingPlan, emitted: Emitted) -> None:
        """Write the plan's CP/TP (and tiled MLP) into an emitted config that `check_parallel` let through."""
        ...

    def kbit_notes(self, plan: TrainingPlan) -> list[str]:
        """Notes where the trainer's QLoRA upcast is not the plan's (`--kbit-upcast`)."""
        ...

    def loss_note(self, plan: TrainingPlan, stack: Stack | None = None) -> str | None:
        """Where the trainer (at the `stack`'s version; None: the newest) computes the loss differently from
        `--loss`, the note saying what to bill."""
        ...


__all__ = ["Format", "Trainer"]
