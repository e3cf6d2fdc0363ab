"""`diagnose --snapshot` drawing code on the two real CUDA snapshots recorded on an H200 (torch 2.11).

Their segment blocks carry `address` and trace events `addr`; the drawing code crashed with
KeyError 'addr' on them before.
"""

import pickle

import pytest
from conftest import FIXTURES

from memdoc.probe.cuda_stats import snapshot_timeline
from memdoc.render.timeline import timeline_html

FIX = FIXTURES


@pytest.mark.parametrize("name", ["hf-step.pickle", "mlp-snapshot.pickle"])
def test_timeline_of_a_real_snapshot(name):
    with open(FIX / name, "rb") as f:
        snap = pickle.load(f)
    points = snapshot_timeline(snap)
    assert points
    trace = snap["device_traces"][0]
    alloc = sum(1 for e in trace if e["action"] == "alloc")
    free = sum(1 for e in trace if e["action"] in ("free_requested", "free_completed"))
    assert len(points) <= alloc + free
    assert timeline_html(points, title="t", notes=[]).count("<svg") == 1


def test_replayed_total_ends_at_the_snapshots_allocated_bytes():
    # hf-step.pickle was recorded from the start: the replay must end at what its segments hold
    with open(FIX / "hf-step.pickle", "rb") as f:
        snap = pickle.load(f)
    allocated = sum(b["size"] for s in snap["segments"] for b in s["blocks"] if b["state"] == "active_allocated")
    requested = sum(
        b["requested_size"] for s in snap["segments"] for b in s["blocks"] if b["state"] == "active_allocated"
    )
    assert snapshot_timeline(snap)[-1]["total"] in (allocated, requested)
