"""How a command's --help is drawn: its docstring reflowed to the terminal, and each long help panel summarised
as one line of option names pointing to `memdoc help plan-flags` (`memdoc.commands.help` shows them in full)."""

from __future__ import annotations

from typer.core import TyperCommand

from memdoc.commands.plan_flags_vision import VISION


def reflow(doc: str) -> str:
    """A docstring's paragraphs as single lines (Rich keeps a docstring's line breaks, so at 80 columns
    every source line would wrap again and leave ragged half-lines)."""
    return "\n\n".join(" ".join(paragraph.split()) for paragraph in doc.split("\n\n") if paragraph.strip())


SUMMARY_MAX = 6
"""A help panel with more options than this is summarised in a command's --help (one line of names)."""
SUMMARISED_PANELS = frozenset({VISION})
"""Panels summarised whatever their size: plan flags that most runs leave alone (the vision-language ones)."""
TOPIC = "plan-flags"
"""The `memdoc help` topic that shows the summarised panels in full."""


def summarised_panels(command) -> dict[str, list]:
    """{panel: its options} for each of `command`'s help panels (`rich_help_panel`) of more than SUMMARY_MAX options,
    and the `SUMMARISED_PANELS`."""
    panels: dict[str, list] = {}
    for param in command.params:
        panel = getattr(param, "rich_help_panel", None)
        if panel and not getattr(param, "hidden", False):
            panels.setdefault(panel, []).append(param)
    return {
        panel: params for panel, params in panels.items() if len(params) > SUMMARY_MAX or panel in SUMMARISED_PANELS
    }


class MemdocCommand(TyperCommand):
    """A command whose --help shows each long panel as one line of option names, pointing to
    `memdoc help plan-flags` (`memdoc.commands.help`), instead of repeating ~100 lines under every command."""

    def format_help(self, ctx, formatter) -> None:
        panels = summarised_panels(self)
        epilog = self.epilog
        lines = [
            f"{panel}: {' '.join(p.opts[0] for p in params)} (in full: memdoc help {TOPIC})"
            for panel, params in panels.items()
        ]
        hidden = [p for params in panels.values() for p in params]
        try:
            for param in hidden:
                param.hidden = True
            self.epilog = "\n\n".join([*lines, *([epilog] if epilog else [])]) or None
            return super().format_help(ctx, formatter)
        finally:
            for param in hidden:
                param.hidden = False
            self.epilog = epilog
