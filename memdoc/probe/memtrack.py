"""torch's MemTracker, adapted for memdoc: per-phase peaks, O(1) peak updates, frozen params.

All workarounds for torch/peft quirks met while tracing live here (one place):

- `MemTracker` installs a gradient hook on every parameter of every module it sees; frozen
  parameters (a LoRA base, QLoRA's packed weights) cannot take a hook and raise. We install hooks
  only on parameters that require grad.
- `MemTracker._update_peak_stats` walks every tracked module on every op (quadratic in model size:
  20 s instead of 1.5 s for a 32-layer model); we keep only the global and per-phase peaks.
- peft moves fresh adapter modules with `Module.to(device, dtype)`; under FakeTensorMode the
  parameter swap path of `Module._apply` fails for fake tensors. `plain_module_to()` makes
  `_apply` assign `param.data` instead for the duration.
"""

from __future__ import annotations

import contextlib
from copy import deepcopy
from typing import Iterator

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor
from torch.distributed._tools.mem_tracker import _TOTAL_KEY, MemTracker, _MemRefType, _ModState

try:  # FSDP tracker (torch >= 2.5)
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
except Exception:  # pragma: no cover
    FSDPMemTracker = None  # type: ignore[assignment]


class _PhaseMixin:
    """Per-phase peak snapshots and the frozen-parameter fix, shared by both trackers."""

    @property
    def peak_bytes(self) -> int:
        """The highest total of live tensor bytes seen on any device."""
        return max(self._peak_mem.values(), default=0)

    def reset_peaks(self) -> None:
        """Forget peaks so far (after a warm-up iteration run under the tracker)."""
        self._peak_mem = {}
        self._peak_mem_snap = {}
        self._phase_init()

    def _phase_init(self) -> None:
        self.phase_peaks: dict[str, dict[str, int]] = {}
        self._last_phase = "forward"
        self._phase_peak_total: dict[str, int] = {}
        self._forced_phase: str | None = None

    def reset_all_mod_stats(self) -> None:
        """`reset_mod_stats`, and forget the post-backward calls queued by forwards run without autograd.

        torch's ModTracker (`_fw_pre_hook`) queues a post-backward call for every module whose inputs need no
        gradient and runs them at the end of the next backward; after a reset, those of a generation or of a
        reference forward under `no_grad` would look up statistics that no longer exist."""
        self.reset_mod_stats()
        self._mod_tracker._post_bw_callbacks_to_enqueue.clear()

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Count every op inside as phase `name` (a post-training step's `generation` or `reference`)."""
        self._forced_phase = name
        try:
            yield
        finally:
            self._forced_phase = None

    @property
    def current_phase(self) -> str:
        """A forced phase (`phase()`), else optimizer step, backward (autograd graph task running), forward
        (inside a module); ops outside all of them (between backward and the step) keep the phase they follow."""
        if self._forced_phase is not None:
            phase = self._forced_phase
        elif self._in_opt:
            phase = "optimizer"
        elif self._mod_tracker.is_bw:
            phase = "backward"
        elif len(self._mod_tracker.parents) > 1:
            phase = "forward"
        else:
            phase = self._last_phase
        self._last_phase = phase
        return phase

    def _update_peak_stats(self, peak_state) -> None:  # noqa: ARG002 - signature of the parent
        phase = self.current_phase
        for dev, dev_snap in self._curr_mem_snap.items():
            total = dev_snap[_TOTAL_KEY]
            if self._peak_mem.get(dev, 0) < total:
                self._peak_mem[dev] = total
                self._peak_mem_snap[dev] = dict(dev_snap)
            if self._phase_peak_total.get(phase, -1) < total:
                self._phase_peak_total[phase] = total
                self.phase_peaks[phase] = {str(k.value if hasattr(k, "value") else k): v for k, v in dev_snap.items()}

    def module_activation_bytes(self) -> dict[str, int]:
        """fqn -> activation bytes a module leaves alive after its (first) forward."""
        out: dict[str, int] = {}
        for stats in self.memory_tracking.values():
            snaps = stats.snapshots
            pre, post = snaps.get(_ModState.PRE_FW), snaps.get(_ModState.POST_FW)
            if not pre or not post:
                continue

            def act(snap) -> int:
                return sum(v.get(_MemRefType.ACT, 0) for v in snap.values())

            out[stats.mod_fqn] = act(post[0]) - act(pre[0])
        return out


class PhaseMemTracker(_PhaseMixin, MemTracker):
    def __init__(self) -> None:
        super().__init__()
        self._phase_init()

    def _track_module_params_and_buffers(self, module: nn.Module, install_grad_hooks: bool = True) -> tuple[int, int]:
        def _grad_hook(grad: torch.Tensor) -> None:
            self._update_and_maybe_create_winfos(grad, _MemRefType.GRAD)

        param_memory = 0
        for param in module.parameters():
            winfos = self._update_and_maybe_create_winfos(param, _MemRefType.PARAM)
            param_memory += sum(w.mem_consumed for w in winfos)
            if param.grad is not None:
                self._update_and_maybe_create_winfos(param.grad, _MemRefType.GRAD)
            if install_grad_hooks and param.requires_grad and self._param_to_grad_hook_handles.get(param, None) is None:
                self._param_to_grad_hook_handles[param] = (
                    param.register_hook(_grad_hook),
                    param.register_post_accumulate_grad_hook(lambda p: _grad_hook(p.grad)),
                )
        buffer_memory = 0
        for buffer in module.buffers():
            winfos = self._update_and_maybe_create_winfos(buffer, _MemRefType.BUFFER)
            buffer_memory += sum(w.mem_consumed for w in winfos)
        return param_memory, buffer_memory


if FSDPMemTracker is not None:

    class PhaseFSDPMemTracker(_PhaseMixin, FSDPMemTracker):
        def __init__(self, mod: nn.Module, optm=None) -> None:
            super().__init__(mod, optm)
            self._phase_init()

else:  # pragma: no cover
    PhaseFSDPMemTracker = None  # type: ignore[assignment]


@contextlib.contextmanager
def plain_module_to() -> Iterator[None]:
    """Let `Module.to()` work on fake parameters (peft moves fresh adapters with it).

    `Module._apply` always swaps fake parameters with `torch.utils.swap_tensors`, which fails for
    them; for the duration we convert fake parameters and buffers in place with `.data =` instead.
    """
    original = nn.Module.to

    def to(self, *args, **kwargs):
        tensors = list(self.parameters()) + list(self.buffers())
        if not any(isinstance(t, FakeTensor) for t in tensors):
            return original(self, *args, **kwargs)
        device, dtype, _non_blocking, _fmt = torch._C._nn._parse_to(*args, **kwargs)
        with torch.no_grad():
            for t in tensors:
                cast = dtype if (dtype is not None and (t.is_floating_point() or t.is_complex())) else None
                t.data = t.data.to(device=device, dtype=cast)
        return self

    nn.Module.to = to  # type: ignore[method-assign]
    try:
        yield
    finally:
        nn.Module.to = original  # type: ignore[method-assign]


def snapshot_items(snap: dict[str, int], optimizer_state_bytes: int) -> dict[str, int]:
    """MemTracker categories -> memdoc line items.

    Optimizer-tagged bytes beyond the persistent states are the step's temporaries -> `other`.
    """
    get = lambda name: int(snap.get(name, 0))  # noqa: E731
    opt_total = get("Optstate") + get("OptState")
    optimizer = min(opt_total, optimizer_state_bytes)
    items = {
        "weights": get("Parameter") + get("Buffer") + get("Sharded Param") + get("Unsharded Param"),
        "gradients": get("Gradient") + get("Sharded Grad") + get("Unsharded Grad"),
        "optimizer": optimizer,
        "activations": get("Activation"),
        "other": get("Temp")
        + get("Other")
        + get("Inputs")
        + get("All Gather")
        + get("Reduce Scatter")
        + (opt_total - optimizer),
        "_opt_temp": opt_total - optimizer,
        "_sharded_weights": get("Sharded Param"),
    }
    return items


__all__ = [
    "PhaseFSDPMemTracker",
    "PhaseMemTracker",
    "masks_as_in_eager_execution",
    "plain_module_to",
    "snapshot_items",
    "deepcopy",
]


@contextlib.contextmanager
def masks_as_in_eager_execution() -> Iterator[None]:
    """Let transformers skip the causal mask under fake tensors, as it does in a real eager run.

    A real step on unpacked sequences without padding passes `attn_mask=None, is_causal=True` to
    SDPA, so GQA runs natively (`enable_gqa=True`). Under fake tensors transformers cannot read
    values and plays safe twice: `find_packed_sequence_indices(position_ids)` returns a packing
    mask instead of None, and `_ignore_causal_mask_sdpa` refuses to skip because its `q_offset`
    tensor "is tracing". It would then build an s×s mask and copy k/v to every query head
    (repeat_kv) in each layer — memory the real run never allocates (a saved-tensor census of
    the real step shows none). The trace feeds one unpacked sequence per row with no cache, so
    for it there is no packing and the offset is 0.
    """
    from transformers import masking_utils

    original = masking_utils._ignore_causal_mask_sdpa

    def ignore_causal_mask_sdpa(padding_mask, q_length, kv_length, q_offset, *args, **kwargs):
        if isinstance(q_offset, FakeTensor):
            q_offset = 0
        return original(padding_mask, q_length, kv_length, q_offset, *args, **kwargs)

    originals = (masking_utils._ignore_causal_mask_sdpa, masking_utils.find_packed_sequence_indices)
    masking_utils._ignore_causal_mask_sdpa = ignore_causal_mask_sdpa
    masking_utils.find_packed_sequence_indices = lambda position_ids: None
    try:
        yield
    finally:
        masking_utils._ignore_causal_mask_sdpa, masking_utils.find_packed_sequence_indices = originals
