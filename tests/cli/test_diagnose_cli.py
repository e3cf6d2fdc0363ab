"""`memdoc diagnose MODEL` (dry run vs bill), the CUDA evidence helpers on recorded structures, and lint rules."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
from conftest import EXAMPLES, ROOT, TINY_LLAMA
from conftest import invoke_diagnose as run_cli

from memdoc.core.doctor.findings import RunFacts, lint
from memdoc.probe.cuda_stats import digest_stats, snapshot_timeline
from memdoc.render.timeline import timeline_html

FIXTURES = ROOT / "tests" / "fixtures" / "diagnose"
ITEMS = ("weights", "gradients", "optimizer", "activations", "other")


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


# --------------------------------------------------------------------------------- dry run
@pytest.mark.slow
def test_dry_run_json_has_every_key():
    pytest.importorskip("transformers")
    res = run_cli("Qwen/Qwen2.5-0.5B", "--seq", "256", "--json")
    assert res.exit_code == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["mode"] == "traced"
    assert set(data["measured"]) >= {*ITEMS, "peak_allocated"}
    assert set(data["billed"]) >= {*ITEMS, "peak_allocated", "peak_reserved"}
    assert data["peak_phase"] in ("forward", "backward", "optimizer")
    assert data["modules"] and {"module", "activation_bytes"} <= set(data["modules"][0])
    assert data["plan"]["seq_len"] == 256
    m, b = data["measured"], data["billed"]
    assert m["weights"] == pytest.approx(b["weights"], rel=1e-3)  # bf16 weights of 494M params
    assert m["peak_allocated"] == pytest.approx(b["peak_allocated"], rel=0.05)


@pytest.mark.slow
def test_dry_run_table_compares_with_the_bill(tmp_path):
    pytest.importorskip("transformers")
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY_LLAMA))
    res = run_cli(str(config), "--seq", "128", "--batch", "2")
    assert res.exit_code == 0, res.stderr
    out = res.stdout
    for word in (
        "traced step vs bill",
        "measured",
        "billed",
        "bill − measured",
        "peak allocated",
        "peak in",
        "Top modules",
    ):
        assert word in out


def test_dry_run_errors(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    res = run_cli("no-such-org/NoSuchModel-7B", "--json")
    assert res.exit_code == 2 and res.stderr.startswith("Error: unknown model")
    res = run_cli("Qwen/Qwen2.5-0.5B", "--device", "tpu")
    assert res.exit_code == 2 and "--device" in res.stderr
    res = run_cli("Qwen/Qwen2.5-0.5B", "--", "--lr", "1")
    assert res.exit_code == 2 and "scripts only" in res.stderr


def test_device_cuda_without_cuda_is_a_clear_error():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("CUDA present: covered by test_device_cuda_real")
    res = run_cli("Qwen/Qwen2.5-0.5B", "--seq", "64", "--device", "cuda")
    assert res.exit_code == 2
    assert "no CUDA device" in res.stderr and "internal error" not in res.stderr


@pytest.mark.cuda
def test_device_cuda_real():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    res = run_cli("Qwen/Qwen2.5-0.5B", "--seq", "256", "--device", "cuda", "--json")
    assert res.exit_code == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["cuda"]["peak_allocated"] == pytest.approx(data["measured"]["peak_allocated"], rel=0.1)


@pytest.mark.cuda
def test_script_on_real_cuda(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    examples = EXAMPLES
    snap = tmp_path / "mem.pickle"
    res = run_cli(str(examples / "plain_loop.py"), "--json", "--snapshot", str(snap), "--", "--batch", "256")
    assert res.exit_code == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["cuda"]["allocated_peak"] > 0 and data["measured"]["peak_reserved"] >= data["cuda"]["allocated_peak"]
    assert data["measured"]["peak_allocated_cuda"] == pytest.approx(data["measured"]["peak_allocated"], rel=0.1)
    assert snap.is_file() and Path(str(snap) + ".html").is_file()


# ------------------------------------------------------------------------ CUDA evidence (recorded)
def test_digest_memory_stats_and_fragmentation_finding(monkeypatch):
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    monkeypatch.delenv("PYTORCH_ALLOC_CONF", raising=False)
    frag = digest_stats(fixture("memory_stats_fragmented.json"))
    assert frag["allocated_peak"] == 19864223744 and frag["reserved_peak"] == 24561844224
    assert frag["inactive_split"] == 3221225472 and frag["num_alloc_retries"] == 4 and frag["num_ooms"] == 0
    findings = lint(RunFacts(cuda=frag))
    assert [f.id for f in findings] == ["fragmentation"]
    assert findings[0].prescribe == "memdoc prescribe --symptom mid-run-oom"
    assert "expandable_segments:True" in findings[0].message
    clean = digest_stats(fixture("memory_stats_clean.json"))
    assert lint(RunFacts(cuda=clean)) == []
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    assert lint(RunFacts(cuda=digest_stats(fixture("memory_stats_fragmented.json")))) == []


def test_snapshot_timeline_replays_the_trace():
    snap = fixture("snapshot.json")
    base = 139880000000000
    points = snapshot_timeline(snap, {base: "weights", base + 2097152: "gradients"})
    MiB = 2**20
    assert [p["total"] for p in points] == [
        2 * MiB,
        4 * MiB,
        12 * MiB,
        20 * MiB,
        12 * MiB,
        14 * MiB,
        6 * MiB,
        4 * MiB,
        4 * MiB,
    ]
    assert points[-1]["action"] == "oom"
    assert (
        points[-1]["weights"] == 2 * MiB and points[-1]["gradients"] == 2 * MiB and points[-1]["activations+other"] == 0
    )
    page = timeline_html(points, title="t", marks=[(3, "backward")])
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page and "<polygon" in page
    assert "<script" not in page and "src=" not in page  # offline: nothing to load
    assert "20.0 MiB" in page


def test_snapshot_written_with_offline_html(tmp_path):
    from memdoc.commands.diagnose_script import write_snapshot_files
    from memdoc.probe.script import ScriptResult

    result = ScriptResult(
        script="train.py",
        stop_reason="oom",
        steps=1,
        measured={},
        peak_phase="forward",
        phases={},
        states={},
        snapshot=fixture("snapshot.json"),
        categories={139880000000000: "weights"},
    )
    written = write_snapshot_files(result, str(tmp_path / "mem.pickle"), force=False)  # raw --snapshot text (issue 27)
    assert written == [str(tmp_path / "mem.pickle"), str(tmp_path / "mem.pickle.html")]
    assert pickle.loads((tmp_path / "mem.pickle").read_bytes())["device_traces"][0][0]["action"] == "segment_alloc"
    page = (tmp_path / "mem.pickle.html").read_text()
    assert "CUDA allocator trace" in page and "mem.pickle (next to this page)" in page


def test_cpu_snapshot_html_from_a_script(tmp_path):
    pytest.importorskip("torch")
    script = tmp_path / "t.py"
    script.write_text(
        "import torch\nm = torch.nn.Linear(64, 64)\nopt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for _ in range(3):\n    m(torch.randn(32, 64)).sum().backward(); opt.step(); opt.zero_grad()\n"
    )
    res = run_cli(str(script), "--snapshot", str(tmp_path / "s.pickle"), "--summary")
    assert res.exit_code == 0, res.stderr
    assert (tmp_path / "s.pickle.html").is_file() and not (tmp_path / "s.pickle").exists()
    assert "no memory_summary()" in res.stdout and "s.pickle.html" in res.stdout


# -------------------------------------------------------------------------------- lint rules
def test_lint_rules_on_synthetic_facts():
    MiB = 2**20
    facts = RunFacts(
        measured={
            "weights": 100 * MiB,
            "gradients": 100 * MiB,
            "optimizer": 200 * MiB,
            "activations": 0,
            "other": 100 * MiB,
            "peak_allocated": 500 * MiB,
        },
        peak_phase="optimizer",
        trainable_bytes=100 * MiB,
        trainable_dtypes=["bfloat16"],
        autocast=False,
        forward_seen=True,
        optimizers=[{"class": "AdamW", "foreach": None, "fused": None}],
        uses_cuda=True,
        steps=2,
        ckpt_requested=["model.layers.0", "model.layers.1"],
        ckpt_wrapped=["model.layers.0"],
        ckpt_calls=1,
        ckpt_reentrant_calls=1,
        dataloader_workers=[2],
    )
    found = {f.id: f for f in lint(facts)}
    assert set(found) == {"ckpt-not-active", "ckpt-reentrant", "optimizer-dominates", "foreach-temporaries"}
    assert found["ckpt-not-active"].modules == ("model.layers.1",)
    assert list(found)[0] == "ckpt-not-active"  # errors first
    # fused AdamW on CUDA has no foreach temporaries; fp32 without autocast is amp-off
    facts.optimizers = [{"class": "AdamW", "foreach": None, "fused": True}]
    facts.trainable_dtypes = ["float32"]
    ids = {f.id for f in lint(facts)}
    assert "foreach-temporaries" not in ids and "amp-off" in ids
    facts.autocast = True
    assert "amp-off" not in {f.id for f in lint(facts)}
