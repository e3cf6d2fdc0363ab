"""`--html FILE` on bill, plan, diagnose and prescribe: one self-contained page, written all-or-nothing.

Truth used here: the flags themselves (a `--gpu 24` card is exactly 24 GiB; the command line typed),
the command's own JSON report as the page's one source (the bars' heights against its per-phase
totals, by SVG geometry), and the HTML standard's ways to fetch (src, href, url(), @import, <script>).
The browser checks (console, rendering, overlap) are in test_html_browser.py.
"""

from __future__ import annotations

import json
import re
import shlex

import pytest
from conftest import FIXTURES, invoke

from memdoc.core.billing.vocabulary import LINE_ITEMS
from memdoc.render.html.svg import lanes, text_width
from memdoc.render.html.timeline_svg import _phase_labels, downsample

BILL = ["bill", "meta-llama/Llama-3.1-8B", "--gpu", "24"]
LOG = FIXTURES / "oom-logs" / "first-step-backward.log"


def _page(tmp_path, *args) -> tuple[str, str]:
    out = tmp_path / "report.html"
    result = invoke(*args, "--html", out)
    assert result.exit_code in (0, 3), result.output
    assert f"Wrote {out}" in result.stderr
    return out.read_text(encoding="utf-8"), result.stdout


@pytest.mark.parametrize(
    "args",
    [BILL, ["plan", "meta-llama/Llama-3.1-8B", "--gpu", "24"], ["prescribe", *BILL[1:], "--log", LOG]],
    ids=["bill", "plan", "prescribe"],
)
def test_page_is_self_contained_and_names_its_command(tmp_path, args):
    text, _ = _page(tmp_path, *args)
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    without_ns = text.replace('xmlns="http://www.w3.org/2000/svg"', "")
    for fetch in ("<script", "<link", "<iframe", "<img", " src=", " href=", "url(", "@import"):
        assert fetch not in without_ns.lower(), fetch
    typed = shlex.join(["memdoc", *[str(a) for a in args], "--html", str(tmp_path / "report.html")])
    assert f"<code>{typed}</code>" in text  # the command exactly as typed (no quoting needed in these paths)
    assert text.count("<svg") >= 1


def test_bill_bars_follow_the_per_phase_totals_and_the_card(tmp_path):
    """Each phase's stacked rects add up to a height proportional to its total in the JSON report, the
    ladder has one row per rung plus the plan as given, and the capacity is the 24 GiB of --gpu 24."""
    text, _ = _page(tmp_path, *BILL)
    report = json.loads(invoke(*BILL, "--json").stdout)
    heights = {}
    for phase in report["phases"]:
        tips = re.findall(rf'height="([\d.]+)" fill="[^"]+"><title>{phase}: (\w+) ', text)
        assert {k for _, k in tips} == {k for k in LINE_ITEMS if report["phases"][phase][k] > 0}
        heights[phase] = sum(float(h) for h, _ in tips)
    totals = {p: sum(report["phases"][p][k] for k in LINE_ITEMS) for p in report["phases"]}
    first = next(iter(totals))
    for phase in totals:  # px per byte is one scale for all bars (rounded to 0.1 px per rect)
        assert heights[phase] / heights[first] == pytest.approx(totals[phase] / totals[first], abs=0.01)
    assert "capacity</text>" in text and ">24.00 GiB</text>" in text
    assert "process total</text>" in text  # the error band's label
    ladder = text.split("The ladder")[1].split("</svg>")[0]
    assert ladder.count("<rect") == len(report["ladder"]) + 1


def test_existing_page_needs_force_and_force_needs_html(tmp_path):
    out = tmp_path / "report.html"
    out.write_text("mine", encoding="utf-8")
    result = invoke(*BILL, "--html", out)
    assert result.exit_code == 2 and "already exists" in result.stderr and "--force" in result.stderr
    assert result.stdout == "" and out.read_text(encoding="utf-8") == "mine"
    assert invoke(*BILL, "--html", out, "--force").exit_code == 0
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    alone = invoke(*BILL, "--force")
    assert alone.exit_code == 2 and alone.stderr.startswith("Error: ") and alone.stderr.count("\n") == 1
    assert "--html" in alone.stderr


def test_html_into_a_directory_or_under_a_file_is_one_line(tmp_path):
    for target in (tmp_path, tmp_path / "report.html" / "x.html"):
        if target != tmp_path:
            (tmp_path / "report.html").write_text("a file", encoding="utf-8")
        result = invoke(*BILL, "--html", target)
        errors = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
        assert result.exit_code == 2 and len(errors) == 1 and "Traceback" not in result.stderr


def test_page_escapes_what_it_prints(tmp_path):
    """The command line goes into the page as text: markup in an argument is escaped, never parsed."""
    out = tmp_path / "<b>x</b>.html"
    assert invoke(*BILL, "--html", out).exit_code == 0
    text = out.read_text(encoding="utf-8")
    assert "<b>x</b>" not in text and "&lt;b&gt;x&lt;/b&gt;" in text


def test_lanes_never_put_two_overlapping_spans_together():
    spans = [(x, x + w) for x, w in [(0, 50), (10, 20), (40, 30), (55, 5), (62, 80), (65, 1), (200, 10)]]
    lane = lanes(spans, gap=6)
    for i in range(len(spans)):
        for j in range(i):
            if lane[i] == lane[j]:
                assert spans[i][0] >= spans[j][1] + 6 or spans[j][0] >= spans[i][1] + 6


def test_phase_labels_stay_apart_and_inside():
    """Sixteen phase changes a few pixels apart (a short CPU trace): labels kept are on distinct lanes or
    far enough apart, and none runs past the plot's right edge."""
    marks = [(i * 3, ["forward", "backward", "optimizer"][i % 3]) for i in range(16)]
    width, pad_r = 900, 12

    def x(i: int) -> float:
        return 78 + (width - 78 - pad_r) * i / 47

    kept, count = _phase_labels(marks, x, width, pad_r)
    assert count <= 3 and kept
    boxes = []
    for xi, label, lane, anchor in kept:
        start = xi + 3 if anchor == "start" else xi - 3 - text_width(label)
        boxes.append((lane, start, start + text_width(label)))
        assert start + text_width(label) <= width - pad_r + 0.01
    for i, (lane, a0, a1) in enumerate(boxes):
        for lane2, b0, b1 in boxes[:i]:
            assert lane != lane2 or a1 <= b0 or b1 <= a0


def test_downsample_keeps_the_peak():
    points = [{"total": (i * 7919) % 1000} for i in range(5000)]
    points[4321]["total"] = 10**9
    keep = downsample(points, most=100)
    assert len(keep) == 100 and 4321 in keep and keep == sorted(keep)
