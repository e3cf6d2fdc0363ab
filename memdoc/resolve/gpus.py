"""The local GPU, read through NVML (nvidia-ml-py, imported lazily); no torch."""

from __future__ import annotations

import dataclasses
import os

from memdoc.core.model.gpu import GpuSpec, match_device_name


def _visible_indices(device_count: int) -> list[int] | None:
    """NVML indices CUDA_VISIBLE_DEVICES leaves visible, or None when it lists UUIDs / is unset."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is None:
        return None
    parts = [p.strip() for p in env.split(",") if p.strip()]
    out: list[int] = []
    for part in parts:
        if not part.lstrip("-").isdigit():
            return None
        i = int(part)
        if i < 0 or i >= device_count:
            break  # CUDA stops at the first invalid index
        out.append(i)
    return out


def detect_local_gpu() -> GpuSpec | None:
    """The first visible local NVIDIA GPU via NVML, or None (no driver, no GPU, any error).

    Memory is what torch can allocate: the table's torch-observed `total_memory` when the device name matches an
    entry measured that way (NVML's total is larger: 140.40 GiB on an H200 whose torch and OOM messages say 139.80
    GiB), else NVML's total for that device. Bandwidth, TFLOPS and link come from the table when the device name
    matches an entry; otherwise they are None. `count` is the number of visible devices with the same name
    (honouring integer CUDA_VISIBLE_DEVICES).
    """
    try:
        import pynvml  # nvidia-ml-py

        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        total = pynvml.nvmlDeviceGetCount()
        visible = _visible_indices(total)
        indices = list(range(total)) if visible is None else visible
        if not indices:
            return None

        def name_of(i: int) -> str:
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))
            return name.decode() if isinstance(name, bytes) else str(name)

        first = name_of(indices[0])
        memory = int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(indices[0])).total)
        count = sum(1 for i in indices if name_of(i) == first)
        spec = match_device_name(first)
        if spec is not None and spec.memory_basis == "torch":
            return dataclasses.replace(spec, count=count)
        if spec is not None:
            return dataclasses.replace(spec, memory_bytes=memory, memory_basis="nvml", count=count)
        try:
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(pynvml.nvmlDeviceGetHandleByIndex(indices[0]))
            capability = f"{major}.{minor}"
        except Exception:
            capability = None
        return GpuSpec(
            id="local",
            compute_capability=capability,
            name=first,
            vendor="nvidia",
            memory_bytes=memory,
            memory_basis="nvml",
            memory_bandwidth_gbps=None,
            bf16_tflops=None,
            host_link_gbps=None,
            host_link=None,
            source=None,
            count=count,
        )
    except Exception:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
