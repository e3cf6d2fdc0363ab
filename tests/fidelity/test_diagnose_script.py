"""`memdoc diagnose SCRIPT`: the shipped examples run on CPU, with exact model-state bytes.

Each example runs once per test session (in-process through the CLI, `--json`); the tests compute
weights, gradients and optimizer states independently from a model built here the same way.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from conftest import EXAMPLES, ROOT  # noqa: E402
from conftest import invoke_diagnose as run_cli  # noqa: E402

_CACHE: dict = {}


def diagnose_json(name: str, *script_args: str):
    """(exit code, JSON report, stderr) of `memdoc diagnose examples/NAME --json -- ARGS`, cached."""
    key = (name, script_args)
    if key not in _CACHE:
        argv = [str(EXAMPLES / name), "--json"] + (["--", *script_args] if script_args else [])
        res = run_cli(*argv)
        _CACHE[key] = (res.exit_code, json.loads(res.stdout), res.stderr)
    return _CACHE[key]


def example(module: str):
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    return importlib.import_module(module)


def nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def adamw_state_bytes(params) -> int:
    """exp_avg + exp_avg_sq (param-sized) + one fp32 scalar `step` per parameter."""
    params = list(params)
    return 2 * nbytes(params) + 4 * len(params)


def ids(report) -> set[str]:
    return {f["id"] for f in report["findings"]}


# ------------------------------------------------------------------------------------ examples
@pytest.mark.slow
def test_plain_loop_exact_states_and_findings():
    code, rep, err = diagnose_json("plain_loop.py", "--batch", "256")
    model = example("plain_loop").TinyMLP()
    params = list(model.parameters())
    w = nbytes(params)
    assert code == 0
    assert rep["mode"] == "script" and rep["stop_reason"] == "steps" and rep["stopped_after_steps"] == 2
    assert rep["oom"] is None
    assert rep["states"] == {"weights": w, "gradients": w, "optimizer": adamw_state_bytes(params), "trainable": w}
    m = rep["measured"]
    assert set(m) >= {"weights", "gradients", "optimizer", "activations", "other", "peak_allocated"}
    assert m["weights"] == w
    assert m["optimizer"] == adamw_state_bytes(params)  # the peak is in step 2: states exist
    assert m["activations"] > 0 and rep["peak_phase"] in ("forward", "backward")
    assert m["peak_allocated"] == sum(m[k] for k in ("weights", "gradients", "optimizer", "activations", "other"))
    # activations: at least the two blocks' hidden (batch × 1024 fp32) tensors are saved for backward
    assert rep["phases"]["forward"]["activations"] >= 2 * 256 * 1024 * 4
    assert rep["phases"]["optimizer"]["gradients"] == w
    assert ids(rep) >= {"amp-off", "optimizer-dominates"}
    assert "foreach-temporaries" not in ids(rep)  # CPU AdamW is single-tensor
    for f in rep["findings"]:
        assert f["prescribe"].startswith("memdoc prescribe --symptom ")
    assert "step 0 loss" in err  # the script's own output still comes through (on stderr with --json)


@pytest.mark.slow
def test_foreach_temporaries_at_the_step():
    code, rep, _ = diagnose_json("plain_loop.py", "--batch", "8", "--foreach")
    w = nbytes(example("plain_loop").TinyMLP().parameters())
    assert code == 0
    assert rep["peak_phase"] == "optimizer"
    assert rep["measured"]["gradients"] == w
    assert rep["measured"]["other"] >= w / 2  # foreach keeps param-sized scratch lists
    assert "foreach-temporaries" in ids(rep)
    assert rep["optimizers"][0]["foreach"] is True


@pytest.mark.slow
def test_hf_trainer_measured_vs_billed():
    code, rep, _ = diagnose_json("hf_trainer.py")
    hf = example("_tiny_hf")
    model = hf.tiny_model()
    params = list(model.parameters())
    w = nbytes(params) + nbytes(model.buffers())
    assert code == 0 and rep["stop_reason"] == "steps" and rep["stopped_after_steps"] == 2
    assert rep["states"]["weights"] == w
    assert rep["states"]["trainable"] == nbytes(params)
    assert rep["states"]["gradients"] == nbytes(params)
    assert rep["states"]["optimizer"] == adamw_state_bytes(params)
    assert rep["measured"]["weights"] == w
    assert rep["measured"]["activations"] > 0
    assert rep["models"] == ["Qwen2ForCausalLM"]
    det = rep["hf"]["detected_plan"]
    assert det["micro_batch"] == 2 and det["seq_len"] == 32 and det["precision"] == "fp32"
    billed = rep["hf"]["billed"]
    assert billed["peak_allocated"] == pytest.approx(rep["measured"]["peak_allocated"], rel=0.05)
    assert "dataloader-workers-0" in ids(rep)


@pytest.mark.slow
def test_lora_peft_counts_only_adapters_as_trainable():
    code, rep, _ = diagnose_json("lora_peft.py")
    torch.manual_seed(0)
    model = example("lora_peft").build()
    lora = [p for n, p in model.named_parameters() if p.requires_grad]
    assert lora and all("lora_" in n for n, p in model.named_parameters() if p.requires_grad)
    t = nbytes(lora)
    assert code == 0
    assert rep["states"]["trainable"] == t
    assert rep["states"]["gradients"] == t
    assert rep["states"]["optimizer"] == adamw_state_bytes(lora)
    assert rep["states"]["weights"] == nbytes(model.parameters()) + nbytes(model.buffers())
    assert rep["measured"]["optimizer"] == adamw_state_bytes(lora)
    assert rep["measured"]["activations"] > 0
    det = rep["hf"]["detected_plan"]
    assert det["method"] == "lora" and det["lora_rank"] == 8 and sorted(det["lora_targets"]) == ["q_proj", "v_proj"]
    assert det["micro_batch"] == 4 and det["seq_len"] == 64
    assert det["lora_dropout"] == 0.0  # the script's LoraConfig(lora_dropout=0.0), billed as such
    assert rep["hf"]["billed"]["peak_allocated"] == pytest.approx(rep["measured"]["peak_allocated"], rel=0.05)
    assert "ckpt-not-active" not in ids(rep)


@pytest.mark.slow
def test_checkpointing_requested_but_not_effective():
    code, rep, _ = diagnose_json("ckpt_not_effective.py")
    model = example("_tiny_hf").tiny_model()
    params = list(model.parameters())
    assert code == 0
    assert rep["states"]["optimizer"] == adamw_state_bytes(params)
    assert rep["measured"]["activations"] > 0
    finding = next(f for f in rep["findings"] if f["id"] == "ckpt-not-active")
    assert finding["severity"] == "error"
    assert finding["modules"] == ["model.layers.0", "model.layers.1"]
    assert "eval mode" in finding["message"]
    assert finding["prescribe"] == "memdoc prescribe --symptom ckpt-no-savings"


def test_checkpointing_active_is_not_flagged(tmp_path):
    script = tmp_path / "ckpt_ok.py"
    script.write_text(
        f"import sys; sys.path.insert(0, {str(EXAMPLES)!r})\n"
        + "import torch\nfrom _tiny_hf import tiny_model, random_batch\n"
        "m = tiny_model(); "
        "m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={'use_reentrant': True}); m.train()\n"
        "opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for i in range(3):\n    m(**random_batch(2, 16)).loss.backward(); opt.step(); opt.zero_grad()\n"
    )
    res = run_cli(str(script), "--json")
    rep = json.loads(res.stdout)
    assert res.exit_code == 0
    assert "ckpt-not-active" not in ids(rep)
    assert "ckpt-reentrant" in ids(rep)
    assert rep["hf"]["detected_plan"]["checkpointing"] == "full"


def test_oom_mid_step_is_reported_as_the_users():
    code, rep, err = diagnose_json("oom_midstep.py")
    w = nbytes(example("plain_loop").TinyMLP().parameters())
    assert code == 3
    assert rep["stop_reason"] == "oom" and rep["stopped_after_steps"] == 1
    assert rep["oom"]["message"].startswith("CUDA out of memory. Tried to allocate 2.00 GiB")
    assert rep["oom"]["phase"] == "forward" and rep["oom"]["step"] == 2
    # the doctor's diagnosis (issue 24): a 2 GiB request (≥ 1/32 of the card) on a cross_entropy line is a large block
    assert rep["oom"]["prescribe"] == "memdoc prescribe --symptom long-sample-oom"
    assert rep["states"]["weights"] == w and rep["measured"]["weights"] == w
    assert rep["phases"]["forward"]["activations"] > 0
    assert "oom_midstep.py" in err and "OutOfMemoryError" in err
    assert "internal error" not in err


def test_never_steps_reports_what_ran():
    code, rep, err = diagnose_json("no_step.py")
    w = nbytes(example("plain_loop").TinyMLP().parameters())
    assert code == 0
    assert rep["stop_reason"] == "finished" and rep["stopped_after_steps"] == 0
    assert rep["states"] == {"weights": w, "gradients": w, "optimizer": 0, "trainable": w}
    assert rep["measured"]["optimizer"] == 0
    assert rep["phases"]["forward"]["activations"] > 0
    assert rep["peak_phase"] in ("forward", "backward")
    assert "foreach-temporaries" not in ids(rep)
    assert any("without an optimizer step" in n for n in rep["notes"])
    assert "grad-norm" in err


def test_syntax_error_is_one_line_exit_2():
    res = run_cli(str(EXAMPLES / "broken_syntax.py"))
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "broken_syntax.py:5: SyntaxError" in lines[0]


def test_missing_script_exit_2(tmp_path):
    res = run_cli(str(tmp_path / "nope.py"))
    assert res.exit_code == 2 and "does not exist" in res.stderr


# --------------------------------------------------------------------------- the script's world
def test_user_exception_traceback_is_theirs(tmp_path):
    script = tmp_path / "boom.py"
    script.write_text("import torch\n\ndef load():\n    raise ValueError('bad shard 7')\n\nx = torch.ones(3)\nload()\n")
    res = run_cli(str(script))
    assert res.exit_code == 1
    assert "boom.py" in res.stderr and "ValueError: bad shard 7" in res.stderr and "line 4" in res.stderr
    assert "internal error" not in res.stderr and "runpy" not in res.stderr and "script_runner" not in res.stderr
    assert "raised an exception" in res.stdout


def test_argv_name_and_exit_status(tmp_path):
    script = tmp_path / "args.py"
    script.write_text("import sys\nprint('ARGV', sys.argv[1:], __name__)\nsys.exit(4)\n")
    res = run_cli(str(script), "--", "--lr", "1e-4", "x")
    assert "ARGV ['--lr', '1e-4', 'x'] __main__" in res.stdout
    assert res.exit_code == 4
    assert res.stdout.index("ARGV") < res.stdout.index("memdoc diagnose")


def test_timeout_stops_a_script_that_never_steps(tmp_path):
    script = tmp_path / "slow.py"
    script.write_text("import time, torch\nx = torch.ones(1000)\nwhile True:\n    time.sleep(0.02)\n")
    res = run_cli(str(script), "--timeout", "0.5", "--json")
    rep = json.loads(res.stdout)
    assert res.exit_code == 0 and rep["stop_reason"] == "timeout" and rep["stopped_after_steps"] == 0


@pytest.mark.slow
def test_terminal_report_follows_the_scripts_output():
    proc = subprocess.run(
        [sys.executable, "-m", "memdoc", "diagnose", str(EXAMPLES / "plain_loop.py"), "--", "--batch", "64"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.index("step 0 loss") < out.index("memdoc diagnose") < out.index("Findings")
    assert "memdoc prescribe --symptom" in out
