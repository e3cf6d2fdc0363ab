"""The GPU table, `--gpu` resolution and local detection (no GPU on the test machine)."""

from __future__ import annotations

import sys
import types

import pytest

from memdoc.core.model import gpu as gpu_mod
from memdoc.core.model.gpu import GpuSpec, load_gpu_table, match_device_name, resolve_gpu
from memdoc.errors import MemdocError, UnknownGpuError
from memdoc.resolve.gpus import detect_local_gpu
from memdoc.units import GiB, MiB, format_bytes

TABLE = load_gpu_table()
IDS = [g.id for g in TABLE]

REQUIRED_IDS = [
    "rtx-3090", "rtx-4090", "rtx-5090", "a10g", "l4", "t4", "v100-16", "v100-32", "a100-40",
    "a100-80", "rtx-a6000", "l40s", "h100-pcie", "h100-sxm", "h200", "b200", "mi250x", "mi300x",
    "rtx-3060", "rtx-4060-ti-16", "rtx-4080", "a40", "rtx-6000-ada",
]  # fmt: skip


def test_table_has_every_required_gpu_once():
    assert sorted(IDS) == sorted(set(IDS))
    assert set(REQUIRED_IDS) <= set(IDS)


def test_table_is_cached_but_returns_fresh_lists():
    a, b = load_gpu_table(), load_gpu_table()
    assert a == b and a is not b
    assert all(x is y for x, y in zip(a, b))


@pytest.mark.parametrize("spec", TABLE, ids=IDS)
def test_entry_fields_complete_and_sane(spec: GpuSpec):
    assert spec.id == spec.id.lower() and " " not in spec.id
    assert spec.name and spec.vendor in ("nvidia", "amd")
    assert spec.aliases and all(a == a.lower() for a in spec.aliases)
    assert spec.device_names
    assert spec.source and spec.source.startswith("https://")
    assert spec.host_link and spec.host_link.startswith("PCIe ")
    assert spec.host_link_gbps in (15.75, 31.5, 63.0)
    assert spec.memory_basis in ("torch", "driver", "nominal")
    assert spec.count == 1
    # Bandwidth in GB/s and dense TFLOPS within what exists today.
    assert 200 <= spec.memory_bandwidth_gbps <= 10_000
    assert spec.fp16_tflops is not None and 20 <= spec.fp16_tflops <= 3_000
    assert spec.bf16_tflops is None or spec.bf16_tflops == spec.fp16_tflops
    # Memory is exact bytes: at most the marketing size read as GiB, at least 90% of it
    # (ECC and driver reservations take up to ~8%).
    assert isinstance(spec.memory_bytes, int)
    nominal = spec.memory_nominal_gb * GiB
    assert 0.90 * nominal <= spec.memory_bytes <= nominal
    if spec.memory_basis != "nominal":
        assert spec.memory_bytes % MiB == 0 or spec.vendor == "amd"


def test_bf16_missing_only_where_hardware_lacks_it():
    assert {g.id for g in TABLE if g.bf16_tflops is None} == {"t4", "v100-16", "v100-32"}


@pytest.mark.parametrize(
    ("text", "expected_id"),
    [
        ("rtx-4090", "rtx-4090"),
        ("RTX 4090", "rtx-4090"),
        ("rtx4090", "rtx-4090"),
        ("4090", "rtx-4090"),
        ("NVIDIA GeForce RTX 4090", "rtx-4090"),
        ("3090", "rtx-3090"),
        ("5090", "rtx-5090"),
        ("3060", "rtx-3060"),
        ("4060 Ti", "rtx-4060-ti-16"),
        ("4080", "rtx-4080"),
        ("a100", "a100-80"),
        ("A100", "a100-80"),
        ("a100-80gb", "a100-80"),
        ("A100_80GB", "a100-80"),
        ("a100-40gb", "a100-40"),
        ("a100-40", "a100-40"),
        ("h100", "h100-sxm"),
        ("H100 SXM", "h100-sxm"),
        ("h100-pcie", "h100-pcie"),
        ("H100 PCIe", "h100-pcie"),
        ("h200", "h200"),
        ("B200", "b200"),
        ("t4", "t4"),
        ("Tesla T4", "t4"),
        ("l4", "l4"),
        ("L40S", "l40s"),
        ("a10g", "a10g"),
        ("A6000", "rtx-a6000"),
        ("rtx 6000 ada", "rtx-6000-ada"),
        ("a40", "a40"),
        ("v100", "v100-16"),
        ("v100-32gb", "v100-32"),
        ("MI250X", "mi250x"),
        ("mi300x", "mi300x"),
        ("  h100  ", "h100-sxm"),
    ],
)
def test_resolve_names_and_aliases(text, expected_id):
    spec = resolve_gpu(text)
    assert spec.id == expected_id
    assert spec.count == 1
    assert spec in TABLE


@pytest.mark.parametrize("spec", TABLE, ids=IDS)
def test_every_id_name_and_alias_resolves_to_its_entry(spec: GpuSpec):
    for text in (spec.id, spec.name, spec.id.upper(), *spec.aliases, *spec.device_names):
        assert resolve_gpu(text).id == spec.id, text


@pytest.mark.parametrize(
    ("text", "gib"),
    [
        ("24", 24),
        ("24gb", 24),
        ("24GB", 24),
        ("24GiB", 24),
        ("24 GiB", 24),
        ("24g", 24),
        ("80", 80),
        ("80GB", 80),
        ("16", 16),
        ("11.5", 11.5),
        ("192gib", 192),
    ],
)
def test_resolve_memory_size_means_gib(text, gib):
    spec = resolve_gpu(text)
    assert spec.memory_bytes == round(gib * GiB)
    assert spec.name == f"{gib:g} GiB GPU"
    assert spec.memory_bandwidth_gbps is None and spec.bf16_tflops is None and spec.fp16_tflops is None
    assert spec.host_link is None and spec.host_link_gbps is None and spec.source is None
    assert spec.is_generic and spec.memory_basis == "user"


def test_24_is_24_gib_bytes_exactly():
    assert resolve_gpu("24").memory_bytes == 25_769_803_776
    assert resolve_gpu("24").name == "24 GiB GPU"


@pytest.mark.parametrize(
    ("text", "count", "expected_id"),
    [("8xh100", 8, "h100-sxm"), ("2x 4090", 2, "rtx-4090"), ("4 x A100", 4, "a100-80"), ("2x24gb", 2, "24gib")],
)
def test_resolve_count_prefix(text, count, expected_id):
    spec = resolve_gpu(text)
    assert (spec.id, spec.count) == (expected_id, count)
    assert spec.total_memory_bytes == spec.memory_bytes * count


@pytest.mark.parametrize(
    ("text", "suggestion"),
    [
        ("rtx4900", "rtx-4090"),
        ("h1000", "h100-sxm"),
        ("a1000", "a100-80"),
        ("l40", "l40s"),
        ("4070", "rtx-4090"),
        ("mi250", "mi250x"),
        ("mi300", None),
    ],
)
def test_unknown_gpu_suggests_close_matches(text, suggestion):
    if suggestion is None:  # "mi300" is an alias, not an unknown
        assert resolve_gpu(text).id == "mi300x"
        return
    with pytest.raises(UnknownGpuError) as info:
        resolve_gpu(text)
    message = str(info.value)
    assert "\n" not in message
    assert repr(text) in message
    assert suggestion in message
    assert info.value.hint
    assert isinstance(info.value, MemdocError) and info.value.exit_code == 2


@pytest.mark.parametrize("text", ["", "banana-gpu-xyz", "0", "0gb", "-24", "24tb", "gpu", "4070", "1080ti"])
def test_unknown_or_bad_input_raises(text):
    with pytest.raises(UnknownGpuError) as info:
        resolve_gpu(text)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("device_name", "expected_id"),
    [
        ("NVIDIA GeForce RTX 4090", "rtx-4090"),
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA A100-SXM4-80GB", "a100-80"),
        ("NVIDIA A100-SXM4-40GB", "a100-40"),
        ("Tesla T4", "t4"),
        ("Tesla V100-SXM2-16GB", "v100-16"),
        ("NVIDIA RTX 6000 Ada Generation", "rtx-6000-ada"),
        ("NVIDIA L4", "l4"),
        ("NVIDIA H200", "h200"),
        ("AMD Instinct MI300X", "mi300x"),
        ("NVIDIA GeForce RTX 2080 Ti", None),
    ],
)
def test_match_device_name(device_name, expected_id):
    spec = match_device_name(device_name)
    assert (spec.id if spec else None) == expected_id


def test_detect_returns_none_without_a_gpu():
    assert detect_local_gpu() is None


class _FakeNvml(types.ModuleType):
    def __init__(self, names: list[str], total: int):
        super().__init__("pynvml")
        self._names, self._total = names, total

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return len(self._names)

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, handle):
        return self._names[handle]

    def nvmlDeviceGetMemoryInfo(self, handle):
        return types.SimpleNamespace(total=self._total, free=self._total, used=0)


def test_detect_matches_table_with_torch_memory(monkeypatch):
    # NVML says 81559 MiB on an H100; torch can allocate 81082 MiB of it (the table's torch figure)
    monkeypatch.setitem(sys.modules, "pynvml", _FakeNvml(["NVIDIA H100 80GB HBM3"] * 2, 81559 * MiB))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    spec = detect_local_gpu()
    assert spec is not None
    assert (spec.id, spec.count, spec.memory_bytes, spec.memory_basis) == ("h100-sxm", 2, 81082 * MiB, "torch")
    assert spec.bf16_tflops == resolve_gpu("h100-sxm").bf16_tflops


def test_detect_h200_reports_what_torch_can_allocate(monkeypatch):
    # the real H200: NVML total 143771 MiB (140.40 GiB); torch's OOM message says "total capacity of 139.80 GiB"
    # (gpu-measurements/oom-memory-fraction.txt)
    monkeypatch.setitem(sys.modules, "pynvml", _FakeNvml(["NVIDIA H200"], 143771 * MiB))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert format_bytes(detect_local_gpu().memory_bytes) == "139.80 GiB"


def test_detect_honours_cuda_visible_devices(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", _FakeNvml(["NVIDIA GeForce RTX 4090"] * 4, 24564 * MiB))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,3")
    assert detect_local_gpu().count == 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert detect_local_gpu() is None


def test_detect_unknown_device_is_generic_local(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", _FakeNvml(["NVIDIA GeForce RTX 2080 Ti"], 11264 * MiB))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    spec = detect_local_gpu()
    assert (spec.id, spec.name, spec.memory_bytes, spec.bf16_tflops) == (
        "local",
        "NVIDIA GeForce RTX 2080 Ti",
        11264 * MiB,
        None,
    )


def test_detect_any_nvml_error_is_none(monkeypatch):
    fake = _FakeNvml(["NVIDIA L4"], 23034 * MiB)

    def boom():
        raise RuntimeError("NVML Shared Library Not Found")

    fake.nvmlInit = boom
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert detect_local_gpu() is None


def test_no_torch_import():
    assert "torch" not in vars(gpu_mod)
    src = open(gpu_mod.__file__, encoding="utf-8").read()
    assert "import torch" not in src
