"""A trainer's key table: each plan field, the trainer's key for it, how its values map, and the trainer version
the row was read from. A trainer's reader and writer both look their keys up here, so they cannot drift apart
(torchtitan's `StateDictAdapter`: one `from_hf_map`, and `to_hf` as its inverse).

A row is looked up by its name (the plan field it sets, or the key's own meaning where one field has several
keys): `KEYS["micro_batch"]` is Axolotl's `micro_batch_size`. `values` maps a plan value to the trainer's value
(the writer's direction); the reader takes its inverse, plus `aliases` (other spellings the trainer accepts for
the same value). `spellings` names the key in older trainer versions (`{"0.20.0": "max_seq_length"}`: the key
before 0.20.0), for a writer that targets a given version.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from dataclasses import field as _field
from typing import Any


@dataclass(frozen=True)
class Key:
    """One row: plan field ↔ the trainer's key ↔ value mapping."""

    field: str
    """The plan field the key sets (`TrainingPlan` field names; `model` for the model id, `task` for the task)."""
    key: str
    """The trainer's key (a nested one as `block.key`)."""
    values: Mapping[Any, Any] = _field(default_factory=dict)
    """Plan value -> the trainer's value, where they differ; empty: the value passes as is."""
    aliases: Mapping[Any, Any] = _field(default_factory=dict)
    """Other trainer values the reader accepts -> plan value."""
    name: str = ""
    """What the row is looked up by; empty: `field`."""
    version: str = ""
    """The trainer version the row was read from; empty: the table's."""
    spellings: Mapping[str, str] = _field(default_factory=dict)
    """Trainer version -> the key before that version (older spellings, newest first)."""
    default: Any = None
    """The trainer's default when the key is absent (None: none, or not one memdoc uses)."""
    read_also: tuple[str, ...] = ()
    """Other spellings of the key the reader accepts (an older release's, when the version it changed in is not
    established)."""

    @property
    def id(self) -> str:
        return self.name or self.field

    @property
    def leaf(self) -> str:
        """The key inside its block (`trl.beta` -> `beta`)."""
        return self.key.rsplit(".", 1)[-1]

    def write(self, value: Any) -> Any:
        """The trainer's value for plan value `value`."""
        return self.values.get(value, value) if self.values else value

    def reading(self) -> dict:
        """The trainer's value -> plan value: `aliases`, then the inverse of `values` (which wins)."""
        return {**self.aliases, **{v: k for k, v in self.values.items()}}

    def read(self, value: Any) -> Any:
        """The plan value of the trainer's `value` (as is where the row maps no values)."""
        return self.reading().get(value, value) if self.values else value

    def key_at(self, version: str | None) -> str:
        """The key's spelling in trainer `version` (None: the version the row was read from)."""
        if version is not None:
            for before, old in self.spellings.items():
                if _older(version, before):
                    return old
        return self.key


def _older(version: str, than: str) -> bool:
    def parts(v: str) -> tuple[int, ...]:
        return tuple(int(p) for p in v.split(".") if p.isdigit())

    return parts(version) < parts(than)


@dataclass(frozen=True)
class KeyTable:
    """One trainer's key table (one block of its file: the top level, or a nested mapping such as Axolotl's `trl:`)."""

    trainer: str
    version: str
    """The trainer version the rows were read from (`Key.version` overrides it per row)."""
    rows: tuple[Key, ...]
    block: str = ""
    """The top-level key the rows sit under ('' for the top level)."""
    _by_id: dict[str, Key] = _field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_id: dict[str, Key] = {}
        for row in self.rows:
            if row.id in by_id:
                raise ValueError(f"{self.trainer} key table: two rows named {row.id!r}")
            by_id[row.id] = row
        object.__setattr__(self, "_by_id", by_id)

    def __getitem__(self, name: str) -> str:
        """The key (inside the block) of row `name`."""
        return self._by_id[name].leaf

    def row(self, name: str) -> Key:
        return self._by_id[name]

    def __iter__(self) -> Iterator[Key]:
        return iter(self.rows)

    def at(self, name: str, version: str | None) -> str:
        """The key (inside the block) of row `name` in trainer `version` (None: the newest, the table's)."""
        return self._by_id[name].key_at(version).rsplit(".", 1)[-1]

    def where(self, name: str) -> str:
        """The key of row `name` as a path from the top of the file (`trl.beta`)."""
        leaf = self[name]
        return f"{self.block}.{leaf}" if self.block else leaf

    def keys(self) -> frozenset[str]:
        """Every key of the table (inside its block)."""
        return frozenset(row.leaf for row in self.rows)

    def version_of(self, name: str) -> str:
        return self._by_id[name].version or self.version


__all__ = ["Key", "KeyTable"]
