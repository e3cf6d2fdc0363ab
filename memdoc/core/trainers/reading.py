"""What a config file says about the plan: the contract every format reader returns.

A reader maps one parsed document (`SourceDoc`) to a `ConfigReading`: the model id, plan values
(`TrainingPlan` field names, as `parse_plan` takes them), the keys it read, the memory-relevant keys it
could not bill (with the reason), and the files the document points at (a trainer YAML's `deepspeed:`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memdoc.errors import ConfigError


@dataclass(frozen=True)
class SourceDoc:
    """One parsed config file."""

    path: str
    """The file as the user named it (or as a referencing file resolved it)."""
    data: dict
    """The parsed top-level mapping."""
    lines: dict[str, int] = field(default_factory=dict)
    """Top-level key -> 1-based line number in the file (empty for formats without line information)."""

    def where(self, key: str) -> str:
        line = self.lines.get(key)
        return f"{self.path}:{line}" if line else self.path

    def error(self, key: str, message: str) -> ConfigError:
        """A one-line error naming the file, the line and the key."""
        return ConfigError(f"{self.where(key)}: {key}: {message}")


@dataclass(frozen=True)
class KeyRead:
    """A key that set something memdoc bills."""

    file: str
    key: str
    field: str
    """The plan field it set ('model' for the model id)."""


@dataclass(frozen=True)
class NotBilled:
    """A key that changes memory but that memdoc does not bill, and why."""

    file: str
    key: str
    reason: str


@dataclass
class ConfigReading:
    """What one or more config files say (later files and then flags override earlier values)."""

    model: str | None = None
    plan: dict[str, Any] = field(default_factory=dict)
    """`TrainingPlan` field -> value (enum values as text, as `parse_plan` takes them)."""
    read: list[KeyRead] = field(default_factory=list)
    not_billed: list[NotBilled] = field(default_factory=list)
    referenced: list[str] = field(default_factory=list)
    """Paths of files this document points at, resolved relative to it (to be read next)."""
    formats: list[str] = field(default_factory=list)
    """The format of each file read ('axolotl', 'llamafactory', 'trainer-args', 'deepspeed', 'accelerate')."""

    def set(self, doc: SourceDoc, key: str, plan_field: str, value: Any) -> None:
        """Record that `key` of `doc` sets `plan_field` to `value`."""
        self.plan[plan_field] = value
        self.read.append(KeyRead(doc.path, key, plan_field))

    def skip(self, doc: SourceDoc, key: str, reason: str) -> None:
        """Record a memory-relevant key that is not billed."""
        self.not_billed.append(NotBilled(doc.path, key, reason))

    def merge(self, later: ConfigReading) -> ConfigReading:
        """This reading overridden by a later one (a later file, a referenced file)."""
        return ConfigReading(
            model=later.model or self.model,
            plan={**self.plan, **later.plan},
            read=self.read + later.read,
            not_billed=self.not_billed + later.not_billed,
            referenced=self.referenced + later.referenced,
            formats=self.formats + later.formats,
        )

    def to_json(self) -> dict:
        return {
            "formats": list(self.formats),
            "model": self.model,
            "plan": dict(self.plan),
            "read": [{"file": k.file, "key": k.key, "field": k.field} for k in self.read],
            "not_billed": [{"file": n.file, "key": n.key, "reason": n.reason} for n in self.not_billed],
        }
