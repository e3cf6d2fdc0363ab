"""`memdoc diagnose SCRIPT --steps N`: memory that grows step by step is found, with the script line
that allocated what survives each step; the shipped examples do not grow."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ROOT

pytest.importorskip("torch")

from typer.testing import CliRunner  # noqa: E402

from memdoc.cli import app  # noqa: E402
from memdoc.core.doctor.findings import RunFacts, lint  # noqa: E402

LEAKY = ROOT / "tests" / "fixtures" / "growth" / "leaky_loop.py"


def _diagnose(script: Path, *args: str, steps: int = 4) -> dict:
    argv = ["diagnose", str(script), "--steps", str(steps), "--json"] + (["--", *args] if args else [])
    res = CliRunner().invoke(app, argv, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def _growth(report: dict) -> dict | None:
    return next((f for f in report["findings"] if f["id"] == "memory-growth"), None)


def _line(text: str) -> int:
    """Line number of `text` in the leaky loop (so the test does not hard-code it)."""
    return next(i for i, line in enumerate(LEAKY.read_text().splitlines(), 1) if text in line)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("leak", "line", "per_step"),
    [
        ("logits", "logits = model(x)", "1000.00 KiB"),  # 8 × 32 × 1000 fp32 logits kept in a list
        ("loss", "val = nn.functional.cross_entropy(model(", None),  # a validation graph kept by the running sum
        ("metric", "seen = torch.cat(", "2.00 KiB"),  # 8 × 32 int64 predictions appended per step
    ],
)
def test_leaks_are_found_at_their_line(leak, line, per_step):
    finding = _growth(_diagnose(LEAKY, "--leak", leak))
    assert finding is not None and finding["prescribe"] == "memdoc prescribe --symptom mid-run-oom"
    assert finding["modules"][0] == f"leaky_loop.py:{_line(line)}"
    if per_step:
        assert f"grows by {per_step} per step" in finding["message"]


def test_fixed_loop_does_not_grow():
    assert _growth(_diagnose(LEAKY, "--leak", "none")) is None


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "args"), [("plain_loop.py", ("--batch", "64")), ("ckpt_not_effective.py", ()), ("lora_peft.py", ())]
)
def test_shipped_examples_do_not_grow(name, args):
    report = _diagnose(ROOT / "examples" / name, *args, steps=3)
    assert report["stopped_after_steps"] == 3 and _growth(report) is None


@pytest.mark.slow
def test_hf_trainer_example_does_not_grow(tmp_path):
    # the shipped example stops at max_steps=2: run a copy with 4 steps
    for name in ("hf_trainer.py", "_tiny_hf.py"):
        text = (ROOT / "examples" / name).read_text()
        text = text.replace('Path(__file__).resolve().parents[1] / "memdoc"', f'Path({str(ROOT)!r}) / "memdoc"')
        (tmp_path / name).write_text(text.replace("max_steps=2,", "max_steps=4,"))
    report = _diagnose(tmp_path / "hf_trainer.py", steps=4)
    assert report["stopped_after_steps"] == 4 and _growth(report) is None


def test_growth_needs_two_samples_after_the_first_step():
    # the first step start has no optimizer states yet: its jump is not growth
    assert not [f for f in lint(RunFacts(step_start_bytes=[100, 10_000])) if f.id == "memory-growth"]
    assert not [f for f in lint(RunFacts(step_start_bytes=[100, 10_000, 10_000, 10_000])) if f.id == "memory-growth"]
    found = [f for f in lint(RunFacts(step_start_bytes=[100, 10_000, 12_048, 14_096])) if f.id == "memory-growth"]
    assert found and "2.00 KiB per step" in found[0].message
