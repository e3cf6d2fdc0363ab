"""CUDA allocator history and statistics around a script run."""

from __future__ import annotations

import contextlib

from memdoc.probe.cuda_stats import digest_stats
from memdoc.probe.script.result import ScriptResult
from memdoc.probe.script.session import Session


def cuda_start(session: Session) -> bool:
    torch = session.torch
    if not torch.cuda.is_available():
        return False
    with contextlib.suppress(Exception):
        torch.cuda.memory._record_memory_history(max_entries=200_000)
    with contextlib.suppress(Exception):
        torch.cuda.reset_peak_memory_stats()

    def observer(device, alloc, device_alloc, device_free):
        session.cuda_oom_info = {
            "device": device,
            "tried": alloc,
            "device_allocated": device_alloc,
            "device_free": device_free,
        }

    with contextlib.suppress(Exception):
        torch._C._cuda_attach_out_of_memory_observer(observer)
    return True


def cuda_collect(result: ScriptResult, session: Session, want_snapshot: bool) -> None:

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
