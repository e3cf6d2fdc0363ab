"""This machine's RAM, the host-RAM limit `memdoc plan` puts on offloaded plans; no psutil, no torch."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from memdoc.errors import PlanError

GIB = 1024**3
MEMINFO = Path("/proc/meminfo")


@dataclass(frozen=True)
class HostRam:
    """The host RAM per node that offloaded states may use, and where that figure comes from."""

    bytes: int | None
    """None: not known (no --host-ram and this machine's RAM could not be read): no limit is applied."""
    source: str
    """In words, for the output: "--host-ram", "this machine's RAM (/proc/meminfo)", …"""


def machine_ram_bytes() -> tuple[int, str] | None:
    """This machine's physical RAM and where it was read: /proc/meminfo's MemTotal (Linux, kB), else
    sysconf's page size × physical pages (POSIX); None when neither answers."""
    try:
        for line in MEMINFO.read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024, "this machine's RAM (/proc/meminfo)"
    except (OSError, ValueError, IndexError):
        pass
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None
    return (pages * size, "this machine's RAM (sysconf)") if pages > 0 and size > 0 else None


NOT_LOCAL = "not judged: no GPU on this machine (NVML), so its RAM is not the node's; pass --host-ram GiB"


def host_ram(gib: float | None) -> HostRam:
    """The limit of `--host-ram GIB` when given; else this machine's RAM when its GPUs are the ones billed (NVML
    sees one: `resolve.gpus.detect_local_gpu`); else none (a laptop planning for a remote 8×H100 box)."""
    from memdoc.resolve.gpus import detect_local_gpu

    if gib is not None:
        if not math.isfinite(gib) or gib <= 0:
            raise PlanError(f"--host-ram {gib}: give the node's host RAM as a positive number of GiB (e.g. 512)")
        return HostRam(bytes=round(gib * GIB), source="--host-ram")
    if detect_local_gpu() is None:
        return HostRam(bytes=None, source=NOT_LOCAL)
    found = machine_ram_bytes()
    if found is None:
        return HostRam(bytes=None, source="unknown: pass --host-ram GiB to limit offloaded plans")
    return HostRam(bytes=found[0], source=found[1])
