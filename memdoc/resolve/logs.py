"""Read a training log for `memdoc prescribe --log` (a regular file, or `-` for stdin), streamed.

A log of up to `WHOLE_LOG_BYTES` is read whole. A longer one (a run that printed for days, or a loop that
caught its OOM on every step) is streamed in `CHUNK`-byte chunks, and the diagnosis gets its head (where the
launcher and trainer print their settings) and the chunks around each OOM marker, up to `KEPT_BYTES` in all:
the first OOM message (what `memdoc.core.doctor.oom.first_oom` diagnoses) is always among them, with the
traceback before it. The markers (`_MARKERS`) are the literal words of every message `core.doctor.oom` and
`core.doctor.oom_kinds` parse, matched lowercase with whitespace removed, as their patterns match across
hard-wrapped lines. The scan runs at hundreds of MB/s (benchmarks/log_read.py); only the kept text is parsed.
Logs are decoded as UTF-8 (with or without its mark) or UTF-16 (`inputs.text_encoding`), undecodable bytes as �.
"""

from __future__ import annotations

import codecs
import sys
from typing import BinaryIO

from memdoc.errors import ConfigError
from memdoc.resolve.inputs import MiB, open_regular, shown, size_text, text_encoding

WHOLE_LOG_BYTES = 2 * MiB
"""Logs up to this size are diagnosed whole."""
CHUNK = 32 * 1024
"""The streaming unit; a marker keeps its chunk, the one before it (the traceback) and the one after."""
KEPT_BYTES = 512 * 1024
"""The most text handed to the diagnosis from a longer log (the head and the chunks around OOM markers)."""
MAX_LOG_BYTES = 16 * 1024 * MiB
"""The longest log read (16 GiB, minutes at the scan's speed); a longer one is refused, with `tail -c` as the way."""

_MARKERS = (
    b"triedtoallocate",  # PyTorch's sized OOM (CUDA/HIP/XPU)
    b"outofmemory",  # CUDA error: out of memory, HIP, NCCL's 'out of memory', the kernel's "Out of memory: Killed"
    b"out_of_memory",  # CUDA_ERROR_OUT_OF_MEMORY
    b"alloc_failed",  # CUBLAS_STATUS_ALLOC_FAILED, CUDNN_STATUS_ALLOC_FAILED
    b"cacheblocks",  # vLLM: No available memory for the cache blocks
    b"kvcache",  # vLLM: ... stored in KV cache
    b"killed",  # the kernel's "Killed process", a DataLoader worker "killed by signal", a shell's "Killed"
    b"sigkill",  # torchrun / the launcher
    b"exitcode:-9",  # torchrun's failure report
    b"cudacalloc",  # NCCL: Failed to CUDA calloc
)
_SQUEEZE = bytes(range(256)), b" \t\r\n\x0b\x0c"


def read_log(log: str) -> str:
    """The log's text (see the module docstring); `-` reads stdin. A one-line ConfigError for a log that is not
    a regular file (a FIFO, /dev/zero, a directory), cannot be read, or is over `MAX_LOG_BYTES`."""
    if log == "-":
        buffer = getattr(sys.stdin, "buffer", None)
        if buffer is None:  # a text-only stdin (an embedding host): its text is already decoded
            return sys.stdin.read(WHOLE_LOG_BYTES)
        return _read_stream(buffer, "-")
    with open_regular(log, what="log", error=ConfigError) as fh:
        return _read_stream(fh, log)


def _read_stream(fh: BinaryIO, name: str) -> str:
    """Stream `fh`: the whole text up to WHOLE_LOG_BYTES, else the head and the chunks around markers."""
    try:
        head = fh.read(WHOLE_LOG_BYTES + 1)
        decoder = codecs.getincrementaldecoder(text_encoding(head[:64]))(errors="replace")
        if len(head) <= WHOLE_LOG_BYTES:
            return decoder.decode(head, final=True).removeprefix("\ufeff")
        return _windows(fh, decoder, head, name).removeprefix("\ufeff")
    except OSError as exc:
        raise ConfigError(f"cannot read log {shown(name)}: {exc.strerror or exc}") from None


def _windows(fh: BinaryIO, decoder, head: bytes, name: str) -> str:
    """The head chunk and, for each chunk with a marker, the chunk before, it and the chunk after, until
    KEPT_BYTES are kept; chunks that follow each other are joined as they were, a gap as a line break."""
    kept: list[tuple[int, str]] = []
    before: tuple[int, str] | None = None  # the last chunk not kept: the traceback before a marker
    budget, after, index, total, tail = KEPT_BYTES, 0, 0, 0, b""
    data = head
    while data and budget > 0:
        total += len(data)
        if total > MAX_LOG_BYTES:
            raise ConfigError(
                f"log {shown(name)} is larger than {size_text(MAX_LOG_BYTES)}",
                hint=f"pass its end: tail -c 100M {shown(name)} | memdoc prescribe --log -",
            )
        for start in range(0, len(data), CHUNK):
            piece = decoder.decode(data[start : start + CHUNK])
            squeezed = piece.encode("utf-8", "replace").lower().translate(*_SQUEEZE)
            hit = index == 0 or any(m in tail + squeezed for m in _MARKERS)
            tail = squeezed[-16:]
            if budget > 0 and (hit or after):
                new = ([before] if hit and before else []) + [(index, piece)]
                kept += new
                budget -= sum(len(text) for _, text in new)
                before, after = None, (1 if hit else after - 1)
            else:
                before = (index, piece)
            index += 1
        data = fh.read(16 * CHUNK)
    return "".join(text if i == 0 or kept[i - 1][0] == n - 1 else "\n" + text for i, (n, text) in enumerate(kept))
