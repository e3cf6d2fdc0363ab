"""The post-training fixtures still describe the installed TRL: rerun one case live and compare every phase.

Runs `python -m benchmarks.posttrain.harness --only dpo-lora` in a fresh process (the live-tensor counter also
counts what earlier tests left alive in this one) for DPO with a LoRA adapter (the policy forward, the
reference forward with the adapter disabled, backward and the optimizer: two optimizer steps, the second
measured; about 15-40 s on two cores) and requires the committed fixture's parameters, knobs and per-phase
peaks. The peaks may differ by 0.1% at most: the counter sees every storage, and small host-side tensors
(metrics, the scheduler) may come and go in a different order between versions of the same stack.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import FIXTURES, ROOT

pytestmark = pytest.mark.slow

RERUN = "dpo-lora"


def test_rerun_matches_fixture(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
    command = [sys.executable, "-m", "benchmarks.posttrain.harness", "--only", RERUN, "--out", str(tmp_path)]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    fresh = json.loads((tmp_path / f"{RERUN}.json").read_text())
    kept = json.loads((FIXTURES / "posttrain" / f"{RERUN}.json").read_text())
    for key in ("params", "trainable_params", "param_bytes", "reference_param_bytes", "knobs", "plan", "inputs"):
        assert fresh[key] == kept[key], key
    assert fresh["phases"].keys() == kept["phases"].keys()
    assert fresh["phases"] == pytest.approx(kept["phases"], rel=1e-3)
