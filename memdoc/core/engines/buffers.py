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
    too): every parameter tensor of at most the persistence threshold, held whole (module docstring)."""
    if layout.engine is not Engine.ZERO3:
        return 0
    threshold = auto_persistence_threshold(plan, model.hidden_size)
    small = 0
    for _, layer, count in model.layer_groups:  # per layout, not per layer: a million layers cost nothing
        numels = [linear.out_features * linear.in_features for linear in layer.linears]
        numels += [linear.out_features for linear in layer.linears if linear.bias] + [layer.norm_params]
        small += count * sum(n for n in numels if n <= threshold)
    other = (
        model.params.total
        - model.params.embedding
        - model.params.head
        - sum(count * (layer.params() + layer.norm_params) for _, layer, count in model.layer_groups)
    )
    small += other if 0 < other <= threshold else 0
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
