"""One out-of-memory message as figures in bytes: `OomEvent`, what `memdoc.core.doctor.oom` parses.

Sizes: PyTorch prints sizes with c10's `format_size`: "N bytes" up to 1 KiB, then KiB/MiB/GiB with
two decimals, all binary (1 GiB = 1024³ bytes), so a parsed figure is exact only to ±0.005 of the
unit (`size_to_bytes` rounds half-even to whole bytes). The request printed is the allocator's
segment-sized `alloc_size`, not the tensor's size (c10 `DeviceCachingAllocator::malloc` formats
`get_allocation_size(round_size(n))`): ≤ 1 MiB shows as 2 MiB, < 10 MiB as 20 MiB, larger ones
rounded up to 2 MiB.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation

__all__ = ["DEVICE_KINDS", "FORMATS", "KINDS", "OomEvent", "kind_of_format", "size_to_bytes"]

FORMATS = (
    "cuda-current",
    "cuda-legacy",
    "hip",
    "cublas-alloc",
    "cudnn",
    "cuda-generic",
    "vllm-kv-cache",
    "nccl",
    "host-kill",
)
"""Values of `OomEvent.format`. `variant` refines them (see `OomEvent.variant`)."""

KINDS = ("cuda-oom", "cuda-error", "nccl-oom", "host-oom", "vllm-kv")
"""Values of `OomEvent.kind`, what ran out and who said so:

- `cuda-oom`: the caching allocator's "CUDA/HIP out of memory. Tried to allocate …" (sizes given);
- `cuda-error`: a CUDA/HIP runtime or library status without sizes ("CUDA error: out of memory", e.g. in
  `torch.cuda.set_device` or context creation; cuBLAS/cuDNN `*_ALLOC_FAILED`);
- `nccl-oom`: NCCL could not allocate its own device buffers ("NCCL WARN Cuda failure 'out of memory'");
- `host-oom`: the process was killed for host RAM (SIGKILL from the kernel's oom-killer, torchrun's
  `exitcode: -9`, a DataLoader worker killed by signal, a shell's "Killed");
- `vllm-kv`: vLLM refused to start because its KV cache does not fit."""

DEVICE_KINDS = ("cuda-oom", "cuda-error", "nccl-oom", "vllm-kv")
"""Kinds where the GPU ran out (as opposed to host RAM)."""

_FORMAT_KIND = {
    "cuda-current": "cuda-oom",
    "cuda-legacy": "cuda-oom",
    "hip": "cuda-oom",
    "cublas-alloc": "cuda-error",
    "cudnn": "cuda-error",
    "cuda-generic": "cuda-error",
    "vllm-kv-cache": "vllm-kv",
    "nccl": "nccl-oom",
    "host-kill": "host-oom",
}


def kind_of_format(fmt: str, variant: str | None = None) -> str:
    """The `KINDS` value of a message layout: HIP's size-less runtime error is a `cuda-error`."""
    if fmt == "hip" and variant == "hip-runtime-oom":
        return "cuda-error"
    return _FORMAT_KIND.get(fmt, "cuda-error")


_UNIT_BYTES = {
    "bytes": 1,
    "byte": 1,
    "B": 1,
    "KiB": 1024,
    "MiB": 1024**2,
    "GiB": 1024**3,
    "TiB": 1024**4,
    "kB": 10**3,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
}


def size_to_bytes(number: str, unit: str) -> int | None:
    """'23.65', 'GiB' → 25393994138. Decimal units (kB/MB/GB/TB) are powers of 1000. None if unreadable."""
    scale = _UNIT_BYTES.get(unit)
    if scale is None:
        return None
    try:
        value = Decimal(number.replace(",", ""))
    except (InvalidOperation, ValueError):
        return None
    return int((value * scale).to_integral_value(rounding=ROUND_HALF_EVEN))


@dataclass(frozen=True, kw_only=True)
class OomEvent:
    """One out-of-memory message, figures in bytes (None when the message does not state them)."""

    format: str
    """Message layout: one of `FORMATS`."""
    variant: str | None = None
    """Refinement: 'capacty-typo' (2.1-era text), 'no-advice' (legacy text without the advice
    sentence), 'legacy-cached' (1.0–1.3 text with 'cached'), 'legacy' (HIP in the legacy layout),
    'cuda-runtime-oom', 'thc-legacy', 'driver-oom', 'hip-runtime-oom' (size-less messages);
    'no-cache-blocks', 'max-seq-len', 'kv-needed' (vLLM's KV-cache refusals); 'cuda-failure' (NCCL);
    'kernel-oom-killer', 'elastic-sigkill', 'launcher-sigkill', 'dataloader-worker', 'shell-killed'
    (host kills, see `memdoc.core.doctor.oom_kinds`)."""
    kind: str = ""
    """One of `KINDS`; derived from `format` when not given."""
    backend: str | None = None
    """'CUDA', 'HIP' or 'XPU'."""
    exception_type: str | None = None
    """The exception class printed before the message ('torch.cuda.OutOfMemoryError', 'RuntimeError', …)."""
    gpu: int | None = None
    """Device index as printed (after any CUDA_VISIBLE_DEVICES remapping)."""
    requested: int | None = None
    """The single allocation that failed."""
    total: int | None = None
    """Total capacity of the device."""
    free: int | None = None
    """Free device memory according to the driver at the time of failure."""
    allocated_by_pytorch: int | None = None
    """Bytes in live tensors ('allocated by PyTorch'; the legacy 'already allocated')."""
    reserved_unallocated: int | None = None
    """Bytes the caching allocator holds but no tensor uses (current text)."""
    reserved_total: int | None = None
    """'reserved in total by PyTorch' (legacy text): allocated + cached-but-unused."""
    already_allocated: int | None = None
    """'already allocated' (legacy text only; the same quantity as `allocated_by_pytorch`)."""
    cached: int | None = None
    """'cached' (1.0–1.3 legacy text): reserved but unallocated bytes."""
    allowed: int | None = None
    """'allowed' (legacy text under `set_per_process_memory_fraction`)."""
    allocated_in_private_pools: int | None = None
    """'with X allocated in private pools (e.g., CUDA Graphs)'."""
    this_process_in_use: int | None = None
    """'Including non-PyTorch memory, this process has X memory in use' (NVML, this PID)."""
    other_processes: tuple[tuple[int, int], ...] = ()
    """('Process PID has X memory in use', …) as (pid, bytes). In a container, this process itself
    can appear here under its host PID."""
    advice: str | None = None
    """Allocator advice the message gives: 'expandable_segments' or 'max_split_size_mb'."""
    alloc_conf_var: str | None = None
    """The allocator env var the message names (PYTORCH_CUDA_ALLOC_CONF / PYTORCH_HIP_ALLOC_CONF)."""
    status: str | None = None
    """Library status for size-less messages ('CUBLAS_STATUS_ALLOC_FAILED', 'CUDA error: out of memory')."""
    call: str | None = None
    """The library call named by the message ('cublasCreate(handle)')."""
    max_model_len: int | None = None
    """vLLM: the context length the engine must serve ('max seq len (N)'), in tokens."""
    kv_cache_tokens: int | None = None
    """vLLM: tokens the KV cache could hold ('… stored in KV cache (M)')."""
    kv_cache_needed: int | None = None
    """vLLM v1: KV-cache bytes one max-length request needs."""
    kv_cache_available: int | None = None
    """vLLM: KV-cache bytes left under `gpu_memory_utilization` after weights and activations (negative when
    they exceed it: "Available KV cache memory: -0.21 GiB")."""
    max_model_len_allowed: int | None = None
    """vLLM: the longest max_model_len the log's own figures allow (`oom_vllm.allowed_max_model_len`)."""
    pid: int | None = None
    """Host kills: the process killed (kernel, torchrun, DataLoader worker, shell job)."""
    process: str | None = None
    """Host kills: the process name the kernel prints ('python')."""
    rank: int | None = None
    """Host kills: the global rank torchrun's failure report names."""
    host_rss: int | None = None
    """Host kills: the killed process's anonymous resident memory (the kernel's 'anon-rss')."""
    truncated: bool = False
    """The text ends inside the message (an excerpt cut mid-sentence)."""
    count: int = 1
    """How many times this same message occurs in the log (repeats collapsed)."""
    position: int = field(default=0, compare=False)
    """Character offset of the message in the normalised log text."""
    raw: str = field(default="", compare=False)
    """The matched message text, whitespace collapsed."""

    def __post_init__(self) -> None:
        if not self.kind:
            object.__setattr__(self, "kind", kind_of_format(self.format, self.variant))

    @property
    def on_device(self) -> bool:
        """True when the GPU ran out (not host RAM)."""
        return self.kind in DEVICE_KINDS

    @property
    def unused_reserved(self) -> int | None:
        """Reserved-but-unallocated bytes, from whichever figures this format gives."""
        if self.reserved_unallocated is not None:
            return self.reserved_unallocated
        if self.cached is not None:
            return self.cached
        if self.reserved_total is not None and self.allocated_by_pytorch is not None:
            return max(0, self.reserved_total - self.allocated_by_pytorch)
        return None

    @property
    def reserved(self) -> int | None:
        """Total bytes reserved by the caching allocator (allocated + unused)."""
        if self.reserved_total is not None:
            return self.reserved_total
        unused = self.unused_reserved
        if unused is not None and self.allocated_by_pytorch is not None:
            return self.allocated_by_pytorch + unused
        return None

    @property
    def non_pytorch(self) -> int | None:
        """This process's memory outside the caching allocator (CUDA context, cuBLAS/NCCL workspaces).

        None when the message lacks the figures or they are inconsistent (NVML reporting 0 bytes for
        a process that holds tensors happens in containers)."""
        reserved = self.reserved
        if self.this_process_in_use is None or reserved is None or self.this_process_in_use < reserved:
            return None
        return self.this_process_in_use - reserved

    @property
    def has_sizes(self) -> bool:
        return self.requested is not None
