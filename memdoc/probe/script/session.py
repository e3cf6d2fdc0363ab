"""Instrumentation of a script run (see `memdoc.probe.script`): run the user's training script
in-process for N optimizer steps and measure its memory.

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
import os
import sys
import time
import weakref

from memdoc.probe.script.sandbox import Stop
from memdoc.probe.script.trl_phases import patch_trl, unpatch

PHASE_BUCKET = {
    "setup": "setup",
    "forward": "forward",
    "idle": "optimizer",
    "backward": "backward",
    "between": "optimizer",
    "optimizer": "optimizer",
}
"""Tracker phase → reported phase. Ops between backward and the step (clipping, unscaling) and after
the step until the next forward (zero_grad, the next batch) count to the optimizer phase."""


def storage_key(t):
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


class Session:
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
        self.train_input_shape = False  # first_input_shape came from a grad-enabled forward
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
        self.script_path: str | None = None
        """The user's script (absolute path): allocation sites are its lines."""
        self.record_sites = steps >= 3  # growth needs ≥ 2 step ends after the first; sites cost a frame walk
        self.sites: dict[int, str] = {}
        """Storage key → the script line that allocated it ('train.py:42'), with `record_sites`."""
        self.objs: dict[int, list] = {}
        """Storage key → weak references to the tensor objects seen on it (to read their ``grad_fn``)."""
        self.step_starts: list[int] = []
        """Live bytes at the start (first root forward) of each step; its length is the current window."""
        self.survivors: list[dict] = []
        """At the end of each step from the second on: what is alive, by script line (`step_end`'s samples)."""
        self.step_end = None
        """`memdoc.probe.script.survivors.sample`, set by the run: called at each step end from the second on."""
        self.post_phase: str | None = None
        """'generation' or 'reference' while a TRL trainer's method of that phase runs (`trl_phases`)."""
        self.trainer = None
        """The TRL trainer seen running (`trl_phases.TRAINERS`), or None."""
        self.rounds: list[dict] = []
        """One per generation call: {"step", "start_allocated" (allocated bytes when it began), "peak_allocated"}."""
        self.post_loss = 0
        """> 0 inside a DPO/KTO trainer's loss: a root forward there under no_grad is the reference's."""
        self.post_listener = None
        """`enter(phase, step)` / `leave(phase)` at each post-training phase instead of the tracker's buckets."""
        self.post_root: int | None = None
        """id of the root module whose no_grad forward is the reference phase now."""
        self.trl_patched: list = []
        """(class, method, its own attribute) of every TRL method wrapped (`trl_phases.patch_trl`)."""

    # ---- time
    def check_deadline(self) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            self.deadline = None
            raise Stop("timeout")

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
            k = storage_key(p)
            if k:
                weights[k[0]] = k[1]
            g = getattr(p, "grad", None)
            if g is not None:
                k = storage_key(g)
                if k:
                    grads[k[0]] = k[1]
        for o in list(self.optimizers):
            for st in list(o.state.values()):
                if not isinstance(st, dict):
                    continue
                for v in st.values():
                    if isinstance(v, self.torch.Tensor):
                        k = storage_key(v)
                        if k and k[0] not in weights:
                            opt[k[0]] = k[1]
        return weights, grads, opt

    # ---- accounting
    def sweep(self) -> None:
        dead = [k for k, (_, ref, _, _) in self.live.items() if ref.expired()]
        for k in dead:
            self.total -= self.live.pop(k)[0]
            self.sites.pop(k, None)
            self.objs.pop(k, None)

    def site(self) -> str | None:
        """'train.py:42': the innermost line of the user's script on the stack (None outside it)."""
        frame = sys._getframe(2)
        while frame is not None:
            if frame.f_code.co_filename == self.script_path:
                return f"{os.path.basename(self.script_path)}:{frame.f_lineno}"
            frame = frame.f_back
        return None

    def step_start(self) -> None:
        """Record live bytes at a step's first forward; allocations from here on belong to the new window."""
        if len(self.step_starts) != self.step_index:
            return
        self.sweep()
        self.step_starts.append(self.total)

    def remember(self, key: int, t) -> None:
        """Keep a weak reference to a tensor object on storage `key` (a few per storage: the base and its views)."""
        refs = self.objs.setdefault(key, [])
        if len(refs) >= 8:
            refs[:] = [r for r in refs if r() is not None]
        if len(refs) < 8:
            with contextlib.suppress(TypeError):
                refs.append(weakref.ref(t))

    def add(self, t) -> None:
        info = storage_key(t)
        if info is None:
            return
        key, nbytes, ref = info
        old = self.live.get(key)
        if old is not None:
            if not old[1].expired():
                if self.record_sites:
                    self.remember(key, t)
                return
            self.total -= old[0]
        if not self.uses_cuda and t.device.type == "cuda":
            self.uses_cuda = True
        self.live[key] = (nbytes, ref, self.bucket(), self.step_index)
        self.total += nbytes
        if self.record_sites:
            self.remember(key, t)
            if self.script_path:
                self.sites[key] = self.site()

    def breakdown(self) -> dict:
        weights, grads, opt = self.state_bytes()
        known = set(weights) | set(grads) | set(opt)
        activations = 0
        rest = 0
        for k, (n, _ref, bucket, step) in self.live.items():
            if k in known:
                continue
            if bucket == "forward" and step == self.step_index and self.phase != "setup":
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

    def peaks(self) -> tuple[dict, str | None, dict]:
        """(line items at each phase's peak, the peak phase, its line items + peak_allocated)."""
        from memdoc.core.billing.measurement import LINE_ITEMS, PHASES

        phases = {p: dict(self.phase_peak[p]) for p in PHASES if p in self.phase_peak}
        if not phases:
            return phases, None, {k: 0 for k in LINE_ITEMS} | {"peak_allocated": 0}
        peak_phase = max(phases, key=lambda p: (phases[p]["peak_allocated"], -PHASES.index(p)))
        measured = {k: int(phases[peak_phase][k]) for k in LINE_ITEMS}
        measured["peak_allocated"] = int(phases[peak_phase]["peak_allocated"])
        return phases, peak_phase, measured

    def bucket(self) -> str:
        """The reported phase now: a TRL trainer's generation or reference call while one runs; after backward
        it is the optimizer's only once the script has stepped."""
        if self.post_phase is not None:
            return self.post_phase
        if self.phase == "between" and not self.optimizers:
            return "backward"
        return PHASE_BUCKET.get(self.phase, "forward")

    def after_op(self) -> None:
        bucket = self.bucket()
        self._ops += 1
        if self.total > self.phase_peak_total.get(bucket, -1):
            self.phase_peak_total[bucket] = self.total
            self.phase_peak[bucket] = {**self.breakdown(), "step": self.step_index + 1}
        if bucket == "generation" and self.rounds and self.total > self.rounds[-1]["_total"]:
            self.rounds[-1]["_total"] = self.total
            self.rounds[-1]["peak_allocated"] = self.phase_peak[bucket]["peak_allocated"]
            if self.phase_peak_total[bucket] != self.total:  # below the phase's peak (an earlier round's)
                self.rounds[-1]["peak_allocated"] = self.breakdown()["peak_allocated"]
        if self._ops % 8 == 0 and len(self.timeline) < 20000:  # the line items now, as the bill names them
            items = self.breakdown()
            total = items.pop("peak_allocated")
            self.timeline.append({"op": self._ops, "phase": bucket, **items, "total": total})

    # ---- TRL's post-training phases (`memdoc.probe.script.trl_phases`)
    def saw_trainer(self, trainer) -> None:
        """The TRL trainer running; its models are roots from now on (their weights count before their forward)."""
        if self.trainer is not None or self.in_report:
            return
        self.trainer = trainer
        for name in ("model", "ref_model"):
            model = getattr(trainer, name, None)
            if isinstance(model, self.torch.nn.Module):
                self.roots.setdefault(id(model), model)

    def enter_post(self, phase: str) -> None:
        self.sweep()
        self.post_phase = phase
        if self.post_listener is not None:  # the callback on a GPU: the allocator's counters per phase
            self.post_listener.enter(phase, self.step_index + 1)
            return
        if phase == "generation":
            start = self.breakdown()["peak_allocated"]
            self.rounds.append(
                {"step": self.step_index + 1, "start_allocated": start, "peak_allocated": start, "_total": self.total}
            )

    def leave_post(self) -> None:
        if self.post_listener is not None and self.post_phase is not None:
            self.post_listener.leave(self.post_phase)
        self.post_phase = None

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
                self.step_start()
            self.forward_seen = True
            if self.post_loss and self.post_phase is None and not torch.is_grad_enabled():
                self.enter_post("reference")
                self.post_root = id(module)
        if not self.autocast_seen:
            # checked at every module, not only the root: accelerate (HF Trainer bf16=True) enters
            # autocast inside the root's wrapped forward, after the root's pre-hook has run
            for dev in ("cuda", "cpu"):
                with contextlib.suppress(Exception):
                    if torch.is_autocast_enabled(dev):
                        self.autocast_seen = True
        self.depth += 1
        if isinstance(module, torch.nn.Embedding) and args and not self.train_input_shape:
            x = args[0]
            if isinstance(x, torch.Tensor) and x.dim() == 2:
                # the batch shape of a training forward (grad enabled), not of an eval/generate call before it
                if self.first_input_shape is None or torch.is_grad_enabled():
                    self.first_input_shape = tuple(x.shape)
                self.train_input_shape = torch.is_grad_enabled()
        if getattr(module, "gradient_checkpointing", False) is True and not module.training and torch.is_grad_enabled():
            self.ckpt_not_training[id(module)] = module

    def forward_post(self, module, args, output) -> None:
        if self.in_report or self.torch._C._current_graph_task_id() != -1:
            return
        self.depth = max(0, self.depth - 1)
        if self.depth == 0 and self.post_root == id(module):
            self.post_root = None
            self.leave_post()

    def opt_pre(self, opt, args, kwargs) -> None:
        if not any(o is opt for o in self.optimizers):
            self.optimizers.append(opt)
        self.opt_info.setdefault(
            id(opt),
            {
                "class": type(opt).__name__,
                "foreach": opt.defaults.get("foreach"),
                "fused": opt.defaults.get("fused"),
            },
        )
        self.phase = "optimizer"

    def opt_post(self, opt, args, kwargs) -> None:
        self.steps += 1
        self.step_index += 1
        self.phase = "idle"
        if self.record_sites and self.steps >= 2 and self.step_end is not None:
            self.survivors.append(self.step_end(self))
        if self.steps >= self.max_steps:
            raise Stop("steps")

    def on_checkpoint(self, fn, reentrant: bool) -> None:
        torch = self.torch
        if torch._C._current_graph_task_id() != -1:
            return
        self.ckpt_calls += 1
        if reentrant:
            self.ckpt_reentrant += 1
        target = fn
        if hasattr(fn, "func"):  # functools.partial(forward, module, …)
            target = (
                fn.args[0]
                if fn.args and isinstance(fn.args[0], torch.nn.Module)
                else getattr(fn.func, "__self__", fn.func)
            )
        target = getattr(target, "__self__", target)
        if isinstance(target, torch.nn.Module):
            self.ckpt_wrapped[id(target)] = target

    def names(self) -> dict[int, str]:
        out = {}
        for root in self.roots.values():
            for name, m in root.named_modules():
                out.setdefault(id(m), name or type(root).__name__)
        return out


def make_tracker(session: Session):
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

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
def instrument(session: Session):
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
        patch_trl(session, session.trl_patched)  # a Trainer iterates its DataLoader before its first step
        return orig_iter(self)

    DataLoader.__iter__ = dl_iter
    patch_trl(session, session.trl_patched)  # trainers imported already (the callback); the rest at dl_iter
    try:
        yield
    finally:
        unpatch(session.trl_patched)
        DataLoader.__iter__ = orig_iter
        cp._checkpoint_without_reentrant_generator = orig_gen
        cp.CheckpointFunction = orig_fn
        for h in handles:
            h.remove()
