"""One self-contained HTML page from a command's JSON report: inline CSS and SVG, no scripts, no network.

`report_html` draws whichever parts the report has: `phases` (stacked bars per phase, with the card's
capacity and the verdict's error band), `ladder` or `plans` (a comparison), `timeline` (the allocation
timeline of `diagnose SCRIPT`), an OOM diagnosis (`prescribe`'s `diagnosis`/`prescriptions`,
`diagnose SCRIPT`'s `oom`), and the command line that produced it; the whole report follows as JSON.
"""

from __future__ import annotations

import json

from memdoc.core.billing.vocabulary import LINE_ITEMS
from memdoc.render.html.charts import bar_rows, phase_bars
from memdoc.render.html.svg import esc, size
from memdoc.render.html.timeline_svg import timeline_svg

CSS = """
body{font-family:sans-serif;margin:24px auto;max-width:940px;padding:0 12px;color:#222;line-height:1.4}
h1{font-size:1.5em;margin:0 0 4px} h2{font-size:1.15em;margin:28px 0 8px;border-bottom:1px solid #ddd}
svg{max-width:100%;height:auto;display:block}
.summary{color:#444} .verdict{font-weight:bold}
pre{background:#f5f5f5;padding:8px;white-space:pre-wrap;word-break:break-all;font-size:.9em}
li{margin:4px 0} .muted{color:#666} table{border-collapse:collapse} td{padding:2px 10px 2px 0}
"""

OOM_FIGURES = (
    ("requested", "requested"),
    ("free", "free on the card"),
    ("allocated_by_pytorch", "allocated by PyTorch"),
    ("reserved_unallocated", "reserved by PyTorch, unallocated"),
    ("this_process_in_use", "in use by this process"),
)


def _per_phase(data: dict) -> str:
    """The bill's (or the measurement's) line items per phase, with the billed peak beside a measurement."""
    bars = [(phase, items) for phase, items in (data.get("phases") or {}).items() if isinstance(items, dict)]
    billed = data.get("billed") or (data.get("hf") or {}).get("billed")
    if billed and bars:
        bars.append(("billed peak", billed))
    if not bars and any(k in (data.get("per_gpu") or {}) for k in LINE_ITEMS):
        bars = [("per GPU", data["per_gpu"])]
    if not bars:
        return ""
    capacity = (data.get("gpu") or {}).get("memory_bytes")
    verdict, total = data.get("verdict") or {}, (data.get("per_gpu") or {}).get("process_total")
    band = (total, verdict["error_bytes"]) if total and verdict.get("error_bytes") else None
    chart = phase_bars(bars, capacity=capacity, band=band, title="memory per phase")
    return f"<h2>Memory per phase</h2>{chart}"


def _comparison(data: dict) -> str:
    """The ladder (the plan as given, then each remedy in turn) or the plans `memdoc plan` found."""
    capacity = (data.get("gpu") or {}).get("memory_bytes")
    if data.get("ladder"):
        given = (data.get("per_gpu") or {}).get("process_total")
        rows = [("as given", given, (data.get("verdict") or {}).get("fit", ""), "")] if given else []
        for rung in data["ladder"]:
            note = f"×{rung['relative_time']:.2f} time" if rung.get("relative_time") else ""
            rows.append(
                (
                    f"+ {rung.get('action') or rung.get('rung')}",
                    rung.get("process_total") or 0,
                    rung.get("fit", ""),
                    note,
                )
            )
        return "<h2>The ladder: remedies in turn (process total per GPU)</h2>" + bar_rows(
            rows, capacity=capacity, title="ladder"
        )
    if data.get("plans"):
        rows = []
        for plan in data["plans"]:
            changes = "; ".join(f"{c['field']} {c['from']}→{c['to']}" for c in plan.get("changes") or []) or "as given"
            step = (plan.get("time") or {}).get("step_seconds")
            note = f"{step:.2f} s/step" if step else ""
            rows.append((changes, (plan.get("per_gpu") or {}).get("process_total") or 0, plan.get("fit", ""), note))
        return "<h2>Plans that fit (process total per GPU)</h2>" + bar_rows(rows, capacity=capacity, title="plans")
    return ""


def _timeline(data: dict) -> str:
    timeline = data.get("timeline")
    if not timeline:
        return ""
    marks = [(int(i), str(label)) for i, label in timeline.get("marks") or []]
    source = f'<p class="muted">{esc(timeline["source"])}</p>' if timeline.get("source") else ""
    return f"<h2>Allocation timeline</h2>{source}{timeline_svg(timeline.get('points') or [], marks)}"


def _items(title: str, rows: list[str]) -> str:
    return f"<h3>{esc(title)}</h3><ul>{''.join(rows)}</ul>" if rows else ""


def _diagnosis(data: dict) -> str:
    """The OOM diagnosis: the figures of the message, the causes with their evidence, the prescriptions."""
    oom = data.get("oom") if isinstance(data.get("oom"), dict) else None
    diag = data.get("diagnosis") or oom
    if not diag:
        return ""
    parts = ["<h2>OOM diagnosis</h2>"]
    symptom = diag.get("symptom") or data.get("symptom")
    facts = [
        ("symptom", symptom),
        ("kind", diag.get("kind")),
        ("phase", diag.get("phase") or diag.get("traceback_phase")),
    ]
    parts.append("<table>" + "".join(f"<tr><td>{k}</td><td>{esc(v)}</td></tr>" for k, v in facts if v) + "</table>")
    figures = [(label, oom[key]) for key, label in OOM_FIGURES if oom and oom.get(key)]
    if figures:
        rows = [(label, int(v), "", "") for label, v in figures]
        parts.append(bar_rows(rows, capacity=oom.get("total"), title="the OOM message's figures"))
    causes = [
        f"<li><b>{esc(c.get('title') or c.get('id'))}</b><br>"
        f"<span class='muted'>{esc(c.get('evidence') or '')}</span></li>"
        for c in diag.get("causes") or []
    ]
    parts.append(_items("Causes", causes))
    prescriptions = data.get("prescriptions") if "prescriptions" in data else diag.get("prescriptions")
    rx = []
    for p in prescriptions or []:
        saves = f" (saves {size(p['saves_bytes'])})" if p.get("saves_bytes") else ""
        rx.append(f"<li>{esc(p.get('action') or p.get('id'))}{esc(saves)}</li>")
    parts.append(_items("Prescriptions", rx))
    return "".join(parts)


def _summary(data: dict) -> str:
    model, gpu, verdict = data.get("model") or {}, data.get("gpu") or {}, data.get("verdict") or {}
    bits = [b for b in (model.get("id"), data.get("script"), gpu.get("name")) if b]
    line = f'<p class="summary">{esc(" · ".join(bits))}</p>' if bits else ""
    if verdict.get("fit"):
        line += f'<p class="verdict">Verdict: {esc(verdict["fit"])}</p>'
    return line


def report_html(data: dict, *, title: str, command: str) -> str:
    """The page for one command's report `data` (its `to_json()`), run as `command`."""
    body = [
        f"<h1>{esc(title)}</h1>",
        _summary(data),
        _per_phase(data),
        _comparison(data),
        _timeline(data),
        _diagnosis(data),
        f"<h2>Command</h2><pre><code>{esc(command)}</code></pre>",
        "<details><summary>The report as JSON</summary><pre>",
        esc(json.dumps(data, indent=1, default=str)),
        "</pre></details>",
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>\n"
        + "\n".join(b for b in body if b)
        + "\n</body></html>\n"
    )


__all__ = ["report_html"]
