"""A live-tensor byte counter with phases, independent of memdoc: every storage alive, counted once.

`LiveBytes` is a `TorchDispatchMode`: every aten op's output tensors are registered by storage (views and
in-place results land on a storage already counted), and a `weakref.finalize` on each storage object drops
its bytes when the storage is freed (torch keeps one Python object per live storage, as
`torch/distributed/_tools/mem_tracker.py` `MemTracker._update_and_maybe_create_winfos` relies on). Tensors
alive before the mode starts (weights, optimizer states, the batch) are found by a `gc` scan of every Python
tensor object. The phase is a label that the trainer's own methods set (`phases.py`); each phase's peak is the
highest total of live bytes seen while it was the label.
"""

from __future__ import annotations

import gc
import itertools
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.weak import WeakIdKeyDictionary


class LiveBytes(TorchDispatchMode):
    """Live storages (a serial number, never reused -> bytes), their total, each phase's peak total and the live
    storages at that peak (`peak_live`, to say what dominates it)."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, int] = {}
        self.keys = WeakIdKeyDictionary()
        self._serial = itertools.count()
        self.total = 0
        self.phase = "forward"
        self.peaks: dict[str, int] = {}
        self.peak_live: dict[str, dict[int, int]] = {}

    def add(self, t) -> None:
        """Count `t`'s whole storage unless it is counted already (CPU tensors only; meta has no bytes)."""
        if not isinstance(t, torch.Tensor) or t.is_meta or t.device.type != "cpu":
            return
        storage = t.untyped_storage()
        nbytes = storage.nbytes()
        if storage in self.keys or nbytes == 0:
            return
        key = self.keys[storage] = next(self._serial)
        self.live[key] = nbytes
        self.total += nbytes
        weakref.finalize(storage, self._drop, key)

    def key_of(self, t: torch.Tensor) -> int | None:
        """The serial number of `t`'s storage, if counted."""
        return self.keys.get(t.untyped_storage())

    def _drop(self, key: int) -> None:
        self.total -= self.live.pop(key, 0)

    def scan(self) -> None:
        """Count every tensor that Python can reach now (`gc.get_objects`), and their gradients."""
        for obj in gc.get_objects():
            if isinstance(obj, torch.Tensor):
                self.add(obj)
                if obj.grad is not None:
                    self.add(obj.grad)
        self.note()

    def set_phase(self, phase: str) -> str:
        """Make `phase` the label of what follows; return the label it replaces."""
        previous, self.phase = self.phase, phase
        self.note()
        return previous

    def note(self) -> None:
        """Raise the current phase's peak to the current total if it is higher."""
        if self.total > self.peaks.get(self.phase, -1):
            self.peaks[self.phase] = self.total
            self.peak_live[self.phase] = dict(self.live)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for leaf in tree_leaves(out):
            self.add(leaf)
        self.note()
        return out
