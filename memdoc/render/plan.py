"""`memdoc plan`: the fastest plans that fit, each with what it changes from the user's plan."""

from __future__ import annotations

from rich import box
from rich.table import Table

from memdoc.render.common import duration, gib
from memdoc.render.layout import NARROW_COLUMNS, stdout, title

_COLUMNS = (
    ("#", "right"),
    ("changes from your plan", "left"),
    ("peak alloc.", "right"),
    ("process", "right"),
    ("step time", "right"),
    ("tokens/s/GPU", "right"),
    ("per 1B tokens", "right"),
)
_SHORT_HEADERS = {
    "changes from your plan": "changes",
    "peak alloc.": "peak",
    "tokens/s/GPU": "tok/s/GPU",
    "per 1B tokens": "per 1B tok",
}
"""Headers of a narrow console (below NARROW_COLUMNS)."""


def _change(field: str, before, after) -> str:
    """'micro batch 8 → 2': one knob the candidate changes, as the user writes its values."""
    value = lambda v: ",".join(v) if isinstance(v, tuple) else getattr(v, "value", v)  # noqa: E731
    return f"{field.replace('_', ' ')} {value(before)} → {value(after)}"


def render_plans(setup, candidates, headroom: float) -> None:
    """`memdoc plan`: the fastest fitting plans, each with what changed from the user's plan."""
    gpu, plan = setup.gpu, setup.plan
    gpus = f"{plan.world_size} × " if plan.world_size > 1 else ""
    if not candidates:
        stdout.print(
            f"[bold red]No plan fits[/] {gpus}{gpu.name} ({gib(gpu.memory_bytes)}) with {headroom:.0%} headroom "
            "over the knobs left free: free a fixed flag, add GPUs (--gpus) or use a bigger GPU."
        )
        return
    title(
        f"{setup.model.id} on {gpus}{gpu.name} ({gib(gpu.memory_bytes)})",
        f"fastest plans that fit with {headroom:.0%} headroom",
    )
    stdout.print(_plans_table(candidates))
    if setup.explicit:
        stdout.print(f"  kept as given: {', '.join(sorted(setup.explicit))}")
    if gpu.is_generic:
        stdout.print("  times use A100 rates: name the GPU (--gpu rtx-4090, h100-sxm, …) for its own")


def _plans_table(candidates) -> Table:
    """One row per candidate: its changes, peak and process memory, step time and throughput."""
    narrow = stdout.width < NARROW_COLUMNS
    t = Table(box=box.SIMPLE_HEAD if narrow else box.HEAVY_HEAD, show_edge=not narrow, collapse_padding=narrow)
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
        t.add_row(
            str(i),
            changes,
            gib(c.bill.peak_allocated),
            gib(c.bill.process_total),
            duration(c.time.seconds),
            f"{c.time.tokens_per_second:,.0f}",
            duration(per_billion),
        )
    return t
