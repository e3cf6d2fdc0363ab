"""Findings a walkthrough showed false: `amp-off` for an HF Trainer with bf16=True, and a plan billed at the
batch shape of an evaluation call made before training."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ROOT

pytest.importorskip("torch")
pytest.importorskip("transformers")

from typer.testing import CliRunner  # noqa: E402

from memdoc.cli import app  # noqa: E402


def _diagnose(script: Path) -> dict:
    res = CliRunner().invoke(app, ["diagnose", str(script), "--json"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def _copy_examples(tmp_path: Path, edit) -> Path:
    for name in ("hf_trainer.py", "_tiny_hf.py"):
        text = (ROOT / "examples" / name).read_text()
        text = text.replace('Path(__file__).resolve().parents[1] / "memdoc"', f'Path({str(ROOT)!r}) / "memdoc"')
        (tmp_path / name).write_text(edit(text) if name == "hf_trainer.py" else text)
    return tmp_path / "hf_trainer.py"


def test_hf_trainer_bf16_is_not_amp_off(tmp_path):
    # accelerate enters autocast inside the model's wrapped forward: seen at the layers, not the root hook
    report = _diagnose(_copy_examples(tmp_path, lambda t: t.replace("max_steps=2,", "max_steps=2, bf16=True,")))
    assert "amp-off" not in {f["id"] for f in report["findings"]}
    assert report["hf"]["detected_plan"]["precision"] == "amp-bf16"


def test_hf_trainer_fp32_is_amp_off(tmp_path):
    report = _diagnose(_copy_examples(tmp_path, lambda t: t))
    assert "amp-off" in {f["id"] for f in report["findings"]}


def test_eval_call_before_training_does_not_set_the_batch():
    # examples/ckpt_not_effective.py evaluates one sample (batch 1, no_grad) before training at BATCH=4, SEQ=64
    report = _diagnose(ROOT / "examples" / "ckpt_not_effective.py")
    plan = report["hf"]["detected_plan"]
    assert (plan["micro_batch"], plan["seq_len"]) == (4, 64)
