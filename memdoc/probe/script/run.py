"""The run: execute the script under the instrumentation and build its result."""

from __future__ import annotations

import linecache
import os
import runpy
import sys
import time
from pathlib import Path

from memdoc.core.billing.measurement import Measurement
from memdoc.core.doctor.findings import RunFacts, lint
from memdoc.probe.script.cuda import cuda_collect, cuda_start
from memdoc.probe.script.detect import detect_hf
from memdoc.probe.script.guard import ScriptExit, exit_as_stop, leave_if_child, restore_stdio, watchdog
from memdoc.probe.script.result import ScriptResult
from memdoc.probe.script.sandbox import Stop, alarm, check_script, filtered_traceback, script_env
from memdoc.probe.script.session import Session, instrument, make_tracker, storage_key


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
    cuda = cuda_start(session)
    stop_reason = "finished"
    script_exit = None
    tb_text = None
    oom = None
    start = time.monotonic()
    tracker = make_tracker(session)
    parent = os.getpid()

    def stuck():
        session.in_report = True
        session.deadline = None
        try:
            result = build_result(session, path, "timeout", None, None, None, cuda, want_snapshot)
            result.elapsed_s = time.monotonic() - start
            result.notes.append(
                "the script ignored memdoc's stop at --timeout (it catches BaseException or "
                "SIGALRM): memdoc reported what it measured and ended the process"
            )
        except Exception:  # the script is still running and may have changed what the report reads
            result = None
        on_stuck(result)

    try:
        with (
            restore_stdio(),
            script_env(path, list(args or []), stdout_to_stderr),
            instrument(session),
            exit_as_stop(),
            watchdog(timeout, on_stuck and stuck),
            alarm(timeout),
            tracker,
        ):
            try:
                runpy.run_path(str(path), run_name="__main__")
            except ScriptExit as stop:
                stop_reason, script_exit = "exit", stop.code
            except Stop as stop:
                stop_reason = stop.reason
            except SystemExit as exc:
                code = exc.code
                script_exit = code if isinstance(code, int) else (0 if code is None else 1)
                if code not in (None, 0) and not isinstance(code, int):
                    print(code, file=sys.stderr)
                stop_reason = "exit"
            except torch.OutOfMemoryError as exc:
                stop_reason = "oom"
                oom = {
                    "message": str(exc).strip().splitlines()[0] if str(exc).strip() else "out of memory",
                    "phase": session.bucket(),
                    "step": session.step_index + 1,
                    "prescribe": "memdoc prescribe --symptom "
                    + ("startup-oom" if session.steps == 0 else "mid-run-oom"),
                }
                tb_text = filtered_traceback(exc, path)
            except KeyboardInterrupt:
                stop_reason, script_exit = "interrupted", 130
            except Exception as exc:
                stop_reason = "error"
                tb_text = filtered_traceback(exc, path)
    except ScriptExit as stop:
        stop_reason, script_exit = "exit", stop.code
    except Stop as stop:  # a stop that fired while leaving the script's context managers
        stop_reason = stop.reason
    finally:
        linecache.checkcache()
    leave_if_child(parent, script_exit)
    session.in_report = True
    result = build_result(session, path, stop_reason, oom, tb_text, script_exit, cuda, want_snapshot)
    result.elapsed_s = time.monotonic() - start
    session.roots.clear()
    session.optimizers.clear()
    session.live.clear()
    return result


def build_result(session, path, stop_reason, oom, tb_text, script_exit, cuda, want_snapshot) -> ScriptResult:
    torch = session.torch
    session.sweep()
    phases, peak_phase, measured = session.peaks()
    measurement = Measurement.from_phases(phases, mode="script") if phases else None
    notes = []
    setup = session.phase_peak.get("setup")
    if setup and setup["peak_allocated"] > measured["peak_allocated"]:
        notes.append(
            f"memory peaked before the first forward pass (setup: {setup['peak_allocated']} bytes); the figures are for the training phases"
        )
    weights, grads, opt = session.state_bytes()
    trainable = session.trainable()
    trainable_bytes = 0
    seen = set()
    for p in trainable:
        k = storage_key(p)
        if k and k[0] not in seen:
            seen.add(k[0])
            trainable_bytes += k[1]
    states = {
        "weights": sum(weights.values()),
        "gradients": sum(grads.values()),
        "optimizer": sum(opt.values()),
        "trainable": trainable_bytes,
    }
    names = session.names()
    result = ScriptResult(
        script=str(path),
        stop_reason=stop_reason,
        steps=session.steps,
        measurement=measurement,
        measured=measured,
        peak_phase=peak_phase,
        phases=phases,
        states=states,
        traceback=tb_text,
        oom=oom,
        script_exit_code=script_exit,
        models=[type(r).__name__ for r in session.roots.values()],
        optimizers=list(session.opt_info.values()),
        notes=notes,
        cpu_timeline=session.timeline,
    )
    if stop_reason == "oom":
        result.exit_code = 3
    elif stop_reason == "error":
        result.exit_code = 1
    elif stop_reason == "exit" and script_exit:
        result.exit_code = int(script_exit)
    elif stop_reason == "interrupted":
        result.exit_code = 130
    if stop_reason == "timeout":
        result.notes.append("stopped by --timeout before the requested optimizer steps")
    if stop_reason in ("finished", "exit") and session.steps == 0:
        result.notes.append("the script ended without an optimizer step: figures are for what it ran")
    if cuda and (session.uses_cuda or stop_reason == "oom"):
        cuda_collect(result, session, want_snapshot)
        if result.cuda:
            result.measured["peak_allocated_cuda"] = result.cuda["allocated_peak"]
            result.measured["peak_reserved"] = result.cuda["reserved_peak"]
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
            result.categories = cats
        if session.cuda_oom_info and result.oom is not None:
            result.oom["allocator"] = session.cuda_oom_info
    flagged = []
    for root in session.roots.values():
        for name, m in root.named_modules():
            if getattr(m, "gradient_checkpointing", False) is True:
                flagged.append((name, m))
    # keep the innermost flagged modules (HF also flags the model that holds the layers)
    requested = [
        names.get(id(m), name)
        for name, m in flagged
        if not any(o is not m and any(x is o for x in m.modules()) for _, o in flagged)
    ]
    not_training = [
        n for n in (names.get(i, type(m).__name__) for i, m in session.ckpt_not_training.items()) if n in requested
    ]
    facts = RunFacts(
        measured=result.measured,
        max_activations=max((ph.get("activations", 0) for ph in phases.values()), default=0),
        peak_phase=peak_phase,
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
        step_start_bytes=list(session.step_starts),
        site_bytes=list(session.site_bytes),
    )
    result.facts = facts
    result.findings = lint(facts)
    detect_hf(session, result)
    return result
