"""Reading the script, its argv and sys.path, the timeout alarm, and the exception that stops it."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import traceback
from pathlib import Path

from memdoc.errors import ScriptError
from memdoc.resolve.inputs import MiB, read_text


class Stop(BaseException):
    """Raised inside the user's script to end it; never escapes `run_script`."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


MAX_SCRIPT_BYTES = 16 * MiB
"""A training script is a few hundred KiB at most; a larger file is not one (and is not compiled)."""


def check_script(path: Path) -> str:
    """The script's source, or ScriptError (exit 2) when it is not a regular file (a FIFO would block the run
    forever: `resolve.inputs.open_regular`), cannot be read or compiled. A UTF-8 byte-order mark is dropped, as
    Python drops it when it runs the file (`tokenize.detect_encoding`, PEP 263)."""
    source = read_text(path, what="script", limit=MAX_SCRIPT_BYTES, error=ScriptError)
    try:
        compile(source, str(path), "exec")
    except SyntaxError as exc:
        where = f"{path}:{exc.lineno}" if exc.lineno else str(path)
        raise ScriptError(
            f"{where}: {type(exc).__name__}: {exc.msg}", hint="the script does not compile; fix it and rerun"
        ) from None
    except ValueError as exc:  # null bytes
        raise ScriptError(f"cannot compile {path}: {exc}") from None
    return source


def filtered_traceback(exc: BaseException, script: Path) -> str:
    """The user's traceback, keeping frames of files next to the script (their code)."""
    root = str(script.resolve().parent)
    memdoc_dir = str(Path(__file__).resolve().parents[2])
    frames = traceback.extract_tb(exc.__traceback__)

    def mine(f) -> bool:
        name = os.path.abspath(f.filename)
        return name.startswith(root + os.sep) and not name.startswith(memdoc_dir) and "site-packages" not in name

    keep = [f for f in frames if mine(f)]
    hidden = len(frames) - len(keep)
    if not keep:
        keep = [f for f in frames if not f.filename.startswith(memdoc_dir)][-3:]
    lines = ["Traceback (most recent call last, your frames only):\n"]
    lines += traceback.format_list(keep)
    if hidden and frames and frames[-1] not in keep:
        last = frames[-1]
        lines.append(f"  … ({hidden} library frames hidden; raised in {last.filename}:{last.lineno} in {last.name})\n")
    lines += traceback.format_exception_only(type(exc), exc)
    return "".join(lines)


@contextlib.contextmanager
def alarm(seconds: float | None):
    """SIGALRM → Stop('timeout') for scripts stuck outside torch ops (main thread only)."""
    if not seconds or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def handler(signum, frame):
        raise Stop("timeout")

    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@contextlib.contextmanager
def script_env(path: Path, args: list[str], stdout_to_stderr: bool):
    old_argv, old_path0 = sys.argv[:], sys.path[0] if sys.path else None
    sys.argv = [str(path), *args]
    sys.path.insert(0, str(path.resolve().parent))
    redirect = contextlib.redirect_stdout(sys.stderr) if stdout_to_stderr else contextlib.nullcontext()
    try:
        with redirect:
            yield
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        sys.argv = old_argv
        if sys.path and sys.path[0] == str(path.resolve().parent):
            sys.path.pop(0)
        elif old_path0 is not None and old_path0 not in sys.path:  # pragma: no cover
            sys.path.insert(0, old_path0)


def is_script_target(target: str) -> bool:
    """TARGET is a script (not a model): ends with .py, or is an existing file that is not JSON config."""
    if target.endswith(".py"):
        return True
    p = Path(target).expanduser()
    try:
        return p.is_file() and p.suffix != ".json"
    except OSError:  # a name no file can have (over NAME_MAX/PATH_MAX): not a script; the model lookup says why
        return False
