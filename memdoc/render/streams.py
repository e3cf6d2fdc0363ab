"""Output that survives any terminal: any encoding, a full disk, a closed stdout or stderr.

`guarded_streams()` wraps one command's run. Inside it:

* characters the output encoding cannot hold (`PYTHONIOENCODING=ascii`, cp1252 on a redirected Windows
  stdout) are written as ASCII look-alikes (`—` as `-`, `✔` as `+`), else `?`, never a
  `UnicodeEncodeError` (Python's `codecs.register_error`; Rich draws its boxes in ASCII by itself when
  the encoding is not UTF, `rich/console.py` `ConsoleOptions.ascii_only`);
* a write to stdout that the system refuses (`> /dev/full`: ENOSPC; fd 1 closed: EBADF) raises
  `StdoutError`, an `OutputError`: one line on stderr and exit 2; when the reader of a pipe left
  (`| head`, EPIPE) it is `quiet` and nothing is said;
* a closed stderr (`2>&-`) swallows what would be written there (an error line has nowhere to go).
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import os
import sys

from memdoc.errors import OutputError

ASCII_LOOKALIKES = {
    "—": "-",
    "–": "-",
    "−": "-",
    "·": ".",
    "×": "x",
    "…": ".",
    "≈": "~",
    "≤": "<",
    "≥": ">",
    "±": "~",
    "→": ">",
    "←": "<",
    "✔": "+",
    "✘": "x",
    "✗": "x",
    "■": "#",
    "◀": "<",
    "▶": ">",
    "Δ": "d",
    "¹": "1",
    "ᵖ": "p",
    "█": "#",
    "▏": "|",
    "│": "|",
    "┃": "|",
    "─": "-",
    "━": "=",
    "•": "*",
    "‘": "'",
    "’": "'",
    "“": '"',
    "”": '"',
    "³": "3",
    "²": "2",
    "µ": "u",
    "\u00a0": " ",
}
"""What a character the output encoding lacks is written as, one character for one (Rich has laid the table out
by then: a longer stand-in would push a full row past COLUMNS); any other becomes `?`."""

ERRORS = "memdoc-ascii"
"""The codec error handler's name (`codecs.register_error`)."""


def _replace(exc: UnicodeError):
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    text = "".join(ASCII_LOOKALIKES.get(ch, "?") for ch in exc.object[exc.start : exc.end])
    return text, exc.end


codecs.register_error(ERRORS, _replace)


class StdoutError(OutputError):
    """stdout refused a write: the disk is full, fd 1 is closed, or the reader of the pipe left (`quiet`)."""

    def __init__(self, exc: OSError):
        self.quiet = isinstance(exc, BrokenPipeError) or exc.errno == errno.EPIPE
        reason = exc.strerror or str(exc)
        super().__init__(
            f"cannot write the output to stdout: {reason}",
            hint="redirect stdout to a writable file",
        )


class _Guarded:
    """A text stream whose refused writes raise `StdoutError` (or, for stderr, are dropped)."""

    def __init__(self, stream, *, drop: bool):
        self._stream = stream
        self._drop = drop

    def _call(self, method, *args):
        if self._stream is None:
            if self._drop:
                return 0
            raise StdoutError(OSError(errno.EBADF, "stdout is closed"))
        try:
            return getattr(self._stream, method)(*args)
        except ValueError:  # a stream closed in Python (sys.stdout.close()): as the closed descriptor
            if self._drop:
                return 0
            raise StdoutError(OSError(errno.EBADF, "stdout is closed")) from None
        except OSError as exc:
            if self._drop:
                return 0
            raise StdoutError(exc) from None

    def write(self, text: str):
        return self._call("write", text)

    def flush(self):
        return self._call("flush")

    def isatty(self) -> bool:
        try:
            return bool(self._stream is not None and self._stream.isatty())
        except (OSError, ValueError):
            return False

    @property
    def encoding(self) -> str:
        return getattr(self._stream, "encoding", None) or "utf-8"

    def __getattr__(self, name):
        if self._stream is None:
            raise AttributeError(name)
        return getattr(self._stream, name)


def _tolerant(stream):
    """The stream with the ASCII look-alike error handler, where it is a reconfigurable text stream."""
    try:
        stream.reconfigure(errors=ERRORS)
    except (AttributeError, OSError, ValueError):
        pass
    return stream


@contextlib.contextmanager
def guarded_streams():
    """Run a command with stdout and stderr guarded (see the module); the originals come back afterwards."""
    out, err = sys.stdout, sys.stderr
    if isinstance(out, _Guarded) or isinstance(err, _Guarded):  # already inside (a command calling another)
        yield
        return
    for stream in (out, err):
        if stream is not None:
            _tolerant(stream)
    sys.stdout, sys.stderr = _Guarded(out, drop=False), _Guarded(err, drop=True)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err


def silence_stdout() -> None:
    """Point fd 1 at /dev/null and drop what is buffered, so the interpreter's last flush finds nothing
    to fail on (no 'Exception ignored … BrokenPipeError' after `| head`, nothing after a full disk)."""
    if isinstance(sys.stdout, _Guarded):
        sys.stdout._drop = True  # said once: what the command still writes goes nowhere
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.close(null)
    except OSError:
        return
    stream = sys.stdout._stream if isinstance(sys.stdout, _Guarded) else sys.stdout
    if stream is not None:
        with contextlib.suppress(OSError, ValueError):
            stream.flush()


def error_line(text: str) -> None:
    """One line on stderr, or nothing when stderr is gone too."""
    stream = sys.stderr
    if stream is None:
        return
    with contextlib.suppress(OSError, ValueError):
        stream.write(text + "\n")
        stream.flush()
