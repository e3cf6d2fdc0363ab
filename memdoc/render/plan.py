"""`memdoc plan`: the fastest plans that fit, each with what it changes from the user's plan."""

from __future__ import annotations

from rich.table import Table

from memdoc.render.common import duration, gib, ruled_table
from memdoc.render.layout import NARROW_COLUMNS, stdout, title

_COLUMNS = (
    ("#", "right"),
    ("changes from your plan", "left"),
    ("min memory", "right"),
    ("host RAM", "right"),
    ("step time", "right"),
    ("tokens/s/GPU", "right"),
    ("per 1B tokens", "right"),
)
_SHORT_HEADERS = {
    "changes from your plan": "changes",
    "min memory": "min",
    "host RAM": "host",
    "tokens/s/GPU": "tok/s/GPU",
    "per 1B tokens": "per 1B tok",
}
"""Headers of a narrow console (below NARROW_COLUMNS)."""
_BASIS_MARK = {"calibrated": "", "published": "ᵖ", "first-order": "¹"}
"""Marks after a step time's band: QLoRA's published factor (ᵖ), first-order terms (¹)."""


def _change(field: str, before, after) -> str:
    """'micro batch 8 → 2': one knob the candidate changes, as the user writes its values."""
    value = lambda v: ",".join(v) if isinstance(v, tuple) else getattr(v, "value", v)  # noqa: E731
    return f"{field.replace('_', ' ')} {value(before)} → {value(after)}"


def _host_line(report) -> str:
    limit = report.host_ram_bytes
    return f"host RAM limit: {gib(limit)} per node, {report.host_ram_source}" if limit else report.host_ram_source


def render_plans(setup, report) -> None:
    """`memdoc plan`: the best-ranked fitting plans, each with what changed from the user's plan."""
    gpu, plan, candidates = setup.gpu, setup.plan, report.candidates
    gpus = f"{plan.world_size} × " if plan.world_size > 1 else ""
    if not candidates:
        stdout.print(
            f"[bold red]No plan fits[/] {gpus}{gpu.name} ({gib(gpu.memory_bytes)}) comfortably "
            "over the knobs left free (the minimum memory with more headroom than the bill's error, "
            "offloaded states within the host RAM): free a fixed flag, add GPUs (--gpus), use a bigger GPU "
            "or give more host RAM (--host-ram)."
        )
        stdout.print(f"  {_host_line(report)}")
        _suggestions(report)
        return
    title(
        f"{setup.model.id} on {gpus}{gpu.name} ({gib(gpu.memory_bytes)})",
        "fastest plans that fit comfortably (minimum memory with more headroom than the bill's error)",
    )
    stdout.print(_plans_table(candidates))
    stdout.print(f"  {_host_line(report)}")
    stdout.print(
        "  step time ± its band: calibrated on H200 steps; ᵖ QLoRA, a factor fitted on published runs; "
        "¹ first-order offload or communication terms (not measured), ranked above a measured plan only "
        "when faster by more than its band."
    )
    if setup.explicit:
        stdout.print(f"  kept as given: {', '.join(sorted(setup.explicit))}")
    _suggestions(report)
    if gpu.is_generic:
        stdout.print("  times use A100 rates: name the GPU (--gpu rtx-4090, h100-sxm, …) for its own")


def _suggestions(report) -> None:
    """Post-training changes the search leaves to the user: they change the training (`search_post.suggestions`)."""
    for line in report.suggestions:
        stdout.print(f"  not searched (changes the training): {line}")


def _plans_table(candidates) -> Table:
    """One row per candidate: its changes, minimum memory (the fit), host RAM, step time ± band, throughput
    (the process total is in the JSON)."""
    narrow = stdout.width < NARROW_COLUMNS
    t = ruled_table(narrow)
    for header, justify in _COLUMNS:
        t.add_column(
            _SHORT_HEADERS.get(header, header) if narrow else header,
            justify=justify,
            no_wrap=justify == "right",
            min_width=12 if justify == "left" else None,
        )
    for i, c in enumerate(candidates, 1):
        changes = "; ".join(_change(*change) for change in c.changes) or "(none: your plan)"
        per_billion = 1e9 / (c.time.tokens_per_second * c.plan.world_size)
        host = c.host_bytes_per_node
        t.add_row(
            str(i),
            changes,
            gib(c.bill.min_memory_bytes),
            gib(host) if host else "-",
            f"{duration(c.time.seconds)} ±{c.band.relative:.0%}{_BASIS_MARK[c.band.basis.value]}",
            f"{c.time.tokens_per_second:,.0f}",
            duration(per_billion),
        )
    return t
