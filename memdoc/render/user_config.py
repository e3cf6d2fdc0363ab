"""The note on stderr of what the user's config files said: the files read and every key not billed."""

from __future__ import annotations

from memdoc.core.user_config.reading import ConfigReading
from memdoc.render.common import note


def render_config_notes(reading: ConfigReading | None) -> None:
    """'config: read FILE (format), …' and one 'not billed: file:key — reason' line per key."""
    if reading is None:
        return
    files = list(dict.fromkeys(k.file for k in reading.read))
    formats = ", ".join(reading.formats)
    note(f"config: read {', '.join(files) or 'no billed keys'} ({formats})")
    for item in reading.not_billed:
        note(f"not billed: {item.file}:{item.key} — {item.reason}")
