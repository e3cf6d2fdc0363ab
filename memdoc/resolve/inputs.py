"""Every file memdoc reads on the user's behalf (`--log`, `--recipe`, `--config`, `--dataset`, the script of
`diagnose`, a model's config.json) is opened here: once, checked to be a regular file, read with a size bound,
and decoded the one way.

- `open_regular` opens without blocking (`O_NONBLOCK`: a FIFO with no writer would otherwise block the `open`
  itself) and refuses anything but a regular file — a FIFO, a directory, `/dev/zero`, a socket — in one line;
  a file the user may not read (mode 000) is the OS's "Permission denied", in one line.
- `read_bytes` reads at most `limit` bytes and refuses a longer file rather than reading it.
- `decode` takes UTF-8 with or without a byte-order mark (Notepad writes one) and UTF-16 with its mark, or
  without one when the text is plainly UTF-16 (every other byte NUL): what PowerShell's `>` and `Out-File`
  write on Windows PowerShell 5.1.

    text = read_text(Path("sft.yaml"), what="config", limit=4 * MiB, error=ConfigError)
"""

from __future__ import annotations

import codecs
import os
import stat
from pathlib import Path
from typing import BinaryIO

from memdoc.errors import ConfigError, MemdocError, quoted

MiB = 1024 * 1024

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def shown(path: Path | str) -> str:
    """A path as an error line shows it: whole when short, else cut (an error line stays one readable line)."""
    text = str(path)
    return text if len(text) <= 120 and text.isprintable() else quoted(text, 120)


def open_regular(path: Path | str, *, what: str, error: type[MemdocError] = ConfigError) -> BinaryIO:
    """`path` opened for binary reading, or `error` (one line) when it is not a regular file or cannot be
    opened. The open never blocks: `O_NONBLOCK` makes opening a FIFO return at once (POSIX `open(2)`), and
    the file type is checked on the open descriptor (`fstat`), so what is checked is what is read."""
    name = shown(path)
    try:
        fd = os.open(os.fspath(path), os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise error(f"{what} {name} does not exist") from None
    except (OSError, ValueError) as exc:
        raise error(f"cannot read {what} {name}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        kind = next((label for test, label in _KINDS if test(mode)), None if stat.S_ISREG(mode) else "not a file")
        if kind is not None:
            raise error(f"{what} {name} is {kind}, not a regular file")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: Path | str, *, what: str, limit: int, error: type[MemdocError] = ConfigError) -> bytes:
    """The bytes of a regular file of at most `limit` bytes (`error` for anything else, one line)."""
    with open_regular(path, what=what, error=error) as fh:
        try:
            raw = fh.read(limit + 1)
        except OSError as exc:
            raise error(f"cannot read {what} {shown(path)}: {exc.strerror or exc}") from None
    if len(raw) > limit:
        raise error(f"{what} {shown(path)} is larger than {size_text(limit)}; it cannot be a {what}")
    return raw


def size_text(n: int) -> str:
    """1048576 -> '1 MiB' (the bounds are whole KiB, MiB or GiB)."""
    for unit, size in (("GiB", 1024**3), ("MiB", MiB), ("KiB", 1024)):
        if n >= size:
            return f"{n / size:g} {unit}"
    return f"{n} bytes"


def text_encoding(head: bytes) -> str:
    """The codec of a text that starts with `head`: 'utf-16-le'/'utf-16-be' (the mark dropped by `decode`)
    when its first characters are UTF-16 code units of ASCII text, with or without a byte-order mark (a NUL
    in at least half of their high bytes: what PowerShell's `>` writes for a log), else 'utf-8-sig' (UTF-8
    with or without its mark; Python's codec drops the mark). A UTF-16 mark before bytes that are not UTF-16
    (binary junk) leaves the text UTF-8, with the junk undecodable."""
    for codec, mark, high in (("utf-16-le", codecs.BOM_UTF16_LE, 1), ("utf-16-be", codecs.BOM_UTF16_BE, 0)):
        body = head[len(mark) :] if head.startswith(mark) else head
        units = len(body) // 2
        if (
            units >= 2
            and body[high : 2 * units : 2].count(0) * 2 >= units
            and body[1 - high : 2 * units : 2].count(0) == 0
        ):
            return codec
    return "utf-8-sig"


def decode(raw: bytes, *, what: str, path: Path | str, error: type[MemdocError] = ConfigError) -> str:
    """`raw` as text (`text_encoding`); bytes that are not text in that encoding are `error`, naming the offset."""
    codec = text_encoding(raw[:64])
    try:
        return raw.decode(codec).removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        label = "UTF-16" if codec.startswith("utf-16") else "UTF-8"
        raise error(
            f"{what} {shown(path)} is not {label} text (byte {exc.start}: {raw[exc.start : exc.start + 1]!r})"
        ) from None


def read_text(path: Path | str, *, what: str, limit: int, error: type[MemdocError] = ConfigError) -> str:
    """A regular text file of at most `limit` bytes, decoded (`read_bytes`, `decode`)."""
    return decode(read_bytes(path, what=what, limit=limit, error=error), what=what, path=path, error=error)
