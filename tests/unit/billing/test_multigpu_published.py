"""Modelled multi-GPU throughput against published torchtitan runs (`benchmarks/multigpu.py`, nothing fitted)."""

from __future__ import annotations

import sys

from conftest import BENCHMARKS

sys.path.insert(0, str(BENCHMARKS))
from multigpu import compare, load_rows, modelled, summary  # noqa: E402

RESULTS = compare()


def test_every_row_cites_a_pinned_commit_and_a_table():
    for row in load_rows():
        assert "/blob/" in row["source_text"] and row["where"], row["id"]
        assert row["tokens_per_gpu_s"] > 0


def test_error_against_published_throughput_is_what_docs_state():
    # docs/accuracy.md states median 15.3%, worst 16.6%; a change to the time model that moves these must update it.
    # (Was 13.4%: issue 29 bills torchtitan's op-level SAC rows as sac-op, which recomputes every second matmul,
    # instead of HF-style selective; the H100 rows moved from +12/+15% to +6/+9%, the A100 op rows down with the
    # other A100 rows.)
    median, worst = summary(RESULTS)
    assert round(median, 3) == 0.153 and round(worst, 3) == 0.166


def test_op_sac_bills_torchtitans_llama31_8b_run_closer_than_hf_selective():
    # torchtitan docs/performance.md at eaea6f6 (Table 1, FSDP, 8 H100s; llama3_8b.toml: selective_ac_option "op"):
    # 5,762 tokens/s/GPU. Op-level SAC recomputes every second matmul (k, o, up): slower than HF-style selective,
    # which saves them all, and within 8% of the published figure where HF-style selective was 12% fast.
    row = next(r for r in load_rows() if r["id"] == "titan-h100-l31-8b-8gpu")
    hf_row = {**row, "memdoc_args": ["selective" if a == "sac-op" else a for a in row["memdoc_args"]]}
    op_rate, hf_rate = modelled(row).tokens_per_second, modelled(hf_row).tokens_per_second
    published = row["tokens_per_gpu_s"]
    assert op_rate < hf_rate
    assert abs(op_rate / published - 1) < 0.08 < abs(hf_rate / published - 1)


def test_multi_node_runs_cross_the_network_single_node_runs_nvlink():
    by_id = {r["id"]: r for r in RESULTS}
    assert "NVLink" in by_id["titan-h100-l31-8b-8gpu"]["link"]
    assert "RoCE v2 400 Gb/s" in by_id["titan-h100-l31-8b-128gpu"]["link"]
