"""GPUs: the packaged table (`memdoc/data/gpus.yaml`), `--gpu` resolution and local detection.

Pure Python: no torch, no NVML (local detection is `memdoc.resolve.gpus`).

`--gpu` accepts
  * a table id, name or alias, case-insensitively, ignoring spaces, '-' and '_'
    ("rtx-4090", "RTX 4090", "4090", "a100", "H100 SXM");
  * a memory size up to 1024: "24", "24gb", "24GB", "24GiB", "24 g" all mean a generic GPU with
    24 GiB. Table names win ("4090" is the RTX 4090); a larger bare number ("4070") is unknown.
    A bare number and "GB" are read as GiB on purpose: a card marketed as "24 GB" exposes
    24 GiB (25,769,803,776 bytes) or a little less, never 24 × 10⁹;
  * either of the above prefixed with a count, "8xh100" / "2x 24gb", which sets `count`.

Ambiguous short names map to one variant (see the header of gpus.yaml): "a100" → a100-80,
"h100" → h100-sxm, "v100" → v100-16, "mi250x" → one MI250X GCD.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import re
from dataclasses import dataclass
from importlib import resources

import yaml

from memdoc.errors import UnknownGpuError
from memdoc.units import GiB

_REQUIRED = (
    "id",
    "name",
    "vendor",
    "aliases",
    "memory_nominal_gb",
    "memory_bytes",
    "memory_basis",
    "memory_bandwidth_gbps",
    "bf16_tflops",
    "fp16_tflops",
    "host_link",
    "host_link_gbps",
    "gpu_link",
    "gpu_link_gbps",
    "source",
)
_BASES = ("torch", "driver", "nominal", "nvml", "user")


@dataclass(frozen=True, kw_only=True)
class GpuSpec:
    """One GPU model (times `count`) as memdoc plans for it. All figures are per device."""

    id: str
    """Table id in kebab-case ("rtx-4090", "a100-80", "h100-sxm"); "24gib" for a size-only GPU,
    "local" for a detected GPU not in the table."""
    name: str
    """Human name ("NVIDIA GeForce RTX 4090", "24 GiB GPU")."""
    memory_bytes: int
    """Device memory a process can see, in bytes (the `total_memory` torch reports where known;
    see `memory_basis`)."""
    memory_bandwidth_gbps: float | None
    """Peak device-memory bandwidth in GB/s (10⁹ bytes/s); None when unknown."""
    bf16_tflops: float | None
    """Peak dense BF16 tensor throughput, TFLOPS (10¹² FLOP/s), FP32 accumulate, no sparsity;
    None when unknown or when the GPU has no BF16 tensor path (T4, V100)."""
    host_link_gbps: float | None
    """Host↔GPU link bandwidth in GB/s, one direction (PCIe 4.0 x16 = 31.5); None when unknown."""
    host_link: str | None
    """The host link in words ("PCIe 4.0 x16"); None when unknown."""
    source: str | None
    """Datasheet URL the figures come from; None for a size-only or unmatched detected GPU."""
    count: int = 1
    """How many of these GPUs the plan uses (data/tensor parallel degree across devices)."""
    vendor: str = "unknown"
    """"nvidia", "amd" or "unknown"."""
    fp16_tflops: float | None = None
    """Peak dense FP16 tensor throughput, TFLOPS, FP32 accumulate, no sparsity; None when unknown."""
    fp32_tflops: float | None = None
    """Peak FP32 (non-tensor) TFLOPS: fp32 matmuls under torch's default (TF32 off); None when unknown."""
    memory_nominal_gb: float | None = None
    """The marketing memory size ("24" for a "24 GB" card), in GB as printed; None when unknown."""
    memory_basis: str = "nominal"
    """Where `memory_bytes` comes from: "torch" (observed `total_memory`), "driver" (nvidia-smi /
    rocm-smi total), "nominal" (marketing size read as GiB), "nvml" (detected on this machine),
    "user" (a size given on the command line)."""
    aliases: tuple[str, ...] = ()
    """Lower-case spellings users type for this GPU (matched ignoring spaces, '-' and '_')."""
    device_names: tuple[str, ...] = ()
    """Exact device names NVML / torch report for this model (used by detection)."""
    notes: str | None = None
    """Caveats about the figures (derived values, variants), for humans."""
    compute_capability: str | None = None
    """NVIDIA CUDA compute capability ("8.9"); None for AMD and for GPUs known only by size."""

    @property
    def supports_bf16(self) -> bool:
        """Whether the card runs bf16: compute capability ≥ 8.0 (Ampere+), the test
        `torch.cuda.is_bf16_supported()` makes; AMD CDNA2/3 and size-only GPUs are taken to run it."""
        if self.compute_capability is None:
            return True
        return int(self.compute_capability.split(".")[0]) >= 8

    gpu_link: str | None = None
    """The GPU↔GPU link inside a node that NCCL/RCCL collectives run over, in words ("NVLink 4 (18 links,
    NVSwitch)", "PCIe 4.0 x16 via host (GeForce: P2P off)"); None when unknown."""
    gpu_link_gbps: float | None = None
    """That link's bandwidth per GPU in GB/s, one direction (NVLink 4: 450); None when unknown (the
    collectives then use `host_link_gbps`)."""
    gpu_link_source: str | None = None
    """Datasheet URL of `gpu_link_gbps` where it is not the host link."""

    @property
    def peer_link_gbps(self) -> float | None:
        """GB/s per direction one GPU exchanges with the other GPUs of its node: `gpu_link_gbps`, else the host link."""
        return self.gpu_link_gbps if self.gpu_link_gbps is not None else self.host_link_gbps

    process_overhead_bytes: int | None = None
    """A training process's device memory outside PyTorch's allocator (CUDA context, kernels,
    library workspaces), where measured on this GPU; None: the bill's default."""

    @property
    def total_memory_bytes(self) -> int:
        """Memory of all `count` devices together, in bytes."""
        return self.memory_bytes * self.count

    @property
    def is_generic(self) -> bool:
        """True for a GPU known only by its memory size (no bandwidth or TFLOPS)."""
        return self.source is None and self.bf16_tflops is None and self.memory_bandwidth_gbps is None


def _norm(text: str) -> str:
    """Lower-case with spaces, '-', '_' and '/' removed: the key every name is matched by."""
    return re.sub(r"[\s\-_/]+", "", text.strip().lower())


def _spec_from_entry(entry: dict) -> GpuSpec:
    missing = [k for k in _REQUIRED if k not in entry]
    if missing:
        raise ValueError(f"gpus.yaml entry {entry.get('id', '?')!r} lacks {', '.join(missing)}")

    def opt_float(key: str) -> float | None:
        value = entry.get(key)
        return None if value is None else float(value)

    return GpuSpec(
        id=str(entry["id"]),
        name=str(entry["name"]),
        vendor=str(entry["vendor"]),
        aliases=tuple(str(a).lower() for a in entry["aliases"]),
        device_names=tuple(str(n) for n in entry.get("device_names", ())),
        memory_bytes=int(entry["memory_bytes"]),
        memory_nominal_gb=float(entry["memory_nominal_gb"]),
        memory_basis=str(entry["memory_basis"]),
        memory_bandwidth_gbps=opt_float("memory_bandwidth_gbps"),
        bf16_tflops=opt_float("bf16_tflops"),
        fp16_tflops=opt_float("fp16_tflops"),
        fp32_tflops=opt_float("fp32_tflops"),
        host_link=entry["host_link"],
        host_link_gbps=opt_float("host_link_gbps"),
        gpu_link=str(entry["gpu_link"]),
        gpu_link_gbps=opt_float("gpu_link_gbps"),
        gpu_link_source=entry.get("gpu_link_source"),
        source=str(entry["source"]),
        notes=entry.get("notes"),
        compute_capability=None if entry.get("compute_capability") is None else str(entry["compute_capability"]),
        process_overhead_bytes=None
        if entry.get("process_overhead_bytes") is None
        else int(entry["process_overhead_bytes"]),
    )


@functools.lru_cache(maxsize=1)
def _table() -> tuple[GpuSpec, ...]:
    text = resources.files("memdoc").joinpath("data", "gpus.yaml").read_text(encoding="utf-8")
    # libyaml when available: the pure-Python loader takes ~30 ms of every `memdoc bill`
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    specs = tuple(_spec_from_entry(e) for e in yaml.load(text, Loader=loader)["gpus"])
    seen: dict[str, str] = {}
    for spec in specs:
        if spec.memory_basis not in _BASES:
            raise ValueError(f"gpus.yaml entry {spec.id!r}: unknown memory_basis {spec.memory_basis!r}")
        for key in {_norm(spec.id), _norm(spec.name), *(_norm(a) for a in spec.aliases)}:
            if seen.setdefault(key, spec.id) != spec.id:
                raise ValueError(f"gpus.yaml: {key!r} names both {seen[key]!r} and {spec.id!r}")
    return specs


def load_gpu_table() -> list[GpuSpec]:
    """Every GPU in the packaged table, in table order (read once, then cached)."""
    return list(_table())


@functools.lru_cache(maxsize=1)
def _index() -> dict[str, GpuSpec]:
    """Normalised id / name / alias / device name → spec."""
    index: dict[str, GpuSpec] = {}
    for spec in _table():
        for key in (spec.id, spec.name, *spec.aliases, *spec.device_names):
            index.setdefault(_norm(key), spec)
    return index


# "24", "24.5", "24gb", "24 GiB", "24g"
_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*(?:g|gb|gib)?$", re.IGNORECASE)
# Bigger bare sizes are model numbers ("4070"), not GiB; the largest GPUs today have < 300 GB.
_MAX_GIB = 1024
# "8xh100", "8 x h100", "2×24gb"
_COUNT = re.compile(r"^(\d+)\s*[x×]\s*(\S.*)$", re.IGNORECASE)


def generic_gpu(memory_gib: float, *, count: int = 1) -> GpuSpec:
    """A GPU known only by its memory, `memory_gib` GiB (bandwidth, TFLOPS and link unknown)."""
    label = f"{memory_gib:g}"
    return GpuSpec(
        id=f"{label}gib",
        name=f"{label} GiB GPU",
        memory_bytes=round(memory_gib * GiB),
        memory_bandwidth_gbps=None,
        bf16_tflops=None,
        host_link_gbps=None,
        host_link=None,
        source=None,
        count=count,
        memory_nominal_gb=memory_gib,
        memory_basis="user",
    )


def _suggestions(text: str, n: int = 3) -> list[str]:
    index = _index()
    keys = difflib.get_close_matches(_norm(text), list(index), n=10, cutoff=0.5)
    out: list[str] = []
    for key in keys:
        gid = index[key].id
        if gid not in out:
            out.append(gid)
    return out[:n]


def resolve_gpu(text: str) -> GpuSpec:
    """The GPU `--gpu TEXT` names: a table id/name/alias, or a memory size in GiB (see module doc).

    Raises `UnknownGpuError` (one line, with close matches) when TEXT is neither.
    """
    raw = text.strip()
    count = 1
    m = _COUNT.match(raw)
    if m and int(m.group(1)) >= 1 and (_SIZE.match(m.group(2).strip()) or _norm(m.group(2)) in _index()):
        count, raw = int(m.group(1)), m.group(2).strip()

    spec = _index().get(_norm(raw))
    if spec is not None:
        return dataclasses.replace(spec, count=count) if count != 1 else spec

    m = _SIZE.match(raw)
    if m:
        size = float(m.group(1))
        if size <= 0:
            raise UnknownGpuError(f"GPU memory size must be positive, got {text.strip()!r}")
        if size <= _MAX_GIB:
            return generic_gpu(size, count=count)
        # "4070", "1080": a model number not in the table, not a 4070 GiB GPU.

    close = _suggestions(raw)
    message = f"unknown GPU {text.strip()!r}"
    message += f"; did you mean {', '.join(close)}?" if close else "; not a GPU in the table or a memory size"
    raise UnknownGpuError(
        message,
        hint="Give a GPU id such as rtx-4090, a100-80, h100-sxm, or a memory size in GiB such as 24.",
    )


def match_device_name(device_name: str) -> GpuSpec | None:
    """The table entry for a device name as NVML / torch reports it ("NVIDIA H100 80GB HBM3"), or None."""
    index = _index()
    key = _norm(device_name)
    if key in index:
        return index[key]
    # Strip vendor/brand words: "NVIDIA GeForce RTX 4090" → "rtx4090".
    for prefix in ("nvidia", "geforce", "tesla", "quadro", "amd", "instinct"):
        key = key.removeprefix(prefix)
    return index.get(key)


def choice_note(text: str, spec: GpuSpec) -> str | None:
    """What a loose `--gpu TEXT` was taken to mean, when that is not obvious (None when it is).

    * a short name shared by variants ("a100", "h100", "v100") names the variant taken and the others;
    * a bare size ("24") is exactly that many GiB, while cards sold with that size expose less:
      the nearest real cards are named, with their memory, so the user can pick one.
    """
    raw = text.strip()
    m = _COUNT.match(raw)
    if m and int(m.group(1)) >= 1:
        raw = m.group(2).strip()
    key = _norm(raw)
    if spec.is_generic:
        size = spec.memory_nominal_gb
        sold = [g for g in _table() if g.memory_nominal_gb == size]
        nearest = (
            sorted(sold, key=lambda g: -g.memory_bytes)[:5]
            if sold
            else sorted(_table(), key=lambda g: abs(g.memory_bytes - spec.memory_bytes))[:3]
        )
        cards = ", ".join(f"{g.id} {g.memory_bytes / GiB:.2f} GiB" for g in nearest)
        which = f"cards sold as {size:g} GB expose" if sold else "the nearest cards have"
        return (
            f"--gpu {raw} is a generic GPU with exactly {spec.memory_bytes / GiB:.2f} GiB; {which} "
            f"{cards}: pass one (--gpu {nearest[-1].id}) to bill its real memory"
        )
    if key == _norm(spec.id):
        return None
    variants = [g for g in _table() if g.id != spec.id and _norm(g.id).startswith(key)]
    if not variants:
        return None
    others = ", ".join(f"--gpu {g.id} ({g.memory_bytes / GiB:.2f} GiB)" for g in variants)
    return f"--gpu {raw} taken as {spec.name} ({spec.memory_bytes / GiB:.2f} GiB); for another variant pass {others}"


def gpu_json(gpu: GpuSpec | None, count: int = 1) -> dict | None:
    """The one --json shape of a GPU in every command: id, name, bytes per device, devices in the plan."""
    if gpu is None:
        return None
    return {"id": gpu.id, "name": gpu.name, "memory_bytes": gpu.memory_bytes, "count": count}
