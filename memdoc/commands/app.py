"""The Typer app, `add_command` (registers a command with error reporting and its --help drawn by
`help_panels.MemdocCommand`; `memdoc.cli` lists them), and the error-to-exit-code mapping shared by every command."""

from __future__ import annotations

import functools
import inspect
import os
import re
import shlex
import sys
import traceback

import typer
from typer.core import TyperGroup

from memdoc.commands.help_panels import MemdocCommand, reflow
from memdoc.errors import MemdocError, clip_inputs, did_you_mean
from memdoc.render.streams import StdoutError, error_line, guarded_streams, silence_stdout

# Typer ≥ 0.23 vendors Click (typer._click); take its exception classes from the public BadParameter.
_click_exceptions = sys.modules[typer.BadParameter.__module__]

INVOCATION: list[str] = []
"""The arguments of the running command (what `--html` pages print as the command that made them)."""


def invocation() -> str:
    """The running command as a shell line: `memdoc` and its arguments, each quoted where needed."""
    return shlex.join(["memdoc", *INVOCATION])


class MemdocGroup(TyperGroup):
    """Typer's group with usage errors as one line, `Error: … (did you mean lora?)`, exit 2.

    Typer draws usage errors as a multi-line box; memdoc's errors are one line everywhere, and a
    bad choice names the closest valid one. The run is inside `guarded_streams`: any output encoding,
    and a refused stdout is one line and exit 2 (`memdoc.render.streams`).
    """

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        INVOCATION[:] = [str(a) for a in (sys.argv[1:] if args is None else args)]
        with guarded_streams():
            code = self._run(args=args, prog_name=prog_name, complete_var=complete_var, **extra)
        code = code if isinstance(code, int) else 0
        if standalone_mode:
            sys.exit(code)
        return code

    def _run(self, **kwargs):
        try:
            try:
                code = super().main(standalone_mode=False, **kwargs)
            except _click_exceptions.NoArgsIsHelpError as exc:
                typer.echo(exc.ctx.get_help() if exc.ctx else "", nl=False)
                code = 2
            sys.stdout.flush()  # what is still buffered is refused here, not in the interpreter's last flush
        except _click_exceptions.ClickException as exc:
            error_line(usage_error_line(exc))
            code = 2  # bad input, as docs/output.md's table says (a bare ClickException carries 1)
        except typer.Abort:
            error_line("Error: aborted")
            code = 130
        except StdoutError as exc:
            code = stdout_failed(exc)
        return code


def stdout_failed(exc: StdoutError) -> int:
    """Say once that stdout refused the output (not when the reader of a pipe left), and stop writing to it."""
    if not exc.quiet:
        error_line(f"Error: {exc} ({exc.hint})")
    silence_stdout()
    return exc.exit_code


def usage_error_line(exc) -> str:
    """One line for a Click usage error, with the closest choice, command or option when there is one."""
    message = " ".join(exc.format_message().replace("Value error, ", "").split())
    hint = ""
    bad_choice = re.search(r"'([^']*)' is not one of ((?:'[^']*'(?:, )?)+)", message)
    if bad_choice:
        choices = re.findall(r"'([^']*)'", bad_choice.group(2))
        hint = did_you_mean(bad_choice.group(1).lower(), choices, cutoff=0.5)
    ctx = getattr(exc, "ctx", None)
    if not hint and ctx is not None and ctx.command_path:
        hint = f" (see {ctx.command_path} --help)"
    return clip_inputs(f"Error: {message.rstrip('.')}{hint}")


app = typer.Typer(
    cls=MemdocGroup,
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
        except StdoutError as exc:
            raise typer.Exit(stdout_failed(exc)) from None
        except MemdocError as exc:
            if debug_enabled():
                traceback.print_exc()
            hint = f" ({exc.hint})" if exc.hint else ""
            error_line(clip_inputs(f"Error: {exc}{hint}"))
            raise typer.Exit(exc.exit_code) from None
        except (typer.Exit, typer.Abort, KeyboardInterrupt):
            raise
        except Exception as exc:  # a bug in memdoc: say so in one line unless debugging
            if debug_enabled():
                raise
            text = " ".join(str(exc).split())
            text = text if len(text) <= 300 else text[:299] + "…"
            error_line(
                f"Error: internal error {type(exc).__name__}: {text} (rerun with MEMDOC_DEBUG=1 for the traceback)"
            )
            raise typer.Exit(1) from None

    return wrapper


def add_command(fn, name: str, **kwargs) -> None:
    """Register `fn` as command `name` with error reporting; its docstring is the help, reflowed to the terminal."""
    kwargs.setdefault("help", reflow(inspect.getdoc(fn) or ""))
    kwargs.setdefault("cls", MemdocCommand)
    app.command(name, **kwargs)(report_errors(fn))
