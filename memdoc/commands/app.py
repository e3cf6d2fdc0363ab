"""The Typer app, the `command` decorator that registers a command with error reporting, and the
error-to-exit-code mapping shared by every command. Imported by each command module; imports none."""

from __future__ import annotations

import functools
import os
import sys
import traceback

import typer

from memdoc.errors import MemdocError

app = typer.Typer(
    name="memdoc",
    help=(
        "A VRAM doctor for LLM training: the itemised memory bill of a training step, a dry-run "
        "diagnosis, prescriptions for OOMs, and trainer configs that fit.\n\n"
        "Examples:\n\n"
        "  memdoc bill meta-llama/Llama-2-7b --gpu 24\n\n"
        "  memdoc bill Qwen/Qwen2.5-14B --gpu rtx-4090 --method qlora --checkpointing full\n\n"
        "  memdoc plan meta-llama/Llama-3.1-8B --gpu rtx-4090 --global-batch 16\n\n"
        "  memdoc diagnose meta-llama/Llama-3.2-1B --batch 4\n\n"
        "  memdoc prescribe --log train.log\n\n"
        "  memdoc emit --recipe recipes/llama2-7b-lora-24gb.yaml --format trl -o sft.yaml"
    ),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def debug_enabled() -> bool:
    return os.environ.get("MEMDOC_DEBUG", "") not in ("", "0")


def report_errors(command):
    """Turn a MemdocError into `Error: …` on stderr and its exit code; other errors are bugs."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except MemdocError as exc:
            if debug_enabled():
                traceback.print_exc()
            hint = f" ({exc.hint})" if exc.hint else ""
            print(f"Error: {exc}{hint}", file=sys.stderr)
            raise typer.Exit(exc.exit_code) from None
        except (typer.Exit, typer.Abort, KeyboardInterrupt):
            raise
        except Exception as exc:  # a bug in memdoc: say so in one line unless debugging
            if debug_enabled():
                raise
            print(
                f"Error: internal error {type(exc).__name__}: {exc} (rerun with MEMDOC_DEBUG=1 for the traceback)",
                file=sys.stderr,
            )
            raise typer.Exit(1) from None

    return wrapper


def command(name: str, **kwargs):
    """Register a command with error reporting."""

    def register(fn):
        app.command(name, **kwargs)(report_errors(fn))
        return fn

    return register
