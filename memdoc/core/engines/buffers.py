"""The engine's buffers on each GPU, in bytes, from its knobs (DeepSpeed 0.19.8, FSDP in torch 2.13).

* ZeRO-1/2 (`deepspeed/runtime/zero/stage_1_and_2.py` `DeepSpeedZeroOptimizer.setup_buckets`): with
  `contiguous_gradients` (forced on by CPU offload: `__init__`, `contiguous_gradients or cpu_offload`), one
  `reduce_bucket_size` buffer of the 16-bit gradient dtype per bucket dtype, and a second one with
  `overlap_comm` ("double buffers to avoid data access conflict"); they live from the first backward on.
* ZeRO-3 (`stage3.py` `DeepSpeedZeroOptimizer_Stage3.__init__`, "IPG"): one `reduce_bucket_size` buffer of
  the 16-bit dtype with `contiguous_gradients` (no double buffer); parameters of at most
  `stage3_param_persistence_threshold` elements are never partitioned (`partition_parameters.py`
  `Init._convert_to_deepspeed_param`, `ds_persist`): every rank holds them whole.
* FSDP: no persistent buffer; the gathered units and reduce-scatter inputs are transients (`bill._gather_bytes`).

`allgather_bucket_size` (ZeRO-1/2's post-step all-gather, written into the 16-bit flat buffers in place),
`stage3_prefetch_bucket_size` and `stage3_max_live_parameters` bound transients already billed as the
gathered units; they allocate no buffer of their own.
"""

from __future__ import annotations

from memdoc.core.engines.layout import Engine, EngineLayout
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.plan import Offload, TrainingPlan


def auto_reduce_bucket(plan: TrainingPlan, hidden_size: int) -> int:
    """`reduce_bucket_size` as the engine gets it: the plan's, else "auto", which transformers fills with
    hidden × hidden (`transformers/integrations/deepspeed.py` `HfTrainerDeepSpeedConfig.trainer_config_finalize`)."""
    return plan.reduce_bucket_size if plan.reduce_bucket_size is not None else hidden_size * hidden_size


def auto_prefetch_bucket(plan: TrainingPlan, hidden_size: int) -> int:
    """`stage3_prefetch_bucket_size`: the plan's, else HF's "auto" int(0.9 × hidden²) (same function)."""
    if plan.stage3_prefetch_bucket_size is not None:
        return plan.stage3_prefetch_bucket_size
    return int(0.9 * hidden_size * hidden_size)


def auto_persistence_threshold(plan: TrainingPlan, hidden_size: int) -> int:
    """`stage3_param_persistence_threshold`: the plan's, else HF's "auto" 10 × hidden (same function)."""
    if plan.stage3_param_persistence_threshold is not None:
        return plan.stage3_param_persistence_threshold
    return 10 * hidden_size


def reduce_buckets(plan: TrainingPlan, layout: EngineLayout, hidden_size: int) -> int:
    """Bytes of DeepSpeed's gradient-reduction buckets on each GPU (module docstring); 0 for other engines."""
    if not layout.engine.is_deepspeed:
        return 0
    contiguous = plan.contiguous_gradients or (layout.engine is not Engine.ZERO3 and plan.offload is not Offload.NONE)
    if not contiguous:
        return 0
    copies = 2 if plan.overlap_comm and layout.engine is not Engine.ZERO3 else 1
    return copies * auto_reduce_bucket(plan, hidden_size) * layout.reduce_bits // 8


def persistent_params(model: ModelSpec, plan: TrainingPlan, layout: EngineLayout) -> int:
    """Bytes of ZeRO-3's unpartitioned small parameters on each GPU beside the partition (which counts them
    too): every parameter tensor of at most the persistence threshold, held whole (module docstring) — each
    linear weight and bias, each norm (a tensor of at most `hidden_size` elements: the norms of a layer are all
    in when `hidden_size` is, which HF's "auto" 10 × hidden always makes so), the embedding and LM head (a tiny
    vocabulary's 64,000 elements are under DeepSpeed's default 1e5), and the final norm. Checked against the
    engine's tensors on the CPU (`tests/fidelity/test_engines_bill.py`)."""
    if layout.engine is not Engine.ZERO3:
        return 0
    threshold = auto_persistence_threshold(plan, model.hidden_size)
    small = 0
    norms_small = model.hidden_size <= threshold
    for _, layer, count in model.layer_groups:  # per layout, not per layer: a million layers cost nothing
        numels = [linear.out_features * linear.in_features for linear in layer.linears]
        numels += [linear.out_features for linear in layer.linears if linear.bias]
        small += count * (sum(n for n in numels if n <= threshold) + (layer.norm_params if norms_small else 0))
    for tensor in (model.params.embedding, model.params.head):
        small += tensor if 0 < tensor <= threshold else 0
    other = (
        model.params.total
        - model.params.embedding
        - model.params.head
        - sum(count * (layer.params() + layer.norm_params) for _, layer, count in model.layer_groups)
    )
    small += other if 0 < other and (other <= threshold or norms_small) else 0
    return small * layout.weight_bits // 8


def step_grad_bytes(plan: TrainingPlan, layout: EngineLayout, partition_params: int) -> int:
    """DeepSpeed's fp32 gradient built for the step on each GPU: the whole partition (ZeRO-1/2,
    `stage_1_and_2.py` `step`) or one sub-group of at most `sub_group_size` elements (ZeRO-3,
    `stage3.py` `_prepare_fp32_grad_for_sub_group`); on the host with optimizer offload (`host.py`)."""
    if not layout.step_grad_bits or layout.offload_optimizer:
        return 0
    numel = partition_params
    if layout.engine is Engine.ZERO3:
        numel = min(numel, plan.sub_group_size) if plan.sub_group_size else numel
    return numel * layout.step_grad_bits // 8


def offload_staging_bytes(model: ModelSpec, plan: TrainingPlan, layout: EngineLayout) -> int:
    """ZeRO-1/2 with the optimizer offloaded stage gradients through two buffers of the largest parameter tensor
    in 16 bits, one on the GPU and one pinned on the host (deepspeed 0.19.8 `stage_1_and_2.py`
    `temp_grad_buffer_for_gpu_offload` and `temp_grad_buffer_for_cpu_offload`, sized by
    `largest_param_numel`): the bytes of each. Full fine-tuning only (with LoRA the largest trainable tensor is an
    adapter's: negligible). Measured on the CPU: the tiny models' 64,000-element embedding, 128,000 bytes each."""
    if layout.engine not in (Engine.ZERO1, Engine.ZERO2) or not layout.offload_optimizer or plan.is_peft:
        return 0
    linears = (
        linear.out_features * linear.in_features for _, layer, _ in model.layer_groups for linear in layer.linears
    )
    largest = max(model.params.embedding, model.params.head, *linears)
    return largest * layout.weight_bits // 8


def add_engine_buffers(
    model: ModelSpec, plan: TrainingPlan, layout: EngineLayout, buffers: dict[str, int], host: dict[str, int]
) -> tuple[int, int]:
    """The engine's buffers on each GPU by name into `buffers`, and the pinned host half of ZeRO-1/2's offload
    staging into `host`; returns (unpartitioned small parameters, reduce buckets), which the bill's step counts
    as weights and as a buffer."""
    staging = offload_staging_bytes(model, plan, layout)
    if staging:
        buffers["offload gradient staging"] = staging
        host["buffers"] = host.get("buffers", 0) + staging
    persistent = persistent_params(model, plan, layout)
    if persistent:
        buffers["unpartitioned small parameters"] = persistent
    buckets = reduce_buckets(plan, layout, model.hidden_size)
    if buckets:
        buffers["reduce buckets"] = buckets
    return persistent, buckets
