"""The post-training fixtures still describe the installed TRL: rerun one case live and compare every phase.

Runs `benchmarks/posttrain/harness.py`'s `run_case` for DPO with a LoRA adapter (the policy forward, the
reference forward with the adapter disabled, backward and the optimizer: two optimizer steps, the second
measured; about 15-40 s on two cores) and requires the committed fixture's parameters, knobs and per-phase
peaks. The peaks may differ by 0.1% at most: the counter sees every storage, and small host-side tensors
(metrics, the scheduler) may come and go in a different order between versions of the same stack.
"""

from __future__ import annotations

import json

import pytest
from conftest import FIXTURES

from benchmarks.posttrain.cases import CASES
from benchmarks.posttrain.harness import run_case

pytestmark = pytest.mark.slow

RERUN = "dpo-lora"


def test_rerun_matches_fixture(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    fresh = json.loads(json.dumps(run_case(CASES[RERUN])))
    kept = json.loads((FIXTURES / "posttrain" / f"{RERUN}.json").read_text())
    for key in ("params", "trainable_params", "param_bytes", "reference_param_bytes", "knobs", "plan", "inputs"):
        assert fresh[key] == kept[key], key
    assert fresh["phases"].keys() == kept["phases"].keys()
    assert fresh["phases"] == pytest.approx(kept["phases"], rel=1e-3)
