"""The cause a host-RAM kill, an NCCL out-of-memory or a failed CUDA context states by itself, before any
figure is read.

`kind_causes(event, log_text)` returns, for a `host-oom` or `nccl-oom` event (`memdoc.core.doctor.oom_kinds`),
or a size-less `cuda-error` raised while the process creates its CUDA context (`torch.cuda.set_device`,
`_lazy_init`), one `Cause` with the evidence the message gives; `()` for the other kinds, whose figures
`oom_causes.read_causes` reads. `infer_symptom` puts these first. Pure logic: no torch.
"""

from __future__ import annotations

import re

from memdoc.core.doctor.oom_causes import Cause
from memdoc.core.doctor.oom_event import OomEvent
from memdoc.units import format_bytes

__all__ = ["kind_causes"]

_HOST_WHO = {
    "kernel-oom-killer": "the kernel's oom-killer killed",
    "elastic-sigkill": "torchrun reports SIGKILL (exitcode -9) for",
    "launcher-sigkill": "the launcher reports SIGKILL for",
    "dataloader-worker": "a DataLoader worker was killed by SIGKILL:",
    "shell-killed": "the shell reports 'Killed' for",
}


def _host(event: OomEvent) -> Cause:
    who = _HOST_WHO.get(event.variant or "", "SIGKILL for")
    what = f"PID {event.pid}" if event.pid is not None else "the job"
    if event.process:
        what += f" ({event.process})"
    if event.rank is not None:
        what += f", rank {event.rank}"
    rss = f", which held {format_bytes(event.host_rss)} of host RAM" if event.host_rss else ""
    return Cause(
        id="host-ram",
        title="The host ran out of RAM and the process was killed",
        evidence=f"{who} {what}{rss}",
        fix=(
            "Cut host memory: fewer DataLoader workers, weights loaded on rank 0 only "
            "(FSDP cpu_ram_efficient_loading), less CPU offload; "
            "check `dmesg` or the scheduler's memory limit to confirm"
        ),
        frees_bytes=None,
    )


def _nccl(event: OomEvent) -> Cause:
    where = f" at {event.call}" if event.call else ""
    device = f" on device {event.gpu}" if event.gpu is not None else ""
    size = f"; it asked for {format_bytes(event.requested)}" if event.requested else ""
    times = f" ({event.count} times)" if event.count > 1 else ""
    return Cause(
        id="nccl-buffers",
        title="NCCL could not allocate its communication buffers",
        evidence=f"NCCL reports Cuda failure 'out of memory'{where}{device}{times}{size}",
        fix=(
            "Leave room for NCCL outside PyTorch's allocator: a smaller NCCL_BUFFSIZE, fewer channels "
            "(NCCL_MAX_NCHANNELS), or a memory fraction below 1 for PyTorch"
        ),
        frees_bytes=None,
    )


_CONTEXT = re.compile(r"\bset_device\b|_cuda_setDevice|\b_lazy_init\b|cudaSetDevice")
"""Frames of CUDA context creation (torch 2.13 `torch/cuda/__init__.py` `set_device`, `_lazy_init`)."""


def _context(event: OomEvent) -> Cause:
    return Cause(
        id="card-full-at-start",
        title="The card was already full when this process created its CUDA context",
        evidence=(
            "CUDA error: out of memory while creating the CUDA context (torch.cuda.set_device): the context alone "
            "takes a few hundred MiB, so something else already holds the card"
        ),
        fix=(
            "Check nvidia-smi for other processes on the card; give every rank its own GPU: "
            "torch.cuda.set_device(local_rank) before any CUDA call (or CUDA_VISIBLE_DEVICES), so that no rank "
            "creates a second context on GPU 0"
        ),
        prescriptions=("rank-set-device-first",),
    )


def kind_causes(event: OomEvent | None, log_text: str = "") -> tuple[Cause, ...]:
    """The cause `event`'s kind states (host RAM, NCCL buffers, a CUDA context that could not be created), or ()
    for the other kinds."""
    if event is None:
        return ()
    if event.kind == "cuda-error" and not event.has_sizes and _CONTEXT.search(log_text):
        return (_context(event),)
    if event.kind == "host-oom":
        return (_host(event),)
    if event.kind == "nccl-oom":
        return (_nccl(event),)
    return ()
