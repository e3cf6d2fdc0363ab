"""Read a training log for `memdoc prescribe --log` (a file, or `-` for stdin)."""

from __future__ import annotations

import sys
from pathlib import Path

from memdoc.errors import ConfigError


def read_log(log: str) -> str:
    """The log's text whatever its bytes (logs mix encodings; undecodable bytes become �); `-` reads stdin."""
    try:
        return _read_stdin() if log == "-" else Path(log).read_text(encoding="utf-8", errors="replace")
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read log {log}: {exc.strerror or exc}") from None


def _read_stdin() -> str:
    """stdin as text whatever its bytes or the locale's encoding."""
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is None:
        return sys.stdin.read()
    return buffer.read().decode("utf-8", errors="replace")
