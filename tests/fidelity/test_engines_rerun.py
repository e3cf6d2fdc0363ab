"""The engine fixtures still describe the installed engines: rerun a few cases and compare every category.

Runs `benchmarks/engines/harness.py` (two spawned ranks, gloo, DeepSpeed on its CPU accelerator) for one
ZeRO-2 case (its IPG buckets and gradients at the end of backward), one ZeRO-3 case (its resident bucket,
partitions and persistent parameters) and one FSDP2 case with a MixedPrecisionPolicy, then requires the same
bytes per category, rank and moment as the committed fixture. About 30-60 s on two cores.
"""

from __future__ import annotations

import json
import socket

import pytest
from conftest import FIXTURES

from benchmarks.engines.harness import run_cases

pytestmark = pytest.mark.slow

RERUN = ["deepspeed-qwen3-z2-bf16", "deepspeed-llama-z3-bf16", "fsdp2-qwen3-fp32-mp-bf16"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_rerun_matches_fixtures(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    status = run_cases(RERUN, tmp_path, port=free_port(), timeout_s=240)
    assert status == dict.fromkeys(RERUN, "ok")
    for name in RERUN:
        fresh = json.loads((tmp_path / f"{name}.json").read_text())
        kept = json.loads((FIXTURES / "engines" / f"{name}.json").read_text())
        assert fresh["params"] == kept["params"]
        assert fresh["knobs"] == kept["knobs"]
        for new, old in zip(fresh["ranks"], kept["ranks"], strict=True):
            assert new["categories"] == old["categories"], name
