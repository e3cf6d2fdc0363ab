"""What each rank keeps in host RAM (pinned) with offload, in bytes, as DeepSpeed 0.19.8 and FSDP allocate it.

DeepSpeed ZeRO-Offload, per rank (P = the rank's partition of the trainable parameters, in elements):
* ZeRO-1/2 (`deepspeed/runtime/zero/stage_1_and_2.py` `DeepSpeedZeroOptimizer`): the fp32 master partition
  (`single_partition_of_fp32_groups`, pinned: 4P), CPU Adam's `exp_avg` and `exp_avg_sq` (8P), the fp32
  gradient partition (`initialize_optimizer_states`: `single_grad_partition`, pinned: 4P) and the 16-bit
  copy-back buffer (`param_buffer_of_bit16_for_cpu_offload_groups`, pinned: 2P): 18 bytes per parameter.
* ZeRO-3 (`stage3.py` `DeepSpeedZeroOptimizer_Stage3`): the fp32 master partition (4P), the states (8P),
  one pinned fp32 gradient per sub-group (`initialize_optimizer_states`: `subgroup_gradient_buffer`, 4P),
  and the 16-bit gradient partitions (`grad_partitions_flat_buffer`, on the offload device: 2P): 18 bytes per
  parameter (the fp32 `gradient_buffer` of `initialize_optimizer_states` is a local, freed when it returns);
  with `offload_param` the 16-bit parameter partitions too (`param_groups_fp16_flat_cpu_memory`, pinned: 2P).
* NVMe (`offload_optimizer.device: nvme`, ZeRO-3): the master, states and fp32 gradients live on NVMe
  (`swap_tensor/partitioned_optimizer_swapper.py`); the host keeps the 16-bit gradient partitions and
  the pinned swap buffers, `buffer_count` (4) × the largest sub-group in fp32 (`offload_config.py`).
FSDP `CPUOffload(offload_params=True)`: the sharded parameters, their gradients and the optimizer states
(stepped on the CPU) at the layout's dtypes.

DeepSpeed's estimators (`stage3.py` `estimate_zero3_model_states_mem_needs`, `stage_1_and_2.py`
`estimate_zero2_model_states_mem_needs`) bill 16 (18 with params) bytes per parameter × 1.5
("additional_buffer_factor") per node with zero.Init: they leave out the 16-bit gradient partition and count
a 50% margin instead; memdoc bills the tensors the optimizer allocates (tests/unit/billing/test_engines.py).
"""

from __future__ import annotations

from memdoc.core.engines.layout import Engine, EngineLayout
from memdoc.core.model.plan import OffloadTarget, TrainingPlan

NVME_BUFFER_COUNT = 4
"""`offload_optimizer.buffer_count` default (`deepspeed/runtime/zero/offload_config.py`)."""


def host_items(plan: TrainingPlan, layout: EngineLayout, partition: int, states_bytes: int) -> dict[str, int]:
    """Host bytes per rank by line item (weights, gradients, optimizer, buffers) of an offloaded plan; {} without
    offload. `partition`: the rank's trainable parameters (elements); `states_bytes`: its optimizer states."""
    if not layout.offload_optimizer:
        return {}
    if layout.engine.is_fsdp:
        items = {"gradients": partition * layout.grad_bits // 8, "optimizer": states_bytes}
        items["weights"] = partition * layout.weight_bits // 8
        return items
    master = partition * layout.master_bits // 8
    fp32_grads = partition * layout.step_grad_bits // 8
    grads16 = partition * layout.grad_bits // 8
    bit16_copy = partition * layout.weight_bits // 8
    if layout.engine is not Engine.ZERO3:
        return {"gradients": fp32_grads, "optimizer": master + states_bytes, "buffers": bit16_copy}
    largest = min(partition, plan.sub_group_size or partition) * layout.step_grad_bits // 8
    items = {"gradients": fp32_grads + grads16, "optimizer": master + states_bytes}
    if layout.offload_params:
        items["weights"] = partition * layout.weight_bits // 8
    if plan.offload_to is OffloadTarget.NVME:
        items = {"gradients": grads16, "buffers": NVME_BUFFER_COUNT * largest}
        if layout.offload_params:
            items["weights"] = partition * layout.weight_bits // 8
    return items


def nvme_items(plan: TrainingPlan, layout: EngineLayout, partition: int, states_bytes: int) -> dict[str, int]:
    """NVMe bytes per rank (ZeRO-3 `offload_optimizer.device: nvme`): master, states and fp32 gradients."""
    if plan.offload_to is not OffloadTarget.NVME or layout.engine is not Engine.ZERO3 or not layout.offload_optimizer:
        return {}
    master = partition * layout.master_bits // 8
    return {"optimizer": master + states_bytes, "gradients": partition * layout.step_grad_bits // 8}
