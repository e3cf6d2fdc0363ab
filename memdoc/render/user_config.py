"""The note on stderr of what the user's config files said: the files read, the stack whose defaults filled
what they leave out, and every key not billed."""

from __future__ import annotations

from memdoc.core.model.stack import LATEST_KNOWN, LATEST_KNOWN_DATE, Stack
from memdoc.core.user_config.reading import ConfigReading
from memdoc.render.common import note


def render_config_notes(reading: ConfigReading | None, stack: Stack | None = None) -> None:
    """'config: read FILE (format), …', the stack line (`stack_line`), and one 'not billed: file:key — reason'
    line per key."""
    if reading is not None:
        files = list(dict.fromkeys(k.file for k in reading.read))
        formats = ", ".join(reading.formats)
        note(f"config: read {', '.join(files) or 'no billed keys'} ({formats})")
    if stack is not None:
        note(stack_line(stack))
        newer = stack.newer_than_known()
        if newer:
            known = ", ".join(f"{name} {version} as {LATEST_KNOWN[name].version}" for name, version in newer.items())
            note(f"note: newer than memdoc knows ({LATEST_KNOWN_DATE}), billed as the latest known: {known}")
    for item in reading.not_billed if reading is not None else ():
        note(f"not billed: {item.file}:{item.key} — {item.reason}")


def stack_line(stack: Stack) -> str:
    """'stack: transformers 5.24.0, trl 1.16.0, … (installed); assumed at memdoc's latest known: axolotl 0.21.0'
    — the versions found (installed, or given with --stack), then those memdoc assumed."""
    found = [f"{name} {version}" for name, version in stack.versions.items() if name not in stack.assumed]
    assumed = [f"{name} {stack.versions[name]}" for name in stack.assumed if name in stack.versions]
    line = f"stack: {', '.join(found) or 'no library versions found'} ({stack.source})"
    return line + (f"; assumed at memdoc's latest known: {', '.join(assumed)}" if assumed else "")
