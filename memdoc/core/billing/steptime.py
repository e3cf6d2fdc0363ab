"""Relative step time of a plan: a first-order model to rank remedies, not a benchmark.

time = compute + exposed communication + host transfers, per GPU and optimizer step:
* compute = FLOPs / (bf16 peak × MFU). FLOPs per token: 2·P forward, 4·P backward for full
  fine-tuning (Kaplan et al. 2020, "6N"); LoRA skips weight gradients of the frozen base, 2·P
  backward; full checkpointing adds one forward (2·P: the "+33%" of the seed articles), selective
  recomputes element-wise ops only (≈ +5%). MFU is taken as 0.4.
* sharding (ZeRO-3/FSDP) moves 3 × the 16-bit weights per step (all-gather in forward and
  backward, reduce-scatter of gradients), DDP 2 × (all-reduce); half of it is assumed hidden
  behind compute. The link is the GPU's host link (a pessimistic stand-in for NVLink).
* offload moves gradients to the host and updated weights back each step (ZeRO-Offload), and
  with weight offload the weights again in forward and backward, over the host link; the CPU
  optimizer step reads and writes states at an assumed 50 GB/s of host memory bandwidth.
"""

from __future__ import annotations

from memdoc.core.model.gpu import GpuSpec
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.plan import Checkpointing, Method, Offload, Precision, Shard, TrainingPlan
from memdoc.core.billing.states import model_states

MFU = 0.4
DEFAULT_TFLOPS = 312.0  # A100 bf16 dense, when the GPU is given only as a memory size
DEFAULT_LINK_GBPS = 25.0  # PCIe 4.0 x16 as achieved
HOST_MEMORY_GBPS = 50.0
HIDDEN_COMM_FRACTION = 0.5


def step_seconds(model: ModelSpec, plan: TrainingPlan, gpu: GpuSpec | None) -> float:
    """Modelled seconds of one optimizer step (all micro-batches) on one GPU."""
    tflops = (gpu.bf16_tflops if gpu and gpu.bf16_tflops else DEFAULT_TFLOPS) * 1e12
    if plan.precision is Precision.FP32:
        tflops /= 2  # TF32 tensor cores run at half the bf16 rate
    link = (gpu.host_link_gbps if gpu and gpu.host_link_gbps else DEFAULT_LINK_GBPS) * 1e9
    tokens = plan.micro_batch * plan.seq_len * plan.grad_accum
    p = model.params.active
    per_token = 2 * p + (4 * p if plan.method is Method.FULL else 2 * p)
    if plan.checkpointing is Checkpointing.FULL:
        per_token += 2 * p
    elif plan.checkpointing is Checkpointing.SELECTIVE:
        per_token += 0.1 * p
    if plan.method is Method.QLORA:
        per_token *= 1.15  # dequantising NF4 weights on every use
    compute = per_token * tokens / (tflops * MFU)
    # Small micro-batches leave kernels under-occupied: below 4K tokens per micro-batch, up to +15%.
    compute *= 1 + 0.15 * max(0.0, 1 - plan.micro_batch * plan.seq_len / 4096)
    states = model_states(model, plan)
    world = plan.world_size
    comm = 0.0
    if world > 1:
        weights16 = model.params.total * 2 if plan.method is Method.FULL else states.gradients
        volume = 3 * weights16 if plan.shard in (Shard.ZERO3, Shard.FSDP) else 2 * states.gradients
        comm = volume * (world - 1) / world / link * plan.grad_accum ** (plan.shard in (Shard.ZERO3, Shard.FSDP))
        comm *= 1 - HIDDEN_COMM_FRACTION
    host = 0.0
    if plan.offload is not Offload.NONE:
        shard = world if plan.shard is not Shard.NONE else 1
        host += 2 * states.gradients / shard / link  # grads down, updated 16-bit weights up
        host += 2 * states.optimizer / shard / (HOST_MEMORY_GBPS * 1e9)
    if plan.offload is Offload.OPTIMIZER_PARAMS:
        host += 2 * states.weights / world / link * plan.grad_accum
    return compute + comm + host
