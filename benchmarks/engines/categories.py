"""Sort a census's tensors into the bill's categories, by the engine attribute that holds them.

Names follow DeepSpeed 0.19.8 and torch 2.13 (the attribute a tensor was reached through, or one of its
aliases: the same storage reached another way):

* weights: the module's parameters (`param.data`; ZeRO-1/2: views of `bit16_groups_flat`,
  `stage_1_and_2.py:509`; ZeRO-3: `param.ds_tensor`, views of `lp_param_buffer`, `stage3.py:972`, plus the
  full `param.data` of persistent parameters, `parameter_offload.persistent_parameters`); FSDP2: the
  local shard of each `DTensor` parameter;
* gradients: `param.grad`; ZeRO-1/2 `averaged_gradients` (views of `grads_in_partition`,
  `stage_1_and_2.py:2192`); ZeRO-3 `grad_partitions_flat_buffer` (`stage3.py:791`);
* master_grads: the fp32 gradient of a master partition (`<master>.grad`), during the inner optimizer's step
  (ZeRO-1/2 `step`: `single_grad_partition`; ZeRO-3 `_prepare_fp32_grad_for_sub_group`), and for the whole run
  with optimizer offload (the CPU Adam's input);
* master: fp32 master partitions (ZeRO-1/2 `single_partition_of_fp32_groups`, `stage_1_and_2.py:577`,
  reached as the inner optimizer's `param_groups`; ZeRO-3 `fp32_partitioned_groups_flat`, `stage3.py:1155`);
* optimizer: the inner optimizer's `state` (`exp_avg`, `exp_avg_sq`, `step`);
* buffers: communication and staging buffers (`ipg_buckets[dtype].buffer`: ZeRO-3 keeps one of
  `reduce_bucket_size` elements for the run, `stage3.py:782`; ZeRO-1/2 allocate one, two with `overlap_comm`,
  per backward, `stage_1_and_2.py:3266`; `temp_grad_buffer_for_cpu_offload`, `stage_1_and_2.py:653`, and its device twin
  `temp_grad_buffer_for_gpu_offload`, `stage_1_and_2.py:659`, one largest parameter each; the 16-bit copy-back
  partition `param_buffer_of_bit16_for_cpu_offload_groups`, `stage_1_and_2.py:573`;
  ZeRO-3's pinned staging buffers);
* module_buffers: the module's registered buffers (rotary `inv_freq`);
* scalars: tensors of at most 8 bytes (`_global_grad_norm`, `norm_for_param_grads`, `inf_or_nan_tracker`).

Host: under `offload_optimizer: cpu` the master partitions, their fp32 gradients and the optimizer states
live in host memory (`stage_1_and_2.py` `cpu_offload`; `stage3.py` `offload_optimizer`), and ZeRO-3's
`grad_partitions_flat_buffer` too (`stage3.py:791`, `self.device` is the offload device, pinned at 795);
ZeRO-1/2's `temp_grad_buffer_for_cpu_offload` (pinned, `stage_1_and_2.py:657`) and
`param_buffer_of_bit16_for_cpu_offload_groups` (pinned, `stage_1_and_2.py:573`) are host memory. On the CPU
accelerator every tensor is host memory; the split is the one the engine makes on a GPU.
"""

from __future__ import annotations

CATEGORIES = ("weights", "gradients", "master", "master_grads", "optimizer", "buffers", "module_buffers", "scalars")

BUFFER_ATTRS = (
    "ipg_buckets",
    "ipg_buffer",
    "temp_grad_buffer_for_cpu_offload",
    "temp_grad_buffer_for_gpu_offload",
    "lp_param_contiguous_pin_buffer",
    "lp_grad_partitions_flat_pin_buffers",
    "param_groups_fp16_flat_cpu_memory",
    "__param_partition_cache",
    "param_buffer_of_bit16_for_cpu_offload_groups",
)
GRAD_ATTRS = ("averaged_gradients", "grads_in_partition", "grad_partitions_flat_buffer", "accumulated_grads_in_cpu")
WEIGHT_ATTRS = (
    "bit16_groups_flat",
    "bit16_groups",
    "lp_param_buffer",
    "fp16_partitioned_groups_flat",
    "fp16_groups",
    "persistent_parameters",
)
MASTER_ATTRS = ("single_partition_of_fp32_groups", "fp32_partitioned_groups_flat", "optimizer.param_groups")
HOST_ATTRS = (
    "grad_partitions_flat_buffer",
    "temp_grad_buffer_for_cpu_offload",
    "accumulated_grads_in_cpu",
    "param_buffer_of_bit16_for_cpu_offload_groups",
)


def category(record: dict) -> str:
    """The category of one census record (module docstring)."""
    paths = [record["path"], *record.get("aliases", [])]
    if record["bytes"] <= 8:
        return "scalars"
    if any(p.startswith("module_buffer.") for p in paths):
        return "module_buffers"
    if any(p.startswith("opt.state") or p.startswith("opt.optimizer.state") for p in paths):
        return "optimizer"
    if any(a in p for p in paths for a in BUFFER_ATTRS):
        return "buffers"
    if any(p.endswith(".grad") and any(a in p for a in MASTER_ATTRS) for p in paths):
        return "master_grads"
    if any(p.endswith(".grad") or any(a in p for a in GRAD_ATTRS) for p in paths):
        return "gradients"
    if any(a in p for p in paths for a in MASTER_ATTRS):
        return "master"
    if any(p.startswith("module.") or any(a in p for a in WEIGHT_ATTRS) for p in paths):
        return "weights"
    return "other"


def on_host(case, record: dict, cat: str) -> bool:
    """Whether the engine keeps this tensor in host memory (module docstring, "Host")."""
    if not (case.engine == "deepspeed" and case.offload):
        return False
    paths = [record["path"], *record.get("aliases", [])]
    if cat in ("master", "master_grads", "optimizer"):
        return True
    return any(a in p for p in paths for a in HOST_ATTRS)


def categorise(case, tensors: list[dict]) -> dict:
    """{"device": {category: bytes}, "host": {category: bytes}, "dtypes": {category: [dtypes]}}."""
    out = {"device": dict.fromkeys(CATEGORIES, 0), "host": dict.fromkeys(CATEGORIES, 0), "dtypes": {}}
    for record in tensors:
        cat = category(record)
        where = "host" if on_host(case, record, cat) else "device"
        out[where][cat] = out[where].get(cat, 0) + record["bytes"]
        dtypes = out["dtypes"].setdefault(cat, [])
        if record["dtype"] not in dtypes:
            dtypes.append(record["dtype"])
    return out
