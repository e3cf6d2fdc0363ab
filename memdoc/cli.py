"""The `memdoc` command line: the list of commands and `main()`.

Commands only parse flags, call the library and render.
"""

from __future__ import annotations

import os
import sys
import threading

from memdoc.commands import bill, catalog, diagnose, emit, help, plan, prescribe
from memdoc.commands.app import add_command, app
from memdoc.render.streams import silence_stdout

add_command(bill.bill, "bill", epilog=bill.EXAMPLES)
add_command(catalog.models, "models")
add_command(catalog.gpus, "gpus")
add_command(diagnose.diagnose, "diagnose", epilog=diagnose.EXAMPLES)
add_command(emit.emit, "emit", epilog=emit.EXAMPLES)
add_command(plan.plan_command, "plan", epilog=plan.EXAMPLES)
add_command(prescribe.prescribe, "prescribe", epilog=prescribe.EXAMPLES)
add_command(help.help_topic, "help", epilog=help.EXAMPLES)


def main() -> None:
    try:
        app()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        _quiet_if_pipe_closed()
        _exit_past_leftover_threads(code)
        raise
    except BrokenPipeError:  # `memdoc … | head`: the reader left; nothing more to say (as StdoutError: exit 2)
        _quiet_if_pipe_closed()
        sys.exit(2)


def _quiet_if_pipe_closed() -> None:
    """After stdout refused output (the reader of `| head` left, a full disk, a closed fd 1), point fd 1
    at /dev/null so the interpreter's final flush does not print 'Exception ignored … BrokenPipeError'."""
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except (OSError, ValueError):
        silence_stdout()


def _exit_past_leftover_threads(code: int) -> None:
    """End the process once the command is done, even if a diagnosed script left threads running.

    `diagnose` runs the user's script in this process; a non-daemon thread it started (a data
    prefetcher, a logger) would keep the interpreter alive forever after the report.
    """
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 (a closed or broken stream: nothing left to flush)
                pass
        os._exit(code)


if __name__ == "__main__":
    main()
