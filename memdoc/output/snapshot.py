"""Where `memdoc diagnose SCRIPT --snapshot FILE` writes: the CUDA snapshot pickle and its HTML timeline, checked
before the script runs and written all or none (`memdoc.output.files.write_all`)."""

from __future__ import annotations

import os
from pathlib import Path

from memdoc.core.trainers.text import check_fill_in
from memdoc.errors import OutputError
from memdoc.output.files import check_length, check_targets, write_all


def snapshot_paths(raw: str) -> tuple[Path, Path]:
    """--snapshot FILE as typed → (the pickle's path, the HTML page's path): FILE and FILE.html, or for a FILE
    ending in .html, FILE with .pickle for .html and FILE (the pickle never over the page). Refused (one line):
    an empty value, control characters, a directory (an existing one in `check_targets`), a name or path longer
    than the kernel takes."""
    check_fill_in("--snapshot", raw, if_left_out="no snapshot")
    path = Path(raw)
    check_length(path)
    if raw.endswith(os.sep) or (os.altsep and raw.endswith(os.altsep)):
        raise OutputError(f"--snapshot {raw} is a directory", hint=f"give a file name, such as {path / 'mem.pickle'}")
    if path.suffix == ".html":
        return path.with_suffix(".pickle"), path
    html = path.with_name(path.name + ".html")
    check_length(html)
    return path, html


def check_snapshot(raw: str, *, force: bool) -> None:
    """Before the script runs: refuse a --snapshot whose pickle or page exists without --force (OutputExistsError),
    or that cannot be a file (one line)."""
    check_targets(list(snapshot_paths(raw)), force=force)


def write_snapshot(raw: str, pickled: bytes | None, page: str, *, force: bool) -> list[str]:
    """Write the pickle (when the script made a CUDA snapshot) and the page, all or none; the paths written."""
    pickle_path, html_path = snapshot_paths(raw)
    files: list[tuple[Path, str | bytes]] = [(pickle_path, pickled)] if pickled is not None else []
    files.append((html_path, page))
    write_all(files, force=force)
    return [str(path) for path, _ in files]


__all__ = ["check_snapshot", "snapshot_paths", "write_snapshot"]
