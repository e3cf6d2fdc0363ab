"""Out-of-memory messages that are not the caching allocator's: NCCL's own buffers and host-RAM kills.

`parse_nccl(text)` and `parse_host_kills(text)` read normalised log text (`logtext.normalise_log`) and
return `OomEvent`s of format `nccl` (kind `nccl-oom`) and `host-kill` (kind `host-oom`). Each pattern
is the text the named source prints:

- NCCL `src/include/checks.h` `CUDACHECK`: `WARN("Cuda failure '%s'", cudaGetErrorString(err))`, then
  `return ncclUnhandledCudaError`; `debug.cc` prefixes a WARN with `host:pid:tid [cudaDev] file:line NCCL
  WARN`; some versions print the error number ("Cuda failure 2 'out of memory'"); `include/alloc.h` adds
  "Failed to CUDA calloc N bytes". PyTorch's `ProcessGroupNCCL` re-raises it as "NCCL error in: …,
  unhandled cuda error …, ncclUnhandledCudaError: Call to CUDA function failed. Last error: Cuda failure
  'out of memory'". `ncclUnhandledCudaError` alone is any CUDA failure ('invalid argument', 'unknown
  error' occur in public logs), so only the 'out of memory' text makes an event.
- The Linux kernel's `mm/oom_kill.c` `__oom_kill_process`: "Out of memory: Killed process PID (NAME)
  total-vm:NkB, anon-rss:NkB, …" ("Memory cgroup out of memory: …" under a cgroup limit; kernels
  before 5.x print "Killed process PID (NAME) total-vm:…" after "Out of memory: Kill process …").
  The kernel's kB are KiB (`K(x)` shifts pages by PAGE_SHIFT − 10).
- torch 2.13 `torch/distributed/elastic/multiprocessing/api.py` `MultiprocessContext.wait`: "failed
  (exitcode: -9) local_rank: L (pid: P) of binary: …", and `errors/__init__.py`
  `_FAILURE_FORMAT_TEMPLATE`: "rank : R (local_rank: L) / exitcode : -9 (pid: P) [SIGKILL] / … /
  traceback : Signal 9 (SIGKILL) received by PID P" (`ProcessFailure.__post_init__`).
- Python's `subprocess.CalledProcessError.__str__` (accelerate/deepspeed launchers): "Command '…' died
  with <Signals.SIGKILL: 9>."
- torch `torch/csrc/DataLoader.cpp` (strings in `libtorch_python.so` of torch 2.13): "DataLoader worker
  (pid N) is killed by signal: Killed." (`strsignal(SIGKILL)` is "Killed").
- bash's job report for a SIGKILL'd job: a line "Killed", or "script.sh: line 5:  1921 Killed   cmd".

SIGKILL is what the kernel's oom-killer sends, and what schedulers send when a job exceeds its memory
limit; it is also `kill -9`. The doctor says so (`oom_symptom`), never more. Parsing never raises.
"""

from __future__ import annotations

import re

from memdoc.core.doctor.oom_event import OomEvent

__all__ = ["parse_host_kills", "parse_nccl"]

_NCCL_OOM = re.compile(
    r"(?:\[(\d+)\]\s+(?:([\w./-]+:\d+)\s+)?NCCL\s+WARN\s+)?Cuda\s+failure\s+(?:\d+\s+)?'out\s+of\s+memory'"
)
_NCCL_CALLOC = re.compile(r"Failed\s+to\s+CUDA\s+calloc\s+(\d+)\s+bytes")
_NCCL_STATUS = "Cuda failure 'out of memory'"

_KERNEL = re.compile(
    r"(?:(Out of memory|Memory cgroup out of memory):\s+)?Killed process (\d+) \(([^)\n]{1,64})\),?\s+"
    r"total-vm:\s*[\d,]+\s*kB,\s+anon-rss:\s*([\d,]+)\s*kB"
)
_ELASTIC_LOG = re.compile(r"failed \(exitcode: -9\) local_rank: (\d+) \(pid: (\d+)\)")
_ELASTIC_REPORT = re.compile(r"(?:rank\s*:\s*(\d+)\s*\(local_rank:\s*\d+\)\s*)?exitcode\s*:\s*-9\s*\(pid:\s*(\d+)\)")
_ELASTIC_SIGNAL = re.compile(r"Signal 9 \(SIGKILL\) received by PID (\d+)")
_LAUNCHER = re.compile(r"died with <Signals\.SIGKILL: 9>")
_WORKER = re.compile(r"DataLoader worker \(pid (\d+)\) is killed by signal: Killed\b")
_SHELL = re.compile(r"^\**(?:[^\n:]{1,200}: line \d+:\s+)?(?:(\d+)\s+)?Killed\**(?:\s{2,}\S[^\n]*)?$", re.M)


def parse_nccl(text: str) -> list[OomEvent]:
    """One event for all of NCCL's "Cuda failure 'out of memory'" lines in `text` (ranks and repeats
    counted in `count`): the first line's device and source location, the calloc size when printed."""
    matches = list(_NCCL_OOM.finditer(text))
    if not matches:
        return []
    located = next((m for m in matches if m.group(1) is not None), matches[0])
    calloc = _NCCL_CALLOC.search(text)
    first = matches[0]
    return [
        OomEvent(
            format="nccl",
            variant="cuda-failure",
            backend="CUDA",
            gpu=int(located.group(1)) if located.group(1) is not None else None,
            call=located.group(2),
            requested=int(calloc.group(1)) if calloc else None,
            status=_NCCL_STATUS,
            count=len(matches),
            position=first.start(),
            raw=re.sub(r"\s+", " ", located.group(0)),
        )
    ]


def _kib(number: str) -> int:
    return int(number.replace(",", "")) * 1024


def _host(variant: str, m: re.Match[str], **fields) -> OomEvent:
    return OomEvent(
        format="host-kill",
        variant=variant,
        status="SIGKILL",
        position=m.start(),
        raw=re.sub(r"\s+", " ", m.group(0)).strip(" *"),
        **fields,
    )


def _kernel_and_elastic(text: str) -> list[OomEvent]:
    events = [
        _host("kernel-oom-killer", m, pid=int(m.group(2)), process=m.group(3).strip(), host_rss=_kib(m.group(4)))
        for m in _KERNEL.finditer(text)
    ]
    pids: dict[int, OomEvent] = {}
    for m in _ELASTIC_REPORT.finditer(text):
        pid = int(m.group(2))
        pids.setdefault(pid, _host("elastic-sigkill", m, pid=pid, rank=int(m.group(1)) if m.group(1) else None))
    for m in _ELASTIC_LOG.finditer(text):
        pids.setdefault(int(m.group(2)), _host("elastic-sigkill", m, pid=int(m.group(2))))
    for m in _ELASTIC_SIGNAL.finditer(text):
        pids.setdefault(int(m.group(1)), _host("elastic-sigkill", m, pid=int(m.group(1))))
    return events + list(pids.values())


def parse_host_kills(text: str) -> list[OomEvent]:
    """Every host-RAM kill in `text`: one event per killed process (the kernel's line, torchrun's log
    line and its failure report for one PID are one event), in order of appearance."""
    events = _kernel_and_elastic(text)
    events += [_host("dataloader-worker", m, pid=int(m.group(1))) for m in _WORKER.finditer(text)]
    events += [_host("launcher-sigkill", m) for m in _LAUNCHER.finditer(text)]
    if not events:
        # A shell's bare "Killed" is the weakest evidence: read only when nothing names the kill.
        events = [_host("shell-killed", m, pid=int(m.group(1)) if m.group(1) else None) for m in _SHELL.finditer(text)]
    events.sort(key=lambda e: e.position)
    return events
