"""`memdoc help TOPIC`: what every command's --help only summarises, in full.

A command's help panel (an option's `rich_help_panel`) with more than `SUMMARY_MAX` options is too long
to repeat under every command: `memdoc.commands.help_panels.MemdocCommand` shows it as one line of option names
that points here, and `memdoc help plan-flags` prints each of those options once, with its help and
default, grouped by panel. New options fall into place by their panel alone.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from memdoc.commands.help_panels import SUMMARISED_PANELS, SUMMARY_MAX, TOPIC, summarised_panels

EXAMPLES = """
Examples:

  memdoc help plan-flags

  COLUMNS=80 memdoc help plan-flags | less
"""

TOPICS = {TOPIC: "every plan flag in full (model, GPUs, method, batch, sharding, offload, the whole run, …)"}
"""Each topic and what it shows."""

TopicArg = Annotated[
    Optional[str],
    typer.Argument(metavar="TOPIC", help=f"What to show: {', '.join(TOPICS)}.", show_default=False),
]


def help_topic(topic: TopicArg = None) -> None:
    """Show help on a topic: `plan-flags` prints every plan flag once, in full, grouped by panel (each
    command's --help lists their names only)."""
    from memdoc import render
    from memdoc.errors import MemdocError, did_you_mean, quoted

    if topic is None:
        for name, what in TOPICS.items():
            render.paragraph(f"{name}: {what} (memdoc help {name})", indent="", hang="  ")
        return
    if topic not in TOPICS:
        raise MemdocError(
            f"no help topic {quoted(topic)}{did_you_mean(topic, TOPICS)}", hint="topics: " + ", ".join(TOPICS)
        )
    for panel, records in plan_flag_records().items():
        render.title(panel)
        for opts, text in records:
            render.paragraph(opts, indent="  ", hang="    ")
            render.paragraph(text, indent="      ", hang="      ")


def plan_flag_records() -> dict[str, list[tuple[str, str]]]:
    """{panel: [(the option's names and metavar, its help with the default)]} of every panel some command
    summarises (more than SUMMARY_MAX options), from Click's own help records of the commands."""
    from typer.main import get_command

    from memdoc.commands.app import app

    group = get_command(app)
    ctx = group.make_context("memdoc", [], resilient_parsing=True)
    panels: dict[str, dict[str, tuple[str, str]]] = {}
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        sub = type(ctx)(command, info_name=name, parent=ctx)
        for panel, params in summarised_panels(command).items():
            for param in params:
                record = param.get_help_record(sub)
                if record and param.name not in panels.setdefault(panel, {}):
                    panels[panel][param.name] = (record[0], record[1].replace("\\[", "["))
    assert all(len(records) > SUMMARY_MAX or panel in SUMMARISED_PANELS for panel, records in panels.items())
    return {panel: list(records.values()) for panel, records in panels.items()}
