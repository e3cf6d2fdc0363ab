"""Collective communication of one optimizer step: what each GPU sends, over which link, and for how long.

**Volumes** (bytes each GPU sends per optimizer step, ring algorithm, w GPUs, S the collective's tensor):
all-reduce 2(w−1)/w·S, all-gather and reduce-scatter (w−1)/w·S each (NCCL's `doc/PERFORMANCE.md`: the "bus
bandwidth" factors). S is the gradients (`ModelStates.gradients`, as billed) or the gathered weights (every
parameter in the 16-bit compute dtype, fp32 under `--precision fp32`; QLoRA's NF4 base as stored). Per engine:

* DDP (`--shard none`): one all-reduce of the gradients per optimizer step; the accumulation micro-batches
  run under `no_sync` (accelerate 1.15 `Accelerator.accumulate` → `no_sync`).
* ZeRO-1: a reduce-scatter of the gradients at the accumulation boundary, and an all-gather of the updated
  trainable weights after the step (deepspeed 0.19.8 `runtime/zero/stage_1_and_2.py`
  `DeepSpeedZeroOptimizer.step` → `all_gather_dp_groups`).
* ZeRO-2: the same, with the reduce-scatter in every micro-batch's backward (gradients are kept as
  partitions only: `reduce_independent_p_g_buckets_and_remove_grads`).
* ZeRO-3 and FSDP: every micro-batch all-gathers all the weights twice (forward, and backward after
  `reshard_after_forward`; frozen LoRA/QLoRA bases included: they are partitioned too) and reduce-scatters
  the gradients (deepspeed `runtime/zero/partitioned_param_coordinator.py`, torch `fully_shard`).

**Links.** Inside one node a collective runs over the GPUs' peer link (`GpuSpec.peer_link_gbps`: NVLink,
Infinity Fabric or PCIe). Across nodes NCCL's ring runs one channel per NIC, and each channel crosses every node
boundary once: a node's NICs together carry what one GPU sends, so the time is the bytes over the slowest
link, min(peer link, the node's NIC bandwidth). A hierarchical (2-D) algorithm moves (n−1)/n instead of
(w−1)/w of S over the NICs (n nodes), nearly the same, so the ring stands for both. Peak link rates, no
efficiency factor and no per-collective latency: the benchmark (`benchmarks/multigpu.py`) states the error.

**Overlap.** Half of the communication is taken as hidden behind compute (DeepSpeed's `overlap_comm`, FSDP's
prefetch), never more than the compute time itself: exposed = c − min(`HIDDEN_COMM_FRACTION`·c, compute).
"""

from __future__ import annotations

from dataclasses import dataclass

from memdoc.core.billing.states import ModelStates
from memdoc.core.model.gpu import GpuSpec
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.network import Network, default_network, parse_interconnect
from memdoc.core.model.plan import Method, Precision, Shard, TrainingPlan

HIDDEN_COMM_FRACTION = 0.5
"""Assumed: the fraction of a step's communication that overlaps compute (at most the compute time)."""
DEFAULT_PEER_GBPS = 25.0
"""A GPU known only by its memory size: PCIe 4.0 x16 as achieved."""


@dataclass(frozen=True, kw_only=True)
class Communication:
    """One GPU's collectives in one optimizer step."""

    bytes_sent: float
    """Bytes one GPU sends per optimizer step, all collectives together (ring algorithm)."""
    link_gbps: float
    """GB/s of the slowest link those bytes cross, one direction."""
    link: str
    """That link in words."""
    network: Network | None
    """The network between nodes; None on one node."""

    @property
    def seconds(self) -> float:
        """Link time of the step's collectives, before overlap."""
        return self.bytes_sent / (self.link_gbps * 1e9)

    def exposed(self, compute_seconds: float) -> float:
        """Seconds not hidden behind `compute_seconds` (see the module docstring)."""
        return self.seconds - min(HIDDEN_COMM_FRACTION * self.seconds, compute_seconds)


def gathered_weight_bytes(model: ModelSpec, plan: TrainingPlan, states: ModelStates) -> int:
    """Bytes of the weights a ZeRO-3/FSDP all-gather assembles: every parameter in the compute dtype (2 bytes;
    4 under fp32); QLoRA's quantised base as stored (`states.weights`)."""
    if plan.method is Method.QLORA:
        return states.weights
    return model.params.total * (4 if plan.precision is Precision.FP32 else 2)


def step_volume(model: ModelSpec, plan: TrainingPlan, states: ModelStates) -> float:
    """Bytes one GPU sends per optimizer step over the ring (see the module docstring, per engine)."""
    w = plan.world_size
    share = (w - 1) / w
    grads = states.gradients
    accum = plan.grad_accum
    if plan.shard is Shard.NONE:
        return 2 * share * grads
    if plan.shard is Shard.ZERO1:
        return share * grads + share * grads  # reduce-scatter at the boundary, all-gather of updated weights
    if plan.shard is Shard.ZERO2:
        return share * grads * accum + share * grads
    gathered = gathered_weight_bytes(model, plan, states)
    return (2 * share * gathered + share * grads) * accum


def step_network(plan: TrainingPlan, gpu: GpuSpec | None) -> Network | None:
    """The network between nodes this plan runs over (`--interconnect`, `auto` resolved); None on one node."""
    if plan.nodes == 1:
        return None
    return parse_interconnect(plan.interconnect) or default_network(gpu)


def bottleneck(plan: TrainingPlan, gpu: GpuSpec | None) -> tuple[float, str]:
    """(GB/s, words) of the slowest link of the plan's collectives: the peer link, or the node's NICs."""
    peer = gpu.peer_link_gbps if gpu is not None and gpu.peer_link_gbps else DEFAULT_PEER_GBPS
    words = (gpu.gpu_link if gpu is not None and gpu.gpu_link else "PCIe (assumed)") + f", {peer:g} GB/s"
    network = step_network(plan, gpu)
    if network is None:
        return peer, words
    node = network.node_gbps(plan.gpus_per_node)
    if plan.gpus_per_node == 1 or node < peer:
        return node, network.describe(plan.gpus_per_node)
    return peer, words


def communication(model: ModelSpec, plan: TrainingPlan, gpu: GpuSpec | None, states: ModelStates) -> Communication:
    """One GPU's collectives per optimizer step and the link that bounds them (no collectives on one GPU)."""
    gbps, words = bottleneck(plan, gpu)
    volume = step_volume(model, plan, states) if plan.world_size > 1 else 0.0
    return Communication(bytes_sent=volume, link_gbps=gbps, link=words, network=step_network(plan, gpu))
