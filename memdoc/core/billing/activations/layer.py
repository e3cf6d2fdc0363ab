"""One decoder layer's saved tensors, assembled from its norms, attention, MLP and adapters."""

from __future__ import annotations

from memdoc.core.billing.activations.adapters import lora_saved
from memdoc.core.billing.activations.attention import attention_saved
from memdoc.core.billing.activations.kernels import liger_layers
from memdoc.core.billing.activations.layernorm_layer import layernorm_layer_saved
from memdoc.core.billing.activations.mlp import mlp_saved, tiled_shard_bytes, tiles
from memdoc.core.billing.activations.saved import FP32, SavedTensors, norm_saved
from memdoc.core.billing.kbit import stream_bytes
from memdoc.core.model.families import Norm
from memdoc.core.model.lora import adapted_names, is_trained
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.plan import TrainingPlan


def layer_activations(model: ModelSpec, plan: TrainingPlan, index: int = 0) -> dict[str, int]:
    """Bytes one decoder layer saves for backward without checkpointing, by module."""
    dt = plan.precision.compute_bits // 8
    targets = adapted_names(plan)
    full = targets is None
    # LoRA under AMP: 16-bit base, autocast is a no-op for it; DeepSpeed AMP runs 16-bit weights.
    amp = plan.precision.is_amp and full and not plan.sharded_mixed_precision
    T = plan.micro_batch * plan.seq_len
    linears = list(model.layouts[index].linears)
    family = model.arch
    layer = SavedTensors()
    if family.norm is Norm.LAYER:
        layernorm_layer_saved(layer, model, plan, linears, targets, dt=dt, amp=amp, act_dt=stream_bytes(plan, dt))
        if not full:
            lora_saved(layer, plan, linears, targets, family)
        return layer.items
    gemma = family.norm is Norm.GEMMA_RMS
    liger = liger_layers(model, plan)
    h = model.hidden_size
    norm_saved(layer, "input_layernorm", T, h, dt=dt, trainable=full, gemma=gemma, amp=amp, liger=liger)
    attention_saved(layer, model, plan, linears, targets, dt=dt, amp=amp)
    norm_saved(layer, "post_attention_layernorm", T, h, dt=dt, trainable=full, gemma=gemma, amp=amp, liger=liger)
    for _ in range(family.norms_per_layer - 2):  # Gemma-2's extra post-attention / post-feedforward norms
        norm_saved(layer, "post_norms", T, h, dt=dt, trainable=full, gemma=True, amp=amp, liger=liger)
    mlp_saved(layer, model, plan, linears, targets, dt=stream_bytes(plan, dt), amp=amp)
    if not full:
        lora_saved(layer, plan, linears, targets, family)
    return layer.items


def tiled_mlp_backward(model: ModelSpec, plan: TrainingPlan) -> int:
    """Extra bytes while the widest layer's tiled MLP runs backward (`mlp.tiled_shard_bytes`); 0 untiled or for
    the LayerNorm families, whose MLP memdoc does not tile."""
    if not tiles(plan) or model.arch.norm is Norm.LAYER:
        return 0
    dt = plan.precision.compute_bits // 8
    targets = adapted_names(plan)
    amp = plan.precision.is_amp and targets is None and not plan.sharded_mixed_precision
    return max(
        tiled_shard_bytes(model, plan, list(layout.linears), targets, dt=stream_bytes(plan, dt), amp=amp)
        for _, layout, _ in model.layer_groups
    )


def selective_saved(model: ModelSpec, plan: TrainingPlan, index: int, *, mm_dt: int) -> int:
    """Bytes a layer keeps under selective checkpointing: its input and every matmul/SDPA output.

    memdoc's policy (the one `diagnose` traces with torch's `create_selective_checkpoint_contexts`):
    MUST_SAVE the outputs of mm/addmm/bmm and of SDPA, recompute everything else (norms,
    activations, rotary). The saved outputs are those of every projection — frozen or not — and of
    LoRA's fp32 `lora_A` (rank-wide) and `lora_B` (output-wide) matmuls, plus SDPA's output and
    logsumexp; the checkpoint itself keeps the layer's input. `mm_dt`: the projections' output dtype
    (a 4-bit matmul's is the compute dtype even when bnb then casts it to fp32, `kbit.py`).
    """
    dt = plan.precision.compute_bits // 8
    T = plan.micro_batch * plan.seq_len
    targets = adapted_names(plan)
    kept = stream_bytes(plan, dt) * T * model.hidden_size  # the checkpointed layer's input
    for linear in model.layouts[index].linears:
        if linear.group == "experts":  # routed tokens only: top-k of them per expert matrix
            kept += mm_dt * T * model.experts_per_token * linear.out_features
        else:
            kept += mm_dt * T * linear.out_features
        if targets is not None and is_trained(linear, targets):
            kept += (2 if plan.precision.is_amp else FP32) * T * (plan.lora_rank + linear.out_features)
    kept += dt * T * model.q_dim + FP32 * plan.micro_batch * model.num_heads * plan.seq_len  # SDPA out + lse
    return kept


__all__ = ["layer_activations", "selective_saved", "tiled_mlp_backward"]
