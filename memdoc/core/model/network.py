"""The network between nodes (`--interconnect`): NIC kind, line rate and NICs per node.

`--interconnect` takes `[N×]KIND`: KIND is one of `NETWORKS` (the line rate in Gb/s is in the name), N the
NICs per node. Without N, InfiniBand and RoCE mean one NIC per GPU (the rail-optimised layout of NVIDIA's
DGX/HGX H100 and A100 systems: eight ConnectX-7 400 Gb/s or ConnectX-6 200 Gb/s compute NICs for eight GPUs)
and Ethernet one NIC per node. `auto` (the default) means, when the plan has more than one node:

* `ib-ndr-400`, one per GPU, for GPUs whose in-node link is ≥ 400 GB/s (H100/H200/B200 SXM, MI300X): the
  DGX H100 layout (https://docs.nvidia.com/dgx/dgxh100-user-guide/introduction-to-dgxh100.html);
* `ib-hdr-200`, one per GPU, for the other NVLink/Infinity Fabric boards (A100/V100 SXM, MI250X): the DGX A100
  layout (https://docs.nvidia.com/dgx/dgxa100-user-guide/introduction-to-dgxa100.html);
* `eth-100`, one per node, for PCIe cards (a workstation or cloud VM with one 100 GbE port).

Pure data and parsing; the collective costs over these links are `memdoc/core/billing/comm.py`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from memdoc.core.model.gpu import GpuSpec
from memdoc.errors import PlanError, did_you_mean

AUTO = "auto"
"""The plan value that picks the network from the GPU (see the module docstring)."""

NETWORKS = {
    "ib-xdr-800": ("InfiniBand XDR", 800),
    "ib-ndr-400": ("InfiniBand NDR", 400),
    "ib-hdr-200": ("InfiniBand HDR", 200),
    "ib-edr-100": ("InfiniBand EDR", 100),
    "roce-400": ("RoCE v2", 400),
    "roce-200": ("RoCE v2", 200),
    "roce-100": ("RoCE v2", 100),
    "eth-100": ("Ethernet (TCP)", 100),
    "eth-25": ("Ethernet (TCP)", 25),
    "eth-10": ("Ethernet (TCP)", 10),
}
"""KIND → (name, line rate in Gb/s per NIC per direction)."""

_SPEC = re.compile(r"^(?:(\d+)\s*[x×]\s*)?([a-z0-9\-]+)$")


@dataclass(frozen=True, kw_only=True)
class Network:
    """The links between nodes, per node."""

    kind: str
    """A key of `NETWORKS` ("ib-ndr-400")."""
    nics_per_node: int | None
    """NICs per node; None: one per GPU of the node."""

    @property
    def nic_gbps(self) -> float:
        """One NIC's bandwidth in GB/s (10⁹ bytes/s), one direction: the line rate in Gb/s over 8."""
        return NETWORKS[self.kind][1] / 8

    def nics(self, gpus_per_node: int) -> int:
        """NICs of one node."""
        return self.nics_per_node if self.nics_per_node is not None else gpus_per_node

    def node_gbps(self, gpus_per_node: int) -> float:
        """GB/s one node sends (and receives) over all its NICs, one direction."""
        return self.nic_gbps * self.nics(gpus_per_node)

    def describe(self, gpus_per_node: int) -> str:
        """In words: "8 × InfiniBand NDR 400 Gb/s per node (400 GB/s)"."""
        name, rate = NETWORKS[self.kind]
        return f"{self.nics(gpus_per_node)} × {name} {rate} Gb/s per node ({self.node_gbps(gpus_per_node):g} GB/s)"

    def spec(self) -> str:
        """The `--interconnect` value that names this network."""
        return self.kind if self.nics_per_node is None else f"{self.nics_per_node}x{self.kind}"


def parse_interconnect(text: str) -> Network | None:
    """The network `--interconnect TEXT` names; None for `auto`. Raises `PlanError` (one line) otherwise."""
    if not isinstance(text, str):
        raise PlanError(f"--interconnect must be a network name such as ib-ndr-400, got {text!r}")
    raw = text.strip().lower()
    if raw == AUTO:
        return None
    m = _SPEC.match(raw)
    kind = m.group(2) if m else raw
    if not m or kind not in NETWORKS or (m.group(1) is not None and int(m.group(1)) < 1):
        raise PlanError(
            f"--interconnect {text!r} is not [N×]KIND with KIND one of: {AUTO}, {', '.join(NETWORKS)}"
            + did_you_mean(kind, list(NETWORKS))
        )
    count = None if m.group(1) is None else int(m.group(1))
    if count is None and kind.startswith("eth-"):
        count = 1
    return Network(kind=kind, nics_per_node=count)


def default_network(gpu: GpuSpec | None) -> Network:
    """The network `auto` stands for on `gpu` (see the module docstring): boards with an NVLink/Infinity Fabric
    link (`gpu_link_source` set) get InfiniBand, one NIC per GPU; PCIe cards and size-only GPUs one 100 GbE port."""
    if gpu is None or gpu.gpu_link_source is None:
        return Network(kind="eth-100", nics_per_node=1)
    fast = gpu.gpu_link_gbps is not None and gpu.gpu_link_gbps >= 400
    return Network(kind="ib-ndr-400" if fast else "ib-hdr-200", nics_per_node=None)
