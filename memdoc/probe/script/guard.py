"""What keeps a script run answerable whatever the script does to the process.

The script runs in memdoc's own process, so it can end or wedge that process in ways an
exception handler never sees. Each is turned into a report:

* `os._exit(n)` would end the process before the report: it is patched, for the run, to stop
  the script like `sys.exit(n)` (the report is printed, then memdoc exits with n);
* a forked child (`os.fork()`, fork-started DataLoader workers) returns into memdoc when its copy
  of the script ends: it leaves silently with its own status, so one report is printed, by the
  parent (`leave_if_child`);
* a script that swallows memdoc's stop (`except BaseException`) or ignores SIGALRM would defeat
  `--timeout`: a watchdog thread, armed for the timeout plus a grace (`GRACE_S`, or 10% of the
  timeout), writes the report from what was measured and ends the process (`watchdog`);
* a script that closes or replaces `sys.stdout` / `sys.stderr`, or closes or redirects the file
  descriptors 1 and 2 themselves (`os.close(1)`, `os.dup2(…, 1)`), gets them back for the report
  (`restore_stdio`);
* a SIGTERM from outside (a scheduler, `timeout`, `docker stop`) stops the script like `--timeout`
  does, with `stop_reason` "terminated", and memdoc exits `TERMINATED_EXIT` (128 + 15, the shell's
  status for a process SIGTERM ended) after the report (`terminate_as_stop`); a script that swallows
  that stop is reported by the same watchdog, `GRACE_S` later.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import sys
import threading

from memdoc.probe.script.sandbox import Stop

GRACE_S = 2.0
"""Seconds past --timeout the watchdog waits at least for the ordinary stop (SIGALRM, the op-level
deadline check) before it reports and ends the process itself; longer timeouts wait 10% of the
timeout, so one long tensor op that delays the ordinary stop is not mistaken for a stuck script."""

TERMINATED_EXIT = 128 + signal.SIGTERM
"""memdoc's status after a SIGTERM stopped the script (143: what a shell reports for a process SIGTERM ended)."""

_real_exit = os._exit


class ScriptExit(Stop):
    """`os._exit(code)` inside the script, turned into a stop that keeps the report."""

    def __init__(self, code: int):
        super().__init__("exit")
        self.code = code


@contextlib.contextmanager
def exit_as_stop():
    """Patch `os._exit` in this process (not in forked children) to raise `ScriptExit`."""
    parent = os.getpid()

    def _exit(code: int = 0):
        if os.getpid() != parent:
            _real_exit(code)
        raise ScriptExit(code if isinstance(code, int) else 1)

    os._exit = _exit
    try:
        yield
    finally:
        os._exit = _real_exit


def leave_if_child(parent: int, code: int | None) -> None:
    """In a forked copy of memdoc (the script forked and its child returned here), exit quietly."""
    if os.getpid() != parent:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        _real_exit(code or 0)


@contextlib.contextmanager
def restore_stdio():
    """Give memdoc back the stdout/stderr it had: the file descriptors 1 and 2 as they were (copies are kept
    during the run), and the Python streams, reopened from the descriptor if the script closed them."""
    saved = sys.stdout, sys.stderr
    fds = {fd: _dup(fd) for fd in (1, 2)}
    try:
        yield
    finally:
        for fd, copy in fds.items():
            if copy is not None:
                with contextlib.suppress(OSError):
                    os.dup2(copy, fd)
                os.close(copy)
        sys.stdout, sys.stderr = (_reopened(stream, fd) for stream, fd in zip(saved, (1, 2)))


def _dup(fd: int) -> int | None:
    """A copy of descriptor `fd`, or None when it is already closed."""
    try:
        return os.dup(fd)
    except OSError:
        return None


def _reopened(stream, fd: int):
    if not getattr(stream, "closed", False):
        return stream
    try:
        return io.TextIOWrapper(io.FileIO(os.dup(fd), "w"), encoding="utf-8", errors="replace", line_buffering=True)
    except OSError:  # the descriptor itself is gone: write nowhere rather than fail
        return io.TextIOWrapper(io.FileIO(os.devnull, "w"), encoding="utf-8")


@contextlib.contextmanager
def terminate_as_stop(stop, on_stuck):
    """During the block, SIGTERM raises `stop()` in the main thread (the script stops, memdoc reports); should the
    script swallow it, `on_stuck()` runs from a thread `GRACE_S` later. Outside the main thread: nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    stopped = threading.Event()

    def handler(signum, frame):
        if on_stuck is not None and not stopped.is_set():
            threading.Thread(target=lambda: stopped.wait(GRACE_S) or on_stuck(), daemon=True).start()
        raise stop()

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        stopped.set()
        signal.signal(signal.SIGTERM, old)


@contextlib.contextmanager
def watchdog(timeout: float | None, on_stuck):
    """Call `on_stuck()` in a daemon thread if the block is still running `GRACE_S` after `timeout`.

    `on_stuck` reports and ends the process (it must not return into the script). Leaving the
    block disarms the watchdog.
    """
    if not timeout or on_stuck is None:
        yield
        return
    done = threading.Event()

    def watch():
        if not done.wait(timeout + max(GRACE_S, 0.1 * timeout)):
            on_stuck()

    thread = threading.Thread(target=watch, name="memdoc-watchdog", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()


def end_process(code: int) -> None:
    """Flush and end the process now, whatever threads the script left (see `memdoc.cli.main`)."""
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    _real_exit(code)
