"""The run: execute the script under the instrumentation and build its result."""

from __future__ import annotations

import linecache
import os
import runpy
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from memdoc.core.billing.measurement import Measurement
from memdoc.core.doctor.findings import RunFacts, lint
from memdoc.probe.script.cuda import cuda_collect, cuda_start
from memdoc.probe.script.detect import detect_hf
from memdoc.probe.script.guard import (
    TERMINATED_EXIT,
    ScriptExit,
    exit_as_stop,
    leave_if_child,
    restore_stdio,
    terminate_as_stop,
    watchdog,
)
from memdoc.probe.script.result import ScriptResult
from memdoc.probe.script.sandbox import Stop, alarm, check_script, filtered_traceback, script_env
from memdoc.probe.script.session import Session, instrument, make_tracker, storage_key
from memdoc.probe.script.survivors import sample, storing_sites
from memdoc.probe.script.trl_phases import post_notes, post_report


@dataclass
class Outcome:
    """How the script's run ended, before anything was measured."""

    stop_reason: str = "finished"
    """One of ScriptResult.stop_reason's values."""
    script_exit: int | None = None
    """The script's own exit status (sys.exit, os._exit; 130 on KeyboardInterrupt), None when it did not exit."""
    oom: dict | None = None
    """{"message", "phase", "step", "prescribe"} when torch.OutOfMemoryError ended it."""
    traceback: str | None = None
    """The exception's traceback, limited to the script's own frames (an OOM or another error)."""


def run_script(
    path: str | Path,
    args: list[str] | None = None,
    *,
    steps: int = 2,
    timeout: float | None = 300.0,
    stdout_to_stderr: bool = False,
    want_snapshot: bool = False,
    on_stuck=None,
) -> ScriptResult:
    """Run the script for `steps` optimizer steps (or until it ends / `timeout` s) and measure it.

    `on_stuck(result)` is called from a watchdog thread when the script outlives the timeout by
    ignoring the stop (see `memdoc.probe.script.guard`); it must report and end the process.
    """
    path = Path(path)
    check_script(path)
    import torch

    session = Session(steps=steps, timeout=timeout)
    session.script_path = str(path)  # the filename runpy compiles the script under
    session.step_end = sample
    cuda = cuda_start(session)
    outcome = Outcome()
    start = time.monotonic()
    tracker = make_tracker(session)
    parent = os.getpid()
    stuck, terminated = (
        (_stuck_reporter(session, path, cuda, want_snapshot, start, on_stuck, reason) for reason in STUCK_NOTES)
        if on_stuck
        else (None, None)
    )
    try:
        with (
            restore_stdio(),
            script_env(path, list(args or []), stdout_to_stderr),
            instrument(session),
            exit_as_stop(),
            watchdog(timeout, stuck),
            terminate_as_stop(lambda: Stop("terminated"), terminated),
            alarm(timeout),
            tracker,
        ):
            outcome = _execute(session, path, torch)
    except ScriptExit as stop:
        outcome.stop_reason, outcome.script_exit = "exit", stop.code
    except Stop as stop:  # a stop that fired while leaving the script's context managers
        outcome.stop_reason = stop.reason
    finally:
        linecache.checkcache()
    leave_if_child(parent, outcome.script_exit)
    session.in_report = True
    result = build_result(session, path, outcome, cuda, want_snapshot)
    result.elapsed_s = time.monotonic() - start
    session.roots.clear()
    session.optimizers.clear()
    session.live.clear()
    return result


STUCK_NOTES = {
    "timeout": "the script ignored memdoc's stop at --timeout (it catches BaseException or SIGALRM): "
    "memdoc reported what it measured and ended the process",
    "terminated": "the script ignored memdoc's stop at SIGTERM (it catches BaseException): "
    "memdoc reported what it measured and ended the process",
}
"""The note of a report made from a watchdog thread, by the stop the script swallowed."""


def _stuck_reporter(session, path: Path, cuda, want_snapshot: bool, start: float, on_stuck, reason: str):
    """The watchdog's callback: report what was measured when the script ignores the stop, then `on_stuck(result)`."""

    def stuck():
        session.in_report = True
        session.deadline = None
        try:
            result = build_result(session, path, Outcome(reason), cuda, want_snapshot)
            result.elapsed_s = time.monotonic() - start
            result.notes.append(STUCK_NOTES[reason])
        except Exception:  # the script is still running and may have changed what the report reads
            result = None
        on_stuck(result)

    return stuck


def _execute(session, path: Path, torch) -> Outcome:
    """Run the script as __main__ and classify how it ended: stopped, exited, OOM, interrupted or raised."""
    try:
        runpy.run_path(str(path), run_name="__main__")
    except ScriptExit as stop:
        return Outcome("exit", stop.code)
    except Stop as stop:
        return Outcome(stop.reason)
    except SystemExit as exc:
        return Outcome("exit", _exit_status(exc.code))
    except torch.OutOfMemoryError as exc:
        return Outcome("oom", oom=_oom_report(session, exc), traceback=filtered_traceback(exc, path))
    except KeyboardInterrupt:
        return Outcome("interrupted", 130)
    except BaseException as exc:  # noqa: BLE001 (Exception, and the script's own BaseException subclasses)
        return Outcome("error", traceback=filtered_traceback(exc, path))
    return Outcome()


def _exit_status(code) -> int:
    """The status `sys.exit(code)` gives the process: None → 0, an int as is, anything else 1 (printed to stderr)."""
    if code not in (None, 0) and not isinstance(code, int):
        print(code, file=sys.stderr)
    return code if isinstance(code, int) else (0 if code is None else 1)


def _oom_report(session, exc) -> dict:
    """The OOM's first message line, the phase and step it hit, and the prescribe command for it."""
    return {
        "message": str(exc).strip().splitlines()[0] if str(exc).strip() else "out of memory",
        "phase": session.bucket(),
        "step": session.step_index + 1,
        "prescribe": "memdoc prescribe --symptom " + ("startup-oom" if session.steps == 0 else "mid-run-oom"),
    }


def build_result(session, path, outcome: Outcome, cuda, want_snapshot) -> ScriptResult:
    """The ScriptResult of the session as it stands: peaks, model states, exit code, CUDA evidence, findings."""
    session.sweep()
    phases, peak_phase, measured = session.peaks()
    measurement = Measurement.from_phases(phases, mode="script") if phases else None
    notes = _setup_notes(session, measured)
    weights, grads, opt = session.state_bytes()
    trainable = session.trainable()
    trainable_bytes = _unique_storage_bytes(trainable)
    states = {
        "weights": sum(weights.values()),
        "gradients": sum(grads.values()),
        "optimizer": sum(opt.values()),
        "trainable": trainable_bytes,
    }
    names = session.names()
    result = ScriptResult(
        script=str(path),
        stop_reason=outcome.stop_reason,
        steps=session.steps,
        measurement=measurement,
        measured=measured,
        peak_phase=peak_phase,
        phases=phases,
        states=states,
        traceback=outcome.traceback,
        oom=outcome.oom,
        script_exit_code=outcome.script_exit,
        models=[type(r).__name__ for r in session.roots.values()],
        optimizers=list(session.opt_info.values()),
        notes=notes,
        cpu_timeline=session.timeline,
    )
    _apply_stop_reason(result, session, outcome)
    if cuda and (session.uses_cuda or outcome.stop_reason == "oom"):
        _attach_cuda(result, session, want_snapshot)
    result.post = post_report(session)
    if result.post is not None:
        result.notes.extend(post_notes(result.post, measured))
    result.facts = _run_facts(session, result, trainable, trainable_bytes, names)
    result.findings = lint(result.facts)
    detect_hf(session, result)
    return result


def _setup_notes(session, measured: dict) -> list[str]:
    """A note when memory peaked during setup, before the first forward pass (the figures are for training)."""
    setup = session.phase_peak.get("setup")
    if setup and setup["peak_allocated"] > measured["peak_allocated"]:
        return [
            f"memory peaked before the first forward pass (setup: {setup['peak_allocated']} "
            "bytes); the figures are for the training phases"
        ]
    return []


def _unique_storage_bytes(tensors) -> int:
    """Bytes of the tensors' storages, each storage counted once (tied or viewed parameters share one)."""
    total = 0
    seen = set()
    for p in tensors:
        k = storage_key(p)
        if k and k[0] not in seen:
            seen.add(k[0])
            total += k[1]
    return total


def _apply_stop_reason(result: ScriptResult, session, outcome: Outcome) -> None:
    """memdoc's exit code for how the script ended (3 OOM, 1 error, its own status, 130), and the notes it calls for."""
    stop_reason = outcome.stop_reason
    if stop_reason == "oom":
        result.exit_code = 3
    elif stop_reason == "error":
        result.exit_code = 1
    elif stop_reason == "exit" and outcome.script_exit:
        result.exit_code = int(outcome.script_exit)
    elif stop_reason == "interrupted":
        result.exit_code = 130
    elif stop_reason == "terminated":
        result.exit_code = TERMINATED_EXIT
        result.notes.append("stopped by SIGTERM (a scheduler, timeout, docker stop) before the requested steps")
    if stop_reason == "timeout":
        result.notes.append("stopped by --timeout before the requested optimizer steps")
    if stop_reason in ("finished", "exit") and session.steps == 0:
        result.notes.append("the script ended without an optimizer step: figures are for what it ran")


def _attach_cuda(result: ScriptResult, session, want_snapshot: bool) -> None:
    """The CUDA allocator's evidence: its peaks in `measured`, block categories, and the OOM's allocator state."""
    cuda_collect(result, session, want_snapshot)
    if result.cuda:
        result.measured["peak_allocated_cuda"] = result.cuda["allocated_peak"]
        result.measured["peak_reserved"] = result.cuda["reserved_peak"]
        result.categories = _cuda_categories(session)
    if session.cuda_oom_info and result.oom is not None:
        result.oom["allocator"] = session.cuda_oom_info


def _cuda_categories(session) -> dict:
    """CUDA block address → weights / gradients / optimizer, for the snapshot timeline."""
    torch = session.torch
    cats = {}
    for p in session.params():
        if p.is_cuda:
            cats[p.data_ptr()] = "weights"
            if p.grad is not None:
                cats[p.grad.data_ptr()] = "gradients"
    for o in list(session.optimizers):
        for st in o.state.values():
            for v in st.values() if isinstance(st, dict) else []:
                if isinstance(v, torch.Tensor) and v.is_cuda:
                    cats[v.data_ptr()] = "optimizer"
    return cats


def _checkpointing_requested(session, names: dict) -> list[str]:
    """Names of the modules flagged `gradient_checkpointing`, innermost only (HF also flags the model
    that holds the layers)."""
    flagged = []
    for root in session.roots.values():
        for name, m in root.named_modules():
            if getattr(m, "gradient_checkpointing", False) is True:
                flagged.append((name, m))
    return [
        names.get(id(m), name)
        for name, m in flagged
        if not any(o is not m and any(x is o for x in m.modules()) for _, o in flagged)
    ]


def _run_facts(session, result: ScriptResult, trainable, trainable_bytes: int, names: dict) -> RunFacts:
    """What the findings' rules read: measured figures, dtypes, autocast, checkpointing, optimizers, data loading."""
    requested = _checkpointing_requested(session, names)
    not_training = [
        n for n in (names.get(i, type(m).__name__) for i, m in session.ckpt_not_training.items()) if n in requested
    ]
    return RunFacts(
        measured=result.measured,
        max_activations=max((ph.get("activations", 0) for ph in result.phases.values()), default=0),
        peak_phase=result.peak_phase,
        trainable_bytes=trainable_bytes,
        trainable_dtypes=sorted({str(p.dtype).replace("torch.", "") for p in trainable}),
        autocast=session.autocast_seen,
        forward_seen=session.forward_seen,
        ckpt_requested=requested,
        ckpt_wrapped=[names.get(i, type(m).__name__) for i, m in session.ckpt_wrapped.items()],
        ckpt_reentrant_calls=session.ckpt_reentrant,
        ckpt_calls=session.ckpt_calls,
        ckpt_not_training=not_training,
        optimizers=result.optimizers,
        steps=session.steps,
        uses_cuda=session.uses_cuda,
        dataloader_workers=session.dataloader_workers,
        cuda=result.cuda,
        survivors=list(session.survivors),
        stored_at=storing_sites(session.script_path, session.survivors),
    )
