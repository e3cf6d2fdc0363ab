"""The software stack a training run uses: the versions of the libraries whose defaults change memory.

A key absent from a user's config takes the default of the trainer version that will run it
(transformers' `optim`, TRL's loss path and lengths, transformers' MoE expert layout, …). `Stack`
holds those versions; `memdoc.resolve.stack` reads the installed ones or parses `--stack`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from memdoc.errors import PlanError


def parse_version(text: str) -> tuple[int, ...]:
    """'4.57.1' -> (4, 57, 1); pre-release and local tails ('5.0.0rc1', '2.13.0+cpu') are cut at the first
    non-digit of each part."""
    parts = []
    for piece in text.strip().split("+")[0].split("."):
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        parts.append(int(digits))
    if not parts:
        raise PlanError(f"cannot read a version from {text!r}")
    return tuple(parts)


@dataclass(frozen=True)
class Stack:
    """Library versions (distribution name -> version text) and where they came from."""

    versions: dict[str, str] = field(default_factory=dict)
    """e.g. {"transformers": "5.24.0", "trl": "1.16.0"}; a library absent here is unknown."""
    source: str = "memdoc's latest known versions"
    """How the versions were found: 'installed', '--stack', or memdoc's latest known versions."""

    def version(self, package: str) -> tuple[int, ...] | None:
        text = self.versions.get(package)
        return parse_version(text) if text else None

    def at_least(self, package: str, version: str) -> bool:
        """Is `package` known and at `version` or newer?"""
        have = self.version(package)
        return have is not None and have >= parse_version(version)

    def to_json(self) -> dict:
        return {"versions": dict(self.versions), "source": self.source}
