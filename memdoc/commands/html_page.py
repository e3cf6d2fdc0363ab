"""`--html FILE` for bill, plan, diagnose and prescribe: check the target first, write the page last.

The page is drawn from the command's own JSON report (`memdoc.render.html.report_html`) and written
all-or-nothing by `memdoc.output.files.write_all` (never over an existing file without `--force`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional


def check_html(path: Optional[Path], force: bool) -> None:
    """Before any work: `--force` needs `--html`, and an existing FILE needs `--force` (one-line errors)."""
    from memdoc.errors import PlanError
    from memdoc.output.files import check_targets

    if path is None:
        if force:
            raise PlanError("--force replaces an existing --html FILE; it goes with --html")
        return
    if not str(path).strip():
        raise PlanError("--html needs a file name")
    check_targets([path], force=force)


def write_html(path: Optional[Path], data: dict, *, title: str, force: bool) -> None:
    """Write the page of `data` (a command's `to_json()`) to `path`, and say so on stderr."""
    if path is None:
        return
    from memdoc import render
    from memdoc.commands.app import invocation
    from memdoc.output.files import write_all
    from memdoc.render.html import report_html

    write_all([(path, report_html(data, title=title, command=invocation()))], force=force)
    render.note(f"Wrote {path}")


__all__ = ["check_html", "write_html"]


def script_timeline(result) -> dict:
    """The allocation timeline of a diagnosed script, for its pages: {"source", "points", "marks"}.

    A CUDA run replays its allocator trace (`memdoc.probe.cuda_stats.snapshot_timeline`: weights,
    gradients, optimizer by block address, the rest as activations+other); a CPU run takes the
    runner's op timeline (`memdoc.probe.script.session.Session.after_op`: the five line items every
    8 ops), with a mark at each change of phase (at most 16). At most ~600 points are kept, the
    highest of each stretch (`memdoc.render.html.timeline_svg.downsample`).
    """
    from memdoc.render.html.timeline_svg import downsample

    marks = []
    if result.snapshot is not None:
        from memdoc.probe.cuda_stats import snapshot_timeline

        points = snapshot_timeline(result.snapshot, result.categories)
        source = "CUDA allocator trace"
    else:
        points = [{k: v for k, v in p.items() if k != "phase"} for p in result.cpu_timeline]
        source = "tensor ops traced on CPU (no CUDA snapshot: the script did not use CUDA)"
        last = None
        for i, p in enumerate(result.cpu_timeline):
            if p["phase"] != last and len(marks) < 16:
                marks.append((i, p["phase"]))
            last = p["phase"]
    keep = downsample(points)
    index = {old: new for new, old in enumerate(keep)}
    moved = [
        (next((index[j] for j in range(i, len(points)) if j in index), len(keep) - 1), label) for i, label in marks
    ]
    return {"source": source, "points": [points[i] for i in keep], "marks": moved}
