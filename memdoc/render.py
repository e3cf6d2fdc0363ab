"""Rendering: the only module that imports Rich. Tables and bars to stdout, notes to stderr."""

from __future__ import annotations

import json
import sys

from rich.console import Console
from rich.table import Table

from memdoc.units import format_bytes

stdout = Console(highlight=False, soft_wrap=False)
stderr = Console(stderr=True, highlight=False)


def print_json(data) -> None:
    """Machine-readable output: one JSON document on stdout, bytes as integers."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def note(text: str) -> None:
    """A hint or warning for the human, on stderr so --json stays clean."""
    stderr.print(text)


def table(title: str | None, columns: list[tuple[str, str]], rows: list[list], *, caption: str | None = None) -> None:
    """A plain table; columns are (header, justify)."""
    t = Table(title=title, caption=caption, title_justify="left", caption_justify="left")
    for header, justify in columns:
        t.add_column(header, justify=justify)
    for row in rows:
        t.add_row(*[str(cell) if cell is not None else "—" for cell in row])
    stdout.print(t)


def gib(n: int | None) -> str:
    return "—" if n is None else format_bytes(n, unit="GiB")


_COLORS = {"weights": "blue", "gradients": "magenta", "optimizer": "yellow", "activations": "green", "other": "red"}
_BAR_WIDTH = 40


def _bar(phase, scale: int) -> str:
    """A stacked bar of one phase's items, `scale` bytes = full width."""
    out = []
    for item, color in _COLORS.items():
        cells = round(getattr(phase, item) / scale * _BAR_WIDTH) if scale else 0
        if cells:
            out.append(f"[{color}]{'█' * cells}[/{color}]")
    return "".join(out)


def render_bill(bill, ladder, command_line=None) -> None:
    """The bill table with per-phase stacked bars, the verdict line and the ladder."""
    from memdoc.core.bill import ITEMS, PHASES

    plan = bill.plan
    gpu = bill.gpu
    title = (
        f"{bill.model.id} · {bill.model.params.total / 1e9:.2f}B params · {plan.method.value} {plan.precision.value} "
        f"{plan.optimizer.value} · batch {plan.micro_batch} × seq {plan.seq_len}"
        + (f" · ckpt {plan.checkpointing.value}" if plan.checkpointing.value != "none" else "")
        + (f" · {plan.shard.value} × {plan.world_size}" if plan.shard.value != "none" else "")
        + (f" · offload {plan.offload.value}" if plan.offload.value != "none" else "")
    )
    t = Table(title=title, title_justify="left", caption_justify="left")
    t.add_column("per GPU", justify="left")
    for phase in PHASES:
        t.add_column(phase + (" ◀ peak" if phase == bill.peak_phase else ""), justify="right")
    for item in ITEMS:
        t.add_row(f"[{_COLORS[item]}]■[/] {item}", *[gib(getattr(bill.phases[p], item)) for p in PHASES])
    t.add_row("[b]allocated[/b]", *[f"[b]{gib(bill.phases[p].total)}[/b]" for p in PHASES])
    stdout.print(t)
    scale = max(bill.phases[p].total for p in PHASES)
    scale = max(scale, gpu.memory_bytes if gpu else 0)
    for phase in PHASES:
        stdout.print(f"  {phase:<10}{_bar(bill.phases[phase], scale)}")
    stdout.print(
        f"  peak allocated {gib(bill.peak_allocated)} ({bill.peak_phase}) · reserved ≈ {gib(bill.peak_reserved)}"
        f" · process total ≈ {gib(bill.process_total)} (+ CUDA context)"
        + (f" · host {gib(bill.host_bytes)}" if bill.host_bytes else "")
    )
    for line in bill.notes:
        stdout.print(f"  note: {line}")
    if gpu is None:
        return
    gpus = f"{plan.world_size} × " if plan.world_size > 1 else ""
    if bill.fits:
        stdout.print(f"[bold green]✔ fits[/] {gpus}{gpu.name} ({gib(gpu.memory_bytes)}) with {gib(bill.headroom_bytes)} headroom per GPU")
    else:
        stdout.print(f"[bold red]✘ does not fit[/] {gpus}{gpu.name} ({gib(gpu.memory_bytes)}): {gib(-bill.headroom_bytes)} over per GPU, peak in {bill.peak_phase}")
    if ladder:
        render_ladder(ladder)


def render_ladder(ladder) -> None:
    t = Table(title="The ladder: cheapest remedies first, each on top of the last", title_justify="left")
    for header, justify in (("#", "right"), ("remedy", "left"), ("peak alloc.", "right"), ("process", "right"),
                            ("saves", "right"), ("step time", "right"), ("fits", "left")):
        t.add_column(header, justify=justify)
    for i, step in enumerate(ladder, 1):
        t.add_row(str(i), step.rung.action, gib(step.bill.peak_allocated), gib(step.bill.process_total),
                  gib(step.saved_bytes), f"×{step.relative_time:.2f}", "[green]yes[/]" if step.fits else "no")
    stdout.print(t)
    if not ladder[-1].fits:
        stdout.print("[red]No rung makes it fit: use more GPUs (--gpus, --shard), a bigger GPU, or a smaller model.[/]")


def render_max(knob: str, value, bill) -> None:
    name = "micro-batch" if knob == "batch" else "sequence length"
    if value is None:
        stdout.print(f"No {name} fits: even 1 is over.")
    else:
        stdout.print(f"Largest {name} that fits: [bold]{value}[/]")


def render_inference(result) -> None:
    rows = [["weights", gib(result.weights)], ["KV cache", gib(result.kv_cache)], ["activations (prefill)", gib(result.activations)],
            ["[b]peak allocated[/b]", gib(result.peak_allocated)], ["process total", gib(result.process_total)]]
    table(f"{result.model.id} inference · batch {result.plan.micro_batch} × context {result.plan.seq_len}", [("item", "left"), ("per GPU", "right")], rows)
    if result.gpu is not None:
        verdict = "[green]✔ fits[/]" if result.fits else "[red]✘ does not fit[/]"
        stdout.print(f"{verdict} {result.gpu.name} ({gib(result.gpu.memory_bytes)})")
