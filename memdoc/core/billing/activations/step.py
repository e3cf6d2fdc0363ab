"""The activations of one training step: every layer with the plan's checkpointing, plus the head."""

from __future__ import annotations

from dataclasses import dataclass

from memdoc.core.billing.activations.head import head_saved
from memdoc.core.billing.activations.kernels import liger_glu
from memdoc.core.billing.activations.layer import layer_activations, selective_saved, tiled_mlp_backward
from memdoc.core.billing.activations.offload import offloaded_bytes, offloads
from memdoc.core.billing.activations.sac_op import sac_op_saved
from memdoc.core.billing.activations.saved import FP32
from memdoc.core.billing.activations.vision import VisionActivations
from memdoc.core.billing.kbit import activation_plan, head_weight_copy, stream_bytes
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.plan import Checkpointing, Method, TrainingPlan


@dataclass(frozen=True, kw_only=True)
class Activations:
    """Activation bytes of one step on one GPU (micro-batch × seq tokens)."""

    layer_saved: int
    """Bytes one decoder layer keeps for backward without checkpointing (largest layer for MoE mixes)."""
    layers_saved: int
    """Bytes all decoder layers keep at the end of forward, with the plan's checkpointing."""
    head_saved: int
    """Final norm, LM head and loss tensors kept at the end of forward (fp32 log-softmax, …)."""
    loss_forward_peak: int
    """Extra transient bytes while the loss is computed (fp32 logits upcast)."""
    loss_backward_peak: int
    """Extra transient bytes at the start of backward (fp32 gradients of the logits)."""
    layer_backward_peak: int
    """Extra bytes while one layer runs backward: its recomputed activations (checkpointing) and gradient buffers."""
    weight_copies: int
    """AMP only: the 16-bit weight copies autocast caches and matmuls save."""
    partial: tuple[int, int, int] | None = None
    """`--checkpoint-every N` when backward reaches an uncheckpointed layer first: (activations still
    saved, recompute, decoder layers above) at the highest checkpointed layer; None otherwise."""
    offloaded: int = 0
    """`--activation-offload`: pinned host bytes of the checkpointed layers' inputs (`offload.offloaded_bytes`)."""
    offload_copy: int = 0
    """`--activation-offload`: the GPU copy of one layer's input, brought back for its recompute in backward
    (part of `layer_backward_peak`)."""
    vision: VisionActivations | None = None
    """A VLM's encoder and projector (`vision.py`), added to the phases by `billing/vision_bill.py`; None: text."""


def estimate_activations(model: ModelSpec, plan: TrainingPlan) -> Activations:
    """Activation memory for the plan: saved tensors per layer × layers, with checkpointing, plus the head."""
    mm_dt = plan.precision.compute_bits // 8  # a 4-bit matmul's output, before bnb casts it to its input's dtype
    plan = activation_plan(plan)  # QLoRA's fp32 upcast without autocast saves what fp32 LoRA saves
    dt = plan.precision.compute_bits // 8
    stream = stream_bytes(plan, dt)
    amp = plan.precision.is_amp and plan.method is Method.FULL and not plan.sharded_mixed_precision
    T = plan.micro_batch * plan.seq_len
    h = model.hidden_size
    # layers differ only between dense and MoE layouts: compute each distinct layout once
    groups = model.layer_groups
    saved = {i: sum(layer_activations(model, plan, i).values()) for i, _, _ in groups}
    largest = max(saved.values())
    residual = (FP32 if amp else stream) * T * h  # a checkpointed layer keeps only its input
    copy = residual if offloads(plan) else 0  # offloaded: on the host, and back on the GPU one layer at a time
    leaf = copy if plan.is_peft else 0  # layer 0's input stays: a graph leaf (`offload.py`: peft makes it a graph leaf)
    partial = None
    if plan.checkpointing is Checkpointing.FULL and plan.checkpoint_every > 1:
        layers_saved, recompute, partial = partial_checkpointing(model, plan, saved, residual - copy)
        layers_saved += leaf
        recompute += copy if recompute else 0  # the top layer is recomputed (checkpointed) or not
        if partial is not None:  # the highest checkpointed layer's input comes back with its recompute
            partial = (partial[0] + leaf, partial[1] + copy, partial[2])
    elif plan.checkpointing is Checkpointing.FULL:
        layers_saved = (residual - copy) * model.num_layers + leaf
        recompute = largest + copy
    elif plan.checkpointing is Checkpointing.SELECTIVE:
        layers_saved = sum(selective_saved(model, plan, i, mm_dt=mm_dt) * layers for i, _, layers in groups)
        recompute = largest  # the layer's full activations, rebuilt in backward
    elif plan.checkpointing is Checkpointing.SAC_OP:
        layers_saved = sum(sac_op_saved(model, plan, i, mm_dt=mm_dt) * layers for i, _, layers in groups)
        recompute = largest
    else:
        layers_saved = sum(saved[i] * layers for i, _, layers in groups)
        recompute = 0
    head, loss_fwd, loss_bwd = head_saved(model, plan, dt=dt, amp=amp)
    head += head_weight_copy(model, plan)
    # Backward of one layer holds gradient buffers of its widest intermediates (≈ 3 MLP-wide tensors).
    width = max(model.intermediate_size, model.moe_intermediate_size * max(model.experts_per_token, 1))
    # Liger's SiLU/GELU-mul backward writes the gate and up gradients into its saved a and b: one buffer
    # Tiled MLP (`--tiled-mlp N`): those buffers are one shard's, next to the shard's recompute and input gradient
    tiled = tiled_mlp_backward(model, plan)
    grad_tokens = -(-T // plan.tiled_mlp) if tiled else T
    layer_bwd = recompute + tiled + (1 if liger_glu(model, plan) else 3) * stream * grad_tokens * width
    weight_copies = 0
    if amp:
        weight_copies = 2 * (model.params.total - model.params.embedding - model.params.norms)
    return Activations(
        layer_saved=largest,
        layers_saved=layers_saved,
        head_saved=head,
        loss_forward_peak=loss_fwd,
        loss_backward_peak=loss_bwd,
        layer_backward_peak=layer_bwd,
        weight_copies=weight_copies,
        partial=partial,
        offloaded=offloaded_bytes(model, plan, residual),
        offload_copy=copy,
    )


def partial_checkpointing(model: ModelSpec, plan: TrainingPlan, saved: dict, residual: int):
    """Layers 0, N, 2N, … checkpointed (they keep their input), the others all their activations.

    Backward reaches the last layer first: if it is checkpointed it is recomputed on top of every
    layer's kept tensors (the usual peak); if not, nothing is recomputed there, and the highest
    checkpointed layer j later recomputes on top of the tensors kept by layers 0..j — returned as
    `partial` with the number of layers above j, whose gradients exist by then. `saved` is keyed
    by a layer group's first layer.
    """
    n, every = model.num_layers, plan.checkpoint_every
    by_layout = {layout: saved[first] for first, layout, _ in model.layer_groups}
    kept = [residual if i % every == 0 else by_layout[model.layouts[i]] for i in range(n)]
    top = n - 1
    if top % every == 0:
        return sum(kept), by_layout[model.layouts[top]], None
    j = top - top % every
    return sum(kept), 0, (sum(kept[: j + 1]), by_layout[model.layouts[j]], top - j)


__all__ = ["Activations", "estimate_activations", "partial_checkpointing"]
