"""The report's charts, drawn from a command's JSON report: per-phase stacked bars and bar comparisons.

Every figure comes from the command's own `to_json()` (`memdoc.core.reports`): `phases` (the line
items at each phase's peak), `per_gpu`, `gpu.memory_bytes` (the capacity line), `verdict.error_bytes`
(the error band), `ladder` and `plans`.
"""

from __future__ import annotations

import math

from memdoc.core.billing.vocabulary import LINE_ITEMS
from memdoc.render.html.svg import COLORS, fit_text, legend, line, open_svg, rect, size, text, text_width

FIT_COLORS = {"comfortable": "#59a14f", "fits": "#59a14f", "close call": "#e0b530", "does not fit": "#e15759"}
WIDTH = 900


def nice_ticks(top: float, most: int = 6) -> list[float]:
    """Axis ticks from 0 at a round step (1, 2 or 5 × 10^k of the unit `top` is shown in: GiB, MiB or
    KiB) covering `top` bytes, at most `most` + 1 of them."""
    unit = next((u for u in (2**30, 2**20, 2**10) if top >= u), 1)
    top_u = max(top / unit, 1e-6)
    step = 10 ** math.floor(math.log10(top_u / most))
    for mult in (1, 2, 5, 10):
        if top_u / (step * mult) <= most:
            step *= mult
            break
    count = math.ceil(top_u / step - 1e-9)
    return [i * step * unit for i in range(count + 1)]


def _spread(ys: list[float], gap: float) -> list[float]:
    """Push label baselines apart (in the given order, top to bottom) so that each is `gap` below the last."""
    out: list[float] = []
    for y in ys:
        out.append(max(y, out[-1] + gap) if out else y)
    return out


def phase_bars(bars: list[tuple[str, dict]], *, capacity: int | None, band: tuple[int, int] | None, title: str) -> str:
    """Stacked bars of the line items (weights, gradients, optimizer, activations, other) per phase, with
    the card's capacity as a line and `band` = (process total, its error) as a shaded band."""
    height, pad_l, pad_r, pad_t, pad_b = 380, 78, 230, 40, 46
    plot_w, plot_h = WIDTH - pad_l - pad_r, height - pad_t - pad_b
    totals = [sum(int(items.get(k) or 0) for k in LINE_ITEMS) for _, items in bars]
    marks = [capacity or 0] + ([band[0] + band[1]] if band else [])
    ticks = nice_ticks(max(totals + marks + [1]) * 1.05)
    top = ticks[-1]

    def y(v: float) -> float:
        return pad_t + plot_h - plot_h * v / top

    leg, leg_h = legend(list(LINE_ITEMS), WIDTH - 20)
    parts = [open_svg(WIDTH, height + leg_h, title), f'<g transform="translate(10,{height})">{leg}</g>']
    for v in ticks:
        parts.append(line(pad_l, y(v), pad_l + plot_w, y(v), "#ddd"))
        parts.append(text(pad_l - 6, y(v) + 4, size(v) if v else "0", anchor="end"))
    slot = plot_w / max(len(bars), 1)
    bar_w = min(110.0, slot * 0.6)
    for i, ((name, items), total) in enumerate(zip(bars, totals)):
        x0, below = pad_l + slot * i + (slot - bar_w) / 2, 0
        for key in LINE_ITEMS:
            v = int(items.get(key) or 0)
            if v > 0:
                parts.append(
                    rect(x0, y(below + v), bar_w, y(below) - y(below + v), COLORS[key], f"{name}: {key} {size(v)}")
                )
                below += v
        parts.append(text(x0 + bar_w / 2, y(total) - 6, size(total), anchor="middle"))
        parts.append(text(x0 + bar_w / 2, pad_t + plot_h + 18, fit_text(name, slot - 8), anchor="middle", bold=True))
    labels = []
    if band:
        total, err = band
        lo, hi = y(total + err), y(max(total - err, 0))
        parts.append(
            rect(pad_l, lo, plot_w, hi - lo, "#7f7f7f", f"process total {size(total)} ± {size(err)}", ' opacity="0.18"')
        )
        parts.append(line(pad_l, y(total), pad_l + plot_w, y(total), "#555", ' stroke-dasharray="2,3"'))
        labels.append((y(total), ["process total", f"{size(total)} ± {size(err)}"], "#444"))
    if capacity:
        parts.append(
            line(pad_l, y(capacity), pad_l + plot_w, y(capacity), "#d62728", ' stroke-width="2" stroke-dasharray="6,4"')
        )
        labels.append((y(capacity), ["capacity", size(capacity)], "#d62728"))
    labels.sort()
    for (_, pair, color), yy in zip(labels, _spread([ly - 2 for ly, _, _ in labels], 34)):
        for k, label in enumerate(pair):
            parts.append(text(pad_l + plot_w + 8, yy + 15 * k, fit_text(label, pad_r - 12), fill=color))
    parts.append("</svg>")
    return "".join(parts)


def bar_rows(rows: list[tuple[str, int, str, str]], *, capacity: int | None, title: str) -> str:
    """Horizontal bars, one row per (label, bytes, fit, note): the ladder's rungs or the plans, with the
    card's capacity as a vertical line."""
    row_h, pad_l, pad_r, pad_t = 30, 340, 210, 30
    height = pad_t + row_h * len(rows) + 24
    plot_w = WIDTH - pad_l - pad_r
    ticks = nice_ticks(max([v for _, v, _, _ in rows] + [capacity or 0, 1]) * 1.05)
    top = ticks[-1]

    def x(v: float) -> float:
        return pad_l + plot_w * v / top

    parts = [open_svg(WIDTH, height, title)]
    for v in ticks:
        parts.append(line(x(v), pad_t - 4, x(v), height - 22, "#e4e4e4"))
    edge = -1e9
    for v in ticks:  # tick labels where they do not collide with the previous one
        label = size(v) if v else "0"
        if x(v) - text_width(label) / 2 > edge + 6 and x(v) + text_width(label) / 2 <= WIDTH - 2:
            parts.append(text(x(v), height - 6, label, anchor="middle", fill="#666"))
            edge = x(v) + text_width(label) / 2
    for i, (label, value, fit, note) in enumerate(rows):
        y0 = pad_t + row_h * i
        parts.append(text(pad_l - 8, y0 + 18, fit_text(label, pad_l - 14), anchor="end"))
        parts.append(
            rect(
                pad_l,
                y0 + 5,
                x(value) - pad_l,
                row_h - 10,
                FIT_COLORS.get(fit, "#999"),
                f"{label}: {size(value)} ({fit})",
            )
        )
        parts.append(text(WIDTH - pad_r + 8, y0 + 18, fit_text(f"{size(value)} {note}".strip(), pad_r - 12)))
    if capacity:
        parts.append(
            line(
                x(capacity), pad_t - 10, x(capacity), height - 22, "#d62728", ' stroke-width="2" stroke-dasharray="6,4"'
            )
        )
        parts.append(text(x(capacity), pad_t - 14, f"capacity {size(capacity)}", anchor="middle", fill="#d62728"))
    parts.append("</svg>")
    return "".join(parts)


__all__ = ["FIT_COLORS", "bar_rows", "nice_ticks", "phase_bars"]
