"""Unit tests of `memdoc.render`: the JSON sink, unit formatting, stacked bars, and the bill table at a pinned width."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from memdoc import render
from memdoc.core.billing.bill import PhaseBill, compute_bill
from memdoc.core.model.gpu import resolve_gpu
from memdoc.core.model.plan import parse_plan
from memdoc.render import bill as bill_view
from memdoc.resolve.models import resolve_model
from memdoc.units import GiB

WIDTH = 100


@pytest.fixture
def pinned(monkeypatch):
    """The bill renderer's stdout replaced by a recording console of WIDTH columns, no colour."""
    console = Console(file=io.StringIO(), width=WIDTH, highlight=False, soft_wrap=False, color_system=None)
    monkeypatch.setattr(bill_view, "stdout", console)
    return console


def test_print_json_writes_one_indented_document_with_integers(capsys):
    render.print_json({"peak_allocated": 7 * GiB, "path": Path("a/b.yaml"), "items": [1, 2]})
    out = capsys.readouterr().out
    assert out.endswith("}\n") and "\n  " in out
    assert json.loads(out) == {"peak_allocated": 7516192768, "path": "a/b.yaml", "items": [1, 2]}


def test_gib_prints_the_unit_and_a_dash_for_unknown():
    assert render.gib(3 * GiB // 2) == "1.50 GiB"
    assert render.gib(512 * 1024**2) == "0.50 GiB"  # one unit for a whole column, even below 1 GiB
    assert render.gib(None) == "—"


def test_bar_is_proportional_to_the_scale():
    phase = PhaseBill(weights=3, gradients=1, optimizer=0, activations=0, other=0)
    bar = bill_view.phase_bar(phase, scale=4)
    assert bar == "[blue]" + "█" * 30 + "[/blue][magenta]" + "█" * 10 + "[/magenta]"
    assert bill_view.phase_bar(phase, scale=8).count("█") == 20
    assert bill_view.phase_bar(phase, scale=0) == ""


def test_bill_table_fits_the_width_and_shows_every_item(pinned):
    model = resolve_model("meta-llama/Llama-2-7b")
    bill = compute_bill(model, parse_plan(method="lora", batch=2, seq=1024), resolve_gpu("24"))
    render.render_bill(bill, [])
    text = pinned.file.getvalue()
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= WIDTH
    for item in ("weights", "gradients", "optimizer", "activations", "other"):
        row = next(line for line in lines if f"■ {item}" in line)
        for phase in ("forward", "backward", "optimizer"):
            assert render.gib(getattr(bill.phases[phase], item)) in row
    assert render.gib(bill.peak_allocated) in text
