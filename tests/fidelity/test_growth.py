"""`memdoc diagnose SCRIPT --steps N`: what outlives each step is found, with the script line that allocated
it (a tensor leak) or the line that stores a tensor with its autograd graph (a graph leak); lines whose
allocations are freed within the step, and the shipped examples, give no finding.

The figures are checked against torch itself: the saved activations of one step are counted with
`torch.autograd.graph.saved_tensors_hooks` on the fixtures' model and shapes, and against the shape
arithmetic of what autograd saves (torch `tools/autograd/derivatives.yaml`: ``addmm`` saves ``mat1`` and
``mat2``, ``gelu`` its input, ``_log_softmax`` its result, ``nll_loss_forward`` its input, target and
``total_weight``); the graph nodes a step adds are counted by walking `grad_fn.next_functions`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import ROOT

torch = pytest.importorskip("torch")

from typer.testing import CliRunner  # noqa: E402

from memdoc.cli import app  # noqa: E402

GROWTH = ROOT / "tests" / "fixtures" / "growth"
LEAKY = GROWTH / "leaky_loop.py"
KEPT = GROWTH / "kept_loss.py"

SAVED_PER_STEP = 256 * 64 * 4 + 2 * 256 * 256 * 4 + 256 * 1000 * 4 + 256 * 8 + 4
"""One step's saved activations of the fixtures' MLP (Linear 64→256, GELU, Linear 256→1000) on 256 rows, fp32:
the input (addmm mat1), GELU's input, GELU's output (the second addmm's mat1), log-softmax's result (also
nll_loss's input, one storage), the int64 targets and nll_loss's 4-byte total_weight; the weights
(addmm mat2, views of the parameters) are model states."""


def _diagnose(script: Path, *args: str, steps: int = 4) -> dict:
    argv = ["diagnose", str(script), "--steps", str(steps), "--json"] + (["--", *args] if args else [])
    res = CliRunner().invoke(app, argv, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def _finding(report: dict, fid: str) -> dict | None:
    return next((f for f in report["findings"] if f["id"] == fid), None)


def _growth(report: dict) -> dict | None:
    return _finding(report, "memory-growth")


def _leaks(report: dict) -> list[str]:
    return [f["id"] for f in report["findings"] if f["id"] in ("memory-growth", "graph-kept")]


def _line(script: Path, text: str) -> str:
    """'name.py:N' for the line of `script` that starts with `text` (so the test does not hard-code line numbers)."""
    n = next(i for i, line in enumerate(script.read_text().splitlines(), 1) if line.strip().startswith(text))
    return f"{script.name}:{n}"


def _one_step_graph() -> tuple[int, int]:
    """(bytes autograd saves for one step of the fixtures' MLP, graph nodes that are not parameters'
    AccumulateGrad), counted by torch's own hooks and by walking the graph."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 1000))
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in params:
            saved[st.data_ptr()] = st.nbytes()
        return t

    x, y = torch.randn(256, 64), torch.randint(0, 1000, (256,))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = torch.nn.functional.cross_entropy(model(x), y)
    nodes, stack = set(), [loss.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is not None and fn not in nodes:
            nodes.add(fn)
            stack.extend(n for n, _ in fn.next_functions)
    return sum(saved.values()), sum(type(n).__name__ != "AccumulateGrad" for n in nodes)


def test_saved_bytes_match_the_shapes():
    assert _one_step_graph()[0] == SAVED_PER_STEP


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "stored", "saved", "extra_nodes"),
    [
        # backward freed each step's saved tensors: the kept graphs grow by their nodes only
        (("--keep", "append"), "losses.append(loss)", 0, 0),
        (("--keep", "sum"), "total = total + loss", 0, 1),  # + one AddBackward0 per step
        # retain_graph=True: every kept graph also keeps its step's saved activations
        (("--keep", "append", "--retain-graph"), "losses.append(loss)", SAVED_PER_STEP, 0),
    ],
)
def test_a_kept_loss_is_named_with_the_line_that_stores_it(args, stored, saved, extra_nodes):
    report = _diagnose(KEPT, *args)
    finding = _finding(report, "graph-kept")
    assert finding is not None and finding["prescribe"] == "memdoc prescribe --symptom mid-run-oom"
    assert finding["modules"][0] == _line(KEPT, stored)
    assert "keeps the autograd graph of every step" in finding["message"]
    assert "loss.item()" in finding["detail"] and "loss.detach()" in finding["detail"]
    figures = finding["figures"]
    assert figures["kind"] == "graph" and figures["saved_bytes_per_step"] == saved
    assert figures["nodes_per_step"] == _one_step_graph()[1] + extra_nodes
    assert finding["severity"] == ("error" if saved else "warning")
    if saved:
        assert f"{saved / 2**20:.2f} MiB/step of saved activations" in finding["message"]
    assert _growth(report) is None  # a 4-byte loss per step is not a tensor leak; its graph is the leak


@pytest.mark.slow
def test_the_fixed_loss_loop_has_no_leak():
    assert _leaks(_diagnose(KEPT, "--keep", "item")) == []


@pytest.mark.slow
def test_cached_outputs_are_a_tensor_leak_at_their_line():
    script = GROWTH / "cache_outputs.py"
    finding = _growth(_diagnose(script))
    assert finding is not None and finding["figures"]["kind"] == "tensors"
    assert finding["modules"] == [_line(script, "probs = logits.softmax(-1)")]
    assert finding["figures"]["per_step_bytes"] == 256 * 1000 * 4  # one fp32 probability row per sample


@pytest.mark.slow
def test_large_freed_temporaries_are_not_blamed():
    # memdoc before issue 24 sampled at the next step's first forward, saw the growing warm-up batch there and
    # blamed decoy.py:17 (+128 KiB/step); nothing of it is alive at the end of a step
    assert _leaks(_diagnose(GROWTH / "decoy.py")) == []


@pytest.mark.slow
@pytest.mark.parametrize(
    ("leak", "line", "per_step"),
    [
        ("logits", "logits = model(x)", 8 * 32 * 1000 * 4),  # fp32 logits kept in a list
        ("metric", "seen = torch.cat(", 8 * 32 * 8),  # int64 predictions appended per step
    ],
)
def test_tensor_leaks_are_found_at_their_line(leak, line, per_step):
    finding = _growth(_diagnose(LEAKY, "--leak", leak))
    assert finding is not None and finding["prescribe"] == "memdoc prescribe --symptom mid-run-oom"
    assert finding["modules"][0] == _line(LEAKY, line)
    assert finding["figures"]["per_step_bytes"] == per_step


@pytest.mark.slow
def test_a_validation_graph_kept_by_a_running_sum():
    # issue 24: a graph kept alive is named as such, at the line that stores it (before, memory-growth blamed
    # the validation line that allocates the graph's tensors; the running sum is what keeps them)
    finding = _finding(_diagnose(LEAKY, "--leak", "loss"), "graph-kept")
    assert finding is not None and finding["modules"][0] == _line(LEAKY, "running = running + val")
    assert finding["figures"]["saved_bytes_per_step"] == SAVED_PER_STEP


def test_fixed_loop_does_not_grow():
    assert _leaks(_diagnose(LEAKY, "--leak", "none")) == []


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "args"), [("plain_loop.py", ("--batch", "64")), ("ckpt_not_effective.py", ()), ("lora_peft.py", ())]
)
def test_shipped_examples_do_not_grow(name, args):
    report = _diagnose(ROOT / "examples" / name, *args, steps=3)
    assert report["stopped_after_steps"] == 3 and _leaks(report) == []


@pytest.mark.slow
def test_hf_trainer_example_does_not_grow(tmp_path):
    # the shipped example stops at max_steps=2: run a copy with 4 steps
    for name in ("hf_trainer.py", "_tiny_hf.py"):
        text = (ROOT / "examples" / name).read_text()
        text = text.replace('Path(__file__).resolve().parents[1] / "memdoc"', f'Path({str(ROOT)!r}) / "memdoc"')
        (tmp_path / name).write_text(text.replace("max_steps=2,", "max_steps=4,"))
    report = _diagnose(tmp_path / "hf_trainer.py", steps=4)
    assert report["stopped_after_steps"] == 4 and _leaks(report) == []
