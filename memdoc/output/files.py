"""Write a set of files all at once or not at all (what `memdoc emit -o` writes).

Each file is first written in full to a temporary file next to it; only when every temporary file
exists are they moved over their targets (`os.replace`, atomic per file). If a move fails, the
files already moved are put back (a kept hard link, or a copy, of each old file) and new ones are
removed, so a failed write never leaves a half-replaced set. Files get the mode a new file gets
from the user's umask (0666 & ~umask), replaced ones included.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path

from memdoc.errors import OutputError, OutputExistsError


def _umask_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def _why(exc: OSError, path: Path) -> str:
    if exc.errno in (errno.ENOTDIR, errno.EEXIST) or isinstance(exc, (NotADirectoryError, FileExistsError)):
        parent = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
        return f"{parent} is not a directory" if parent else "a parent is not a directory"
    return exc.strerror or str(exc)


NAME_MAX = 255
"""Bytes in one file name (Linux `NAME_MAX`, limits.h); `os.pathconf` gives the file system's own where it can."""
PATH_MAX = 4096
"""Bytes in a path given to the kernel, its NUL included (Linux `PATH_MAX`, limits.h)."""
_TEMP_ROOM = 48
"""Bytes a temporary or backup name next to a file may add to its path (`_temp_prefix` + mkstemp's 8 + suffix)."""


def _short(path: Path | str, limit: int = 60) -> str:
    text = str(path)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _limit(path: Path, name: str, default: int) -> int:
    """The file system's `pathconf` limit `name` where the nearest existing parent of `path` lives."""
    for parent in path.absolute().parents:
        try:
            if parent.is_dir():
                return os.pathconf(parent, name)
        except (OSError, ValueError):
            break
    return default


def check_length(path: Path) -> None:
    """Refuse a path the kernel would refuse as too long (ENAMETOOLONG), before anything touches it: a name over
    NAME_MAX bytes, or a path (with the temporary name written next to it) over PATH_MAX (OutputError)."""
    name_max = min(NAME_MAX, _limit(path, "PC_NAME_MAX", NAME_MAX))
    for part in path.parts:
        size = len(os.fsencode(part))
        if size > name_max:
            raise OutputError(
                f"cannot write {_short(path)}: the name {_short(part, 40)} is {size:,} bytes, over the file "
                f"system's limit of {name_max}",
                hint="choose a shorter file or directory name",
            )
    size = len(os.fsencode(str(path))) + _TEMP_ROOM
    if size >= PATH_MAX:
        raise OutputError(
            f"cannot write {_short(path)}: the path is {size - _TEMP_ROOM:,} bytes, over the limit of "
            f"{PATH_MAX - _TEMP_ROOM - 1:,} (PATH_MAX, less room for the temporary file written first)",
            hint="choose a shorter path, or write from a directory nearer to it",
        )


def check_targets(paths: list[Path], *, force: bool) -> None:
    """Refuse over-long paths, directories, the same path twice, and existing files without --force (before
    anything is written)."""
    seen: set[str] = set()
    for path in paths:
        check_length(path)
        key = os.path.realpath(path)
        if key in seen:
            raise OutputError(f"two emitted files would be written to {path}")
        seen.add(key)
        try:
            if path.is_dir():
                raise OutputError(f"{path} is a directory; give a file name")
        except OSError as exc:
            raise OutputError(f"cannot write {_short(path)}: {_why(exc, path)}") from None
    try:
        existing = [str(p) for p in paths if p.exists() or p.is_symlink()]
    except OSError as exc:
        raise OutputError(f"cannot write {_short(paths[0])}: {_why(exc, paths[0])}") from None
    if existing and not force:
        raise OutputExistsError(
            f"{', '.join(existing)} already exist{'s' if len(existing) == 1 else ''}", hint="pass --force to overwrite"
        )


def write_all(files: list[tuple[Path, str | bytes]], *, force: bool) -> None:
    """Write every (path, text or bytes) or none of them; raise OutputError (one line) when a place is unwritable."""
    check_targets([path for path, _ in files], force=force)
    mode = _umask_mode()
    made_dirs: list[Path] = []
    temps: dict[Path, str] = {}
    backups: dict[Path, str] = {}
    moved: list[Path] = []
    try:
        for path, text in files:
            for parent in reversed(path.parents):
                if not parent.exists():
                    try:
                        parent.mkdir()
                    except OSError as exc:
                        raise OutputError(f"cannot write {path}: {_why(exc, path)}") from None
                    made_dirs.append(parent)
            try:
                fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=_temp_prefix(path), suffix=".tmp")
                temps[path] = tmp
                with os.fdopen(fd, "wb") as handle:
                    handle.write(text if isinstance(text, bytes) else text.encode("utf-8"))
                os.chmod(tmp, mode)
            except OSError as exc:
                raise OutputError(f"cannot write {path}: {_why(exc, path)}") from None
        for path in temps:
            if path.exists():
                try:
                    backups[path] = _backup(path)
                except OSError as exc:
                    raise OutputError(f"cannot replace {path}: {_why(exc, path)}") from None
        for path, tmp in temps.items():
            try:
                os.replace(tmp, path)
            except OSError as exc:
                raise OutputError(f"cannot write {path}: {_why(exc, path)}") from None
            moved.append(path)
    except BaseException:
        for path in moved:  # put the old set back
            if path in backups:
                os.replace(backups.pop(path), path)
            else:
                _unlink(path)
        for tmp in [*temps.values(), *backups.values()]:
            _unlink(tmp)
        for parent in reversed(made_dirs):
            try:
                parent.rmdir()
            except OSError:
                pass
        raise
    for backup in backups.values():
        _unlink(backup)


def _temp_prefix(path: Path) -> str:
    """`.NAME.` for the temporary and backup files next to `path`, the name cut so that they fit NAME_MAX."""
    return f".{path.name[:32]}."


def _backup(path: Path) -> str:
    """A second name for the old file (a hard link; a copy where links are not supported)."""
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=_temp_prefix(path), suffix=".old")
    os.close(fd)
    os.unlink(name)
    try:
        os.link(path, name)
    except OSError:
        shutil.copy2(path, name)
    return name


def _unlink(name) -> None:
    try:
        os.unlink(name)
    except FileNotFoundError:
        pass
