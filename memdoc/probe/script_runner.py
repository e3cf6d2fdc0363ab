"""Run the user's training script in-process for N optimizer steps and measure its memory.

`run_script(path, args, steps=N, timeout=S)` executes the script like ``python path args`` (with
`runpy`, ``sys.argv`` set, ``__name__ == "__main__"``) while torch is instrumented:

- a global optimizer step post-hook counts steps and stops the script after N of them by raising
  a private `BaseException` (user code's ``except Exception`` cannot swallow it); ``timeout``
  stops scripts that never step (checked at every tensor op, and by SIGALRM in the main thread);
- `_Tracker`, a `TorchDispatchMode`, sees every tensor op and keeps the live storages (dedup by
  storage, freed ones swept before each op), so it knows the bytes alive after every op and the
  peak — the CPU analogue of `torch.cuda.max_memory_allocated()`;
- global module forward hooks find the root modules the script calls (its models), the phase
  (forward / backward — ops inside an autograd graph task — / optimizer, between the step's pre
  and post hooks) and the first input of an ``nn.Embedding`` (batch × sequence for HF models);
- ``torch.utils.checkpoint`` is watched (both implementations) to see which modules really ran
  under checkpointing; ``DataLoader`` iterators report their ``num_workers``.

At every new peak of a phase the live bytes are attributed: weights (parameters and buffers of the
models and the optimizers' params), gradients (their ``.grad``) and optimizer states (the
optimizers' ``state``) exactly from those objects; of the rest, storages allocated in the
forward of the current step and still alive are activations, everything else is "other"
(inputs, activation gradients, optimizer-step temporaries).

When CUDA is available, allocation history is recorded from the start and, at the stop or the
OOM, `memory_stats()`, `memory_summary()` and the snapshot are collected.

User errors are the user's: an exception from the script ends the run with its (filtered)
traceback, `torch.OutOfMemoryError` is reported with what was measured until then. Only a script
that cannot be read or compiled is memdoc's `ScriptError`.
"""

from __future__ import annotations

import contextlib
import linecache
import os
import runpy
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from memdoc.core.findings import Finding, RunFacts, lint
from memdoc.errors import ScriptError

PHASE_BUCKET = {"setup": "setup", "forward": "forward", "idle": "optimizer", "backward": "backward",
                "between": "optimizer", "optimizer": "optimizer"}
"""Tracker phase → reported phase. Ops between backward and the step (clipping, unscaling) and after
the step until the next forward (zero_grad, the next batch) count to the optimizer phase."""


class _Stop(BaseException):
    """Raised inside the user's script to end it; never escapes `run_script`."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass
class ScriptResult:
    """Everything measured while the script ran."""

    script: str
    stop_reason: str
    """'steps' (stopped after N steps), 'finished' (ran to its end), 'exit' (sys.exit), 'timeout',
    'oom' (torch.OutOfMemoryError) or 'error' (another exception)."""
    steps: int
    measured: dict
    """weights, gradients, optimizer, activations, other, peak_allocated (+ peak_reserved on CUDA)."""
    peak_phase: str | None
    phases: dict
    states: dict
    """Exact model-state bytes at the end: weights, gradients, optimizer (+ trainable)."""
    exit_code: int = 0
    script_exit_code: int | None = None
    traceback: str | None = None
    oom: dict | None = None
    findings: list[Finding] = field(default_factory=list)
    facts: RunFacts | None = None
    hf: dict | None = None
    """{"model_id", "config", "plan": TrainingPlan, "detected": {...}} when an HF model was found."""
    cuda: dict | None = None
    cuda_summary: str | None = None
    snapshot: dict | None = None
    categories: dict = field(default_factory=dict)
    """CUDA block address → category (weights/gradients/optimizer), for the snapshot timeline."""
    cpu_timeline: list = field(default_factory=list)
    models: list[str] = field(default_factory=list)
    optimizers: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0

    def to_json(self) -> dict:
        data = {
            "mode": "script",
            "script": self.script,
            "measured": dict(self.measured),
            "peak_phase": self.peak_phase,
            "phases": self.phases,
            "states": dict(self.states),
            "stopped_after_steps": self.steps,
            "stop_reason": self.stop_reason,
            "oom": self.oom,
            "exit_code": self.exit_code,
            "findings": [f.to_json() for f in self.findings],
            "models": list(self.models),
            "optimizers": list(self.optimizers),
            "notes": list(self.notes),
        }
        if self.cuda is not None:
            data["cuda"] = dict(self.cuda)
        return data


# ------------------------------------------------------------------------------- compile check
def check_script(path: Path) -> str:
    """The script's source, or ScriptError (exit 2) when it cannot be read or compiled."""
    try:
        source = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScriptError(f"script {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ScriptError(f"cannot read script {path}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        compile(source, str(path), "exec")
    except SyntaxError as exc:
        where = f"{path}:{exc.lineno}" if exc.lineno else str(path)
        raise ScriptError(f"{where}: {type(exc).__name__}: {exc.msg}", hint="the script does not compile; fix it and rerun") from None
    except ValueError as exc:  # null bytes
        raise ScriptError(f"cannot compile {path}: {exc}") from None
    return source


# ----------------------------------------------------------------------------------- helpers
def _storage_key(t):
    """(key, nbytes, weakref) of a plain tensor's storage, or None."""
    import torch

    if type(t) is not torch.Tensor and type(t) is not torch.nn.Parameter:
        if not isinstance(t, torch.Tensor) or getattr(t, "_is_wrapper_subclass", False):
            return None
    try:
        if t.device.type == "meta" or t.is_sparse:
            return None
        st = t.untyped_storage()
    except Exception:
        return None
    from torch.multiprocessing.reductions import StorageWeakRef

    ref = StorageWeakRef(st)
    return ref.cdata, st.nbytes(), ref


def _filtered_traceback(exc: BaseException, script: Path) -> str:
    """The user's traceback, keeping frames of files next to the script (their code)."""
    root = str(script.resolve().parent)
    memdoc_dir = str(Path(__file__).resolve().parents[1])
    frames = traceback.extract_tb(exc.__traceback__)

    def mine(f) -> bool:
        name = os.path.abspath(f.filename)
        return name.startswith(root + os.sep) and not name.startswith(memdoc_dir) and "site-packages" not in name

    keep = [f for f in frames if mine(f)]
    hidden = len(frames) - len(keep)
    if not keep:
        keep = [f for f in frames if not f.filename.startswith(memdoc_dir)][-3:]
    lines = ["Traceback (most recent call last, your frames only):\n"]
    lines += traceback.format_list(keep)
    if hidden and frames and frames[-1] not in keep:
        last = frames[-1]
        lines.append(f"  … ({hidden} library frames hidden; raised in {last.filename}:{last.lineno} in {last.name})\n")
    lines += traceback.format_exception_only(type(exc), exc)
    return "".join(lines)


# ------------------------------------------------------------------------------------ session
class _Session:
    def __init__(self, steps: int, timeout: float | None):
        import torch

        self.torch = torch
        self.max_steps = steps
        self.deadline = time.monotonic() + timeout if timeout else None
        self.phase = "setup"
        self.step_index = 0  # completed optimizer steps
        self.steps = 0
        self.roots: dict[int, object] = {}
        self.depth = 0
        self.optimizers: list = []  # strong refs until the report is built
        self.opt_info: dict[int, dict] = {}
        self.autocast_seen = False
        self.forward_seen = False
        self.first_input_shape: tuple | None = None
        self.ckpt_calls = 0
        self.ckpt_reentrant = 0
        self.ckpt_wrapped: dict[int, object] = {}
        self.ckpt_not_training: dict[int, object] = {}
        self.dataloader_workers: list[int] = []
        self.live: dict[int, tuple[int, object, str, int]] = {}
        self.total = 0
        self.phase_peak: dict[str, dict] = {}
        self.phase_peak_total: dict[str, int] = {}
        self.timeline: list[dict] = []
        self._ops = 0
        self.uses_cuda = False
        self.cuda_oom_info = None
        self.in_report = False

    # ---- time
    def check_deadline(self) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            self.deadline = None
            raise _Stop("timeout")

    # ---- objects the script created
    def params(self) -> list:
        """Parameters and buffers of the roots and the optimizers (deduplicated by identity)."""
        seen = {}
        for root in list(self.roots.values()):
            for p in root.parameters():
                seen[id(p)] = p
            for b in root.buffers():
                seen[id(b)] = b
        for opt in list(self.optimizers):
            for group in opt.param_groups:
                for p in group["params"]:
                    seen[id(p)] = p
        return list(seen.values())

    def trainable(self) -> list:
        seen = {}
        for opt in list(self.optimizers):
            for group in opt.param_groups:
                for p in group["params"]:
                    if p.requires_grad:
                        seen[id(p)] = p
        if not seen:
            for root in list(self.roots.values()):
                for p in root.parameters():
                    if p.requires_grad:
                        seen[id(p)] = p
        return list(seen.values())

    def state_bytes(self) -> tuple[dict, dict, dict]:
        """({key: nbytes} of weights, gradients, optimizer states) right now."""
        weights, grads, opt = {}, {}, {}
        for p in self.params():
            k = _storage_key(p)
            if k:
                weights[k[0]] = k[1]
            g = getattr(p, "grad", None)
            if g is not None:
                k = _storage_key(g)
                if k:
                    grads[k[0]] = k[1]
        for o in list(self.optimizers):
            for st in list(o.state.values()):
                if not isinstance(st, dict):
                    continue
                for v in st.values():
                    if isinstance(v, self.torch.Tensor):
                        k = _storage_key(v)
                        if k and k[0] not in weights:
                            opt[k[0]] = k[1]
        return weights, grads, opt

    # ---- accounting
    def sweep(self) -> None:
        dead = [k for k, (_, ref, _, _) in self.live.items() if ref.expired()]
        for k in dead:
            self.total -= self.live.pop(k)[0]

    def add(self, t) -> None:
        info = _storage_key(t)
        if info is None:
            return
        key, nbytes, ref = info
        old = self.live.get(key)
        if old is not None:
            if not old[1].expired():
                return
            self.total -= old[0]
        if not self.uses_cuda and t.device.type == "cuda":
            self.uses_cuda = True
        self.live[key] = (nbytes, ref, self.bucket(), self.step_index)
        self.total += nbytes

    def breakdown(self) -> dict:
        weights, grads, opt = self.state_bytes()
        known = set(weights) | set(grads) | set(opt)
        tracked_known = 0
        activations = 0
        rest = 0
        for k, (n, _ref, bucket, step) in self.live.items():
            if k in known:
                tracked_known += n
            elif bucket == "forward" and step == self.step_index and self.phase != "setup":
                activations += n
            else:
                rest += n
        items = {
            "weights": sum(weights.values()),
            "gradients": sum(grads.values()),
            "optimizer": sum(opt.values()),
            "activations": activations,
            "other": rest,
        }
        items["peak_allocated"] = sum(items.values())
        return items

    def bucket(self) -> str:
        """The reported phase now; after backward it is the optimizer's only once the script has stepped."""
        if self.phase == "between" and not self.optimizers:
            return "backward"
        return PHASE_BUCKET.get(self.phase, "forward")

    def after_op(self) -> None:
        bucket = self.bucket()
        self._ops += 1
        if self.total > self.phase_peak_total.get(bucket, -1):
            self.phase_peak_total[bucket] = self.total
            self.phase_peak[bucket] = {**self.breakdown(), "step": self.step_index + 1}
        if self._ops % 8 == 0 and len(self.timeline) < 20000:
            self.timeline.append({"op": self._ops, "phase": bucket, "total": self.total})

    # ---- hooks
    def current_phase_from_autograd(self) -> None:
        in_backward = self.torch._C._current_graph_task_id() != -1
        if in_backward:
            self.phase = "backward"
        elif self.phase == "backward":
            self.phase = "between"

    def forward_pre(self, module, args) -> None:
        torch = self.torch
        if self.in_report or torch._C._current_graph_task_id() != -1:
            return
        if self.depth == 0:
            if id(module) not in self.roots:
                self.roots[id(module)] = module
            if self.phase not in ("forward",):
                self.phase = "forward"
            self.forward_seen = True
            for dev in ("cuda", "cpu"):
                with contextlib.suppress(Exception):
                    if torch.is_autocast_enabled(dev):
                        self.autocast_seen = True
        self.depth += 1
        if self.first_input_shape is None and isinstance(module, torch.nn.Embedding) and args:
            x = args[0]
            if isinstance(x, torch.Tensor) and x.dim() == 2:
                self.first_input_shape = tuple(x.shape)
        if getattr(module, "gradient_checkpointing", False) is True and not module.training and torch.is_grad_enabled():
            self.ckpt_not_training[id(module)] = module

    def forward_post(self, module, args, output) -> None:
        if self.in_report or self.torch._C._current_graph_task_id() != -1:
            return
        self.depth = max(0, self.depth - 1)

    def opt_pre(self, opt, args, kwargs) -> None:
        if not any(o is opt for o in self.optimizers):
            self.optimizers.append(opt)
        self.opt_info.setdefault(id(opt), {
            "class": type(opt).__name__,
            "foreach": opt.defaults.get("foreach"),
            "fused": opt.defaults.get("fused"),
        })
        self.phase = "optimizer"

    def opt_post(self, opt, args, kwargs) -> None:
        self.steps += 1
        self.step_index += 1
        self.phase = "idle"
        if self.steps >= self.max_steps:
            raise _Stop("steps")

    def on_checkpoint(self, fn, reentrant: bool) -> None:
        torch = self.torch
        if torch._C._current_graph_task_id() != -1:
            return
        self.ckpt_calls += 1
        if reentrant:
            self.ckpt_reentrant += 1
        target = fn
        if hasattr(fn, "func"):  # functools.partial(forward, module, …)
            target = fn.args[0] if fn.args and isinstance(fn.args[0], torch.nn.Module) else getattr(fn.func, "__self__", fn.func)
        target = getattr(target, "__self__", target)
        if isinstance(target, torch.nn.Module):
            self.ckpt_wrapped[id(target)] = target

    def names(self) -> dict[int, str]:
        out = {}
        for root in self.roots.values():
            for name, m in root.named_modules():
                out.setdefault(id(m), name or type(root).__name__)
        return out


def _make_tracker(session: _Session):
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    import torch

    class _Tracker(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            session.check_deadline()
            session.current_phase_from_autograd()
            session.sweep()
            out = func(*args, **(kwargs or {}))
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor):
                    session.add(t)
            session.after_op()
            return out

    return _Tracker()


@contextlib.contextmanager
def _instrument(session: _Session):
    """Install every hook and patch; undo all of them on exit."""
    import torch
    import torch.utils.checkpoint as cp
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
    from torch.utils.data import DataLoader

    handles = [
        torch.nn.modules.module.register_module_forward_pre_hook(session.forward_pre),
        torch.nn.modules.module.register_module_forward_hook(session.forward_post, always_call=True),
        register_optimizer_step_pre_hook(session.opt_pre),
        register_optimizer_step_post_hook(session.opt_post),
    ]
    orig_gen = cp._checkpoint_without_reentrant_generator
    orig_fn = cp.CheckpointFunction

    def gen(fn, *args, **kwargs):
        session.on_checkpoint(fn, reentrant=False)
        return orig_gen(fn, *args, **kwargs)

    class _ReentrantShim:
        @staticmethod
        def apply(fn, *args):
            session.on_checkpoint(fn, reentrant=True)
            return orig_fn.apply(fn, *args)

        def __getattr__(self, name):  # pragma: no cover - other attributes pass through
            return getattr(orig_fn, name)

    cp._checkpoint_without_reentrant_generator = gen
    cp.CheckpointFunction = _ReentrantShim
    orig_iter = DataLoader.__iter__

    def dl_iter(self):
        session.dataloader_workers.append(int(self.num_workers))
        return orig_iter(self)

    DataLoader.__iter__ = dl_iter
    try:
        yield
    finally:
        DataLoader.__iter__ = orig_iter
        cp._checkpoint_without_reentrant_generator = orig_gen
        cp.CheckpointFunction = orig_fn
        for h in handles:
            h.remove()


@contextlib.contextmanager
def _alarm(seconds: float | None):
    """SIGALRM → _Stop('timeout') for scripts stuck outside torch ops (main thread only)."""
    if not seconds or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def handler(signum, frame):
        raise _Stop("timeout")

    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@contextlib.contextmanager
def _script_env(path: Path, args: list[str], stdout_to_stderr: bool):
    old_argv, old_path0 = sys.argv[:], sys.path[0] if sys.path else None
    sys.argv = [str(path), *args]
    sys.path.insert(0, str(path.resolve().parent))
    redirect = contextlib.redirect_stdout(sys.stderr) if stdout_to_stderr else contextlib.nullcontext()
    try:
        with redirect:
            yield
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        sys.argv = old_argv
        if sys.path and sys.path[0] == str(path.resolve().parent):
            sys.path.pop(0)
        elif old_path0 is not None and old_path0 not in sys.path:  # pragma: no cover
            sys.path.insert(0, old_path0)


# ------------------------------------------------------------------------------------- CUDA
def _cuda_start(session: _Session) -> bool:
    torch = session.torch
    if not torch.cuda.is_available():
        return False
    with contextlib.suppress(Exception):
        torch.cuda.memory._record_memory_history(max_entries=200_000)
    with contextlib.suppress(Exception):
        torch.cuda.reset_peak_memory_stats()

    def observer(device, alloc, device_alloc, device_free):
        session.cuda_oom_info = {"device": device, "tried": alloc, "device_allocated": device_alloc, "device_free": device_free}

    with contextlib.suppress(Exception):
        torch._C._cuda_attach_out_of_memory_observer(observer)
    return True


def _cuda_collect(result: ScriptResult, session: _Session, want_snapshot: bool) -> None:
    from memdoc.probe.cuda_stats import digest_stats

    torch = session.torch
    try:
        stats = torch.cuda.memory_stats()
    except Exception:  # pragma: no cover
        return
    result.cuda = digest_stats(stats)
    with contextlib.suppress(Exception):
        result.cuda_summary = torch.cuda.memory_summary()
    if want_snapshot:
        with contextlib.suppress(Exception):
            result.snapshot = torch.cuda.memory._snapshot()
    with contextlib.suppress(Exception):
        torch.cuda.memory._record_memory_history(enabled=None)


# -------------------------------------------------------------------------------- HF detection
def _detect_hf(session: _Session, result: ScriptResult) -> None:
    """For an HF PreTrainedModel among the roots: config, the detected plan and model id."""
    if "transformers" not in sys.modules:
        return
    from transformers import PreTrainedModel

    hf = None
    peft_model = None
    for root in session.roots.values():
        candidates = [root]
        base = getattr(root, "base_model", None)
        if base is not None:
            candidates.append(getattr(base, "model", base))
        for c in candidates:
            if isinstance(c, PreTrainedModel):
                hf = c
                if c is not root:
                    peft_model = root
                break
        if hf is not None:
            break
    if hf is None:
        return
    from memdoc.core.plan import Attention, Checkpointing, Method, Optimizer, Precision, TrainingPlan

    detected: dict = {}
    params = list((peft_model or hf).named_parameters())
    trainable = [(n, p) for n, p in params if p.requires_grad]
    lora = [n for n, _ in trainable if "lora_" in n]
    frozen_dtypes = {str(p.dtype).replace("torch.", "") for n, p in params if not p.requires_grad}
    train_dtypes = {str(p.dtype).replace("torch.", "") for n, p in trainable}
    weight_dtype = next(iter(frozen_dtypes if lora and frozen_dtypes else train_dtypes or frozen_dtypes), "float32")
    if weight_dtype == "float32":
        precision = Precision.AMP_BF16 if session.autocast_seen else Precision.FP32
    else:
        precision = Precision.FP16 if weight_dtype == "float16" else Precision.BF16
    kwargs: dict = {"precision": precision}
    if lora:
        kwargs["method"] = Method.LORA
        cfg = None
        with contextlib.suppress(Exception):
            cfg = next(iter(peft_model.peft_config.values()))
        if cfg is not None:
            kwargs["lora_rank"] = int(cfg.r)
            targets = cfg.target_modules
            if isinstance(targets, str):
                targets = [targets]
            kwargs["lora_targets"] = tuple(sorted(targets)) if targets else ("q_proj", "v_proj")
    kwargs["checkpointing"] = Checkpointing.FULL if session.ckpt_wrapped else Checkpointing.NONE
    attn = getattr(hf.config, "_attn_implementation", None) or "sdpa"
    kwargs["attention"] = Attention.EAGER if attn == "eager" else Attention.SDPA
    opt_classes = [info for info in session.opt_info.values()]
    optimizer = Optimizer.ADAMW
    if opt_classes:
        info = opt_classes[0]
        name = info["class"].lower()
        if "sgd" in name:
            optimizer = Optimizer.SGD
        elif "adafactor" in name:
            optimizer = Optimizer.ADAFACTOR
        elif info.get("fused") or not info.get("foreach"):
            optimizer = Optimizer.ADAMW_FUSED  # no foreach temporaries (CPU's default, or fused=True)
    kwargs["optimizer"] = optimizer
    if session.first_input_shape:
        kwargs["micro_batch"], kwargs["seq_len"] = int(session.first_input_shape[0]), int(session.first_input_shape[1])
    kwargs["allow_long"] = True
    try:
        plan = TrainingPlan(**kwargs)
    except Exception as exc:  # pragma: no cover
        result.notes.append(f"could not build the detected plan: {exc}")
        return
    config = hf.config.to_dict()
    model_id = getattr(hf.config, "_name_or_path", "") or config.get("_name_or_path") or type(hf).__name__
    detected = {k: (v.value if hasattr(v, "value") else v) for k, v in kwargs.items() if k != "allow_long"}
    result.hf = {"model_id": model_id, "config": config, "plan": plan, "detected": detected, "class": type(hf).__name__}


# ----------------------------------------------------------------------------------- the run
def run_script(
    path: str | Path,
    args: list[str] | None = None,
    *,
    steps: int = 2,
    timeout: float | None = 300.0,
    stdout_to_stderr: bool = False,
    want_snapshot: bool = False,
) -> ScriptResult:
    """Run the script for `steps` optimizer steps (or until it ends / `timeout` s) and measure it."""
    path = Path(path)
    check_script(path)
    import torch

    session = _Session(steps=steps, timeout=timeout)
    cuda = _cuda_start(session)
    stop_reason = "finished"
    script_exit = None
    tb_text = None
    oom = None
    start = time.monotonic()
    tracker = _make_tracker(session)
    try:
        with _script_env(path, list(args or []), stdout_to_stderr), _instrument(session), _alarm(timeout), tracker:
            try:
                runpy.run_path(str(path), run_name="__main__")
            except _Stop as stop:
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
                    "prescribe": "memdoc prescribe --symptom " + ("startup-oom" if session.steps == 0 else "mid-run-oom"),
                }
                tb_text = _filtered_traceback(exc, path)
            except KeyboardInterrupt:
                raise
            except Exception as exc:
                stop_reason = "error"
                tb_text = _filtered_traceback(exc, path)
    except _Stop as stop:  # a stop that fired while leaving the script's context managers
        stop_reason = stop.reason
    finally:
        linecache.checkcache()
    session.in_report = True
    result = _build_result(session, path, stop_reason, oom, tb_text, script_exit, cuda, want_snapshot)
    result.elapsed_s = time.monotonic() - start
    session.roots.clear()
    session.optimizers.clear()
    session.live.clear()
    return result


def _build_result(session, path, stop_reason, oom, tb_text, script_exit, cuda, want_snapshot) -> ScriptResult:
    from memdoc.core.measurement import LINE_ITEMS, PHASES

    torch = session.torch
    session.sweep()
    phases = {p: {k: v for k, v in session.phase_peak[p].items()} for p in PHASES if p in session.phase_peak}
    notes = []
    if phases:
        peak_phase = max(phases, key=lambda p: (phases[p]["peak_allocated"], -PHASES.index(p)))
        measured = {k: int(phases[peak_phase][k]) for k in LINE_ITEMS}
        measured["peak_allocated"] = int(phases[peak_phase]["peak_allocated"])
    else:
        peak_phase = None
        measured = {k: 0 for k in LINE_ITEMS} | {"peak_allocated": 0}
    setup = session.phase_peak.get("setup")
    if setup and setup["peak_allocated"] > measured["peak_allocated"]:
        notes.append(f"memory peaked before the first forward pass (setup: {setup['peak_allocated']} bytes); the figures are for the training phases")
    weights, grads, opt = session.state_bytes()
    trainable = session.trainable()
    trainable_bytes = 0
    seen = set()
    for p in trainable:
        k = _storage_key(p)
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
    if stop_reason == "timeout":
        result.notes.append("stopped by --timeout before the requested optimizer steps")
    if stop_reason in ("finished", "exit") and session.steps == 0:
        result.notes.append("the script ended without an optimizer step: figures are for what it ran")
    if cuda and (session.uses_cuda or stop_reason == "oom"):
        _cuda_collect(result, session, want_snapshot)
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
                    for v in (st.values() if isinstance(st, dict) else []):
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
    requested = [names.get(id(m), name) for name, m in flagged
                 if not any(o is not m and any(x is o for x in m.modules()) for _, o in flagged)]
    not_training = [n for n in (names.get(i, type(m).__name__) for i, m in session.ckpt_not_training.items()) if n in requested]
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
    )
    result.facts = facts
    result.findings = lint(facts)
    _detect_hf(session, result)
    return result


def is_script_target(target: str) -> bool:
    """TARGET is a script (not a model): ends with .py, or is an existing file that is not JSON config."""
    if target.endswith(".py"):
        return True
    p = Path(target).expanduser()
    return p.is_file() and p.suffix != ".json"


__all__ = ["ScriptResult", "check_script", "is_script_target", "run_script"]
