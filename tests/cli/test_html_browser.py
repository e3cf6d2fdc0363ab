"""The `--html` pages in a real browser: Debian's Chromium, headless, driven by Selenium (chromium-driver).

For every page (bill, plan, prescribe --log, diagnose SCRIPT): no console error; every chart is an
SVG with a non-zero box; the screenshot of each chart is not blank (its pixels vary); and no two
visible text elements overlap (getBoundingClientRect of every SVG <text> and every HTML text block).
The diagnosed script's timeline carries the weights the script's own model holds (its parameter
count × 4 bytes, fp32), so the timeline is coloured by category, not one "activations+other".
`.ci/run` installs chromium and chromium-driver; without them these tests are skipped.
"""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest
from conftest import EXAMPLES, FIXTURES, invoke

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (CHROMIUM and DRIVER),
        reason="Chromium is absent: apt-get install -y chromium chromium-driver (.ci/run does this)",
    ),
]

COMMANDS = {
    "bill": ["bill", "meta-llama/Llama-3.1-8B", "--gpu", "24"],
    "plan": ["plan", "Qwen/Qwen2.5-7B", "--gpu", "a10g"],
    "prescribe": [
        "prescribe",
        "meta-llama/Llama-3.1-8B",
        "--gpu",
        "24",
        "--log",
        FIXTURES / "oom-logs" / "fragmentation-mid-run.log",
    ],
    "diagnose": ["diagnose", EXAMPLES / "plain_loop.py", "--steps", "3"],
}
CHARTS = {"bill": 2, "plan": 1, "prescribe": 1, "diagnose": 2}
"""Charts each page must draw: bill = per phase + ladder; plan = plans; prescribe = the OOM's figures;
diagnose = per phase + timeline."""

TEXT_BOXES = """
const out = [];
for (const el of document.querySelectorAll('svg text, h1, h2, h3, p, li, td, pre, summary')) {
  const r = el.getBoundingClientRect();
  if (r.width > 0 && r.height > 0) out.push({tag: el.tagName, text: el.textContent.slice(0, 60),
    svg: el.closest('svg') ? [...document.querySelectorAll('svg')].indexOf(el.closest('svg')) : -1,
    x0: r.left, y0: r.top, x1: r.right, y1: r.bottom});
}
return out;
"""


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("html")
    out = {}
    for name, args in COMMANDS.items():
        out[name] = folder / f"{name}.html"
        result = invoke(*args, "--html", out[name])
        assert result.exit_code in (0, 3), result.output
    return out


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1000,1200",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=DRIVER), options=options)
    yield driver
    driver.quit()


def _overlaps(boxes: list[dict], slack: float = 0.5) -> list[tuple[str, str]]:
    """Pairs of text boxes that intersect by more than `slack` px each way (a box inside its own block,
    an SVG text in an HTML block, is not compared: only SVG texts of one chart, or two HTML blocks)."""
    found = []
    for i, a in enumerate(boxes):
        for b in boxes[:i]:
            if (a["svg"] == -1) != (b["svg"] == -1) or (a["svg"] != -1 and a["svg"] != b["svg"]):
                continue
            if a["svg"] == -1 and (a["tag"] in ("LI", "TD", "PRE") or b["tag"] in ("LI", "TD", "PRE")):
                if a["tag"] == b["tag"] == "LI" or a["tag"] == b["tag"] == "TD":
                    pass  # siblings in a list or table must not overlap either
                else:
                    continue
            dx = min(a["x1"], b["x1"]) - max(a["x0"], b["x0"])
            dy = min(a["y1"], b["y1"]) - max(a["y0"], b["y0"])
            if dx > slack and dy > slack:
                found.append((a["text"], b["text"]))
    return found


@pytest.mark.parametrize("name", list(COMMANDS))
def test_page_renders_in_chromium(browser, pages, name):
    from PIL import Image, ImageStat
    from selenium.webdriver.common.by import By

    browser.get(pages[name].as_uri())
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []
    charts = browser.find_elements(By.CSS_SELECTOR, "body > svg")
    assert len(charts) >= CHARTS[name]
    for chart in charts:
        assert chart.rect["width"] > 100 and chart.rect["height"] > 50
        browser.execute_script("arguments[0].scrollIntoView()", chart)
        image = Image.open(io.BytesIO(chart.screenshot_as_png)).convert("L")
        assert max(ImageStat.Stat(image).stddev) > 10  # not a blank (one-colour) box
    boxes = browser.execute_script(TEXT_BOXES)
    assert len(boxes) > 15  # the labels of the charts were measured
    assert _overlaps(boxes) == []


def test_overlap_check_sees_overlapping_text(browser, tmp_path):
    """The check itself: two labels drawn at one place are reported."""
    page = tmp_path / "clash.html"
    page.write_text(
        '<!DOCTYPE html><html><body><svg width="300" height="60"><text x="10" y="30">process total</text>'
        '<text x="20" y="32">capacity</text></svg></body></html>',
        encoding="utf-8",
    )
    browser.get(page.as_uri())
    assert len(_overlaps(browser.execute_script(TEXT_BOXES))) == 1


def test_timeline_is_coloured_by_category(pages):
    """The plain loop's model holds 2 × (LayerNorm 2·256 + Linear 256·1024+1024 + Linear 1024·256+256)
    + Linear 256·10+10 parameters (examples/plain_loop.py, TinyMLP), fp32: the timeline's weights band
    is that many bytes × 4, drawn in the weights colour, next to gradients and optimizer states."""
    import html
    import json

    from memdoc.render.html.svg import COLORS

    text = pages["diagnose"].read_text(encoding="utf-8")
    timeline = text.split("Allocation timeline")[1]
    for category in ("weights", "gradients", "optimizer", "activations"):
        assert f'fill="{COLORS[category]}" opacity="0.9"><title>{category}</title>' in timeline
    assert "activations+other" not in timeline  # a CPU trace tells activations from the rest
    report = json.loads(html.unescape(text.split("<summary>The report as JSON</summary><pre>")[1].split("</pre>")[0]))
    params = 2 * (2 * 256 + 256 * 1024 + 1024 + 1024 * 256 + 256) + 256 * 10 + 10
    points = report["timeline"]["points"]
    assert max(p["weights"] for p in points) == params * 4
    assert all(
        p["total"] == sum(p[k] for k in ("weights", "gradients", "optimizer", "activations", "other")) for p in points
    )
