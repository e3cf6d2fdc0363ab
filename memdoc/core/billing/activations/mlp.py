"""What a Llama-like MLP block saves: router, routed experts, dense and shared-expert MLPs."""

from __future__ import annotations

from memdoc.core.billing.activations.kernels import liger_glu
from memdoc.core.billing.activations.saved import FP32, SavedTensors
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.params import Linear
from memdoc.core.model.plan import TrainingPlan

_UP_PROJECTIONS = ("gate_proj", "up_proj", "gate_up_proj", "fc1", "c_fc", "dense_h_to_4h")
"""Names of the linears that read the MLP's input (the others read the activation's output)."""


def mlp_saved(
    layer: SavedTensors, model: ModelSpec, plan: TrainingPlan, linears: list[Linear], targets, *, dt: int, amp: bool
) -> None:
    """The MLP tensors of one layer; `targets` is `lora.adapted_names(plan)` (None: full).

    Tiled (`--tiled-mlp N`, N > 1): only the MLP's input (`tiled_saved`); its intermediates live in backward,
    one shard at a time (`tiled_shard_bytes`)."""
    T = plan.micro_batch * plan.seq_len
    h = model.hidden_size
    if tiles(plan):
        layer.add("mlp.tiled_input", dt * T * h)
        return
    dense = [l for l in linears if l.group == "mlp"]
    experts = [l for l in linears if l.group == "experts"]
    routers = [l for l in linears if l.group == "router"]
    cdt = 2 if amp else dt
    if routers:
        # the router's fp32 softmax; its input too when the router trains (full fine-tuning)
        layer.add("mlp.router", FP32 * T * model.num_experts + (dt * T * h if targets is None else 0))
    if experts:
        # transformers 5 `grouped_mm_experts_forward`, per routed token copy (k per token): the
        # gathered input and the act·up product (inputs of the two grouped matmuls, kept only
        # when the experts train), the fused gate/up output (the activation's input), the
        # activation output, and the expert output (multiplied by the routing weight).
        k = model.experts_per_token
        width = model.moe_intermediate_size
        per_copy = h + 2 * width + width + (h + width if targets is None else 0)
        layer.add("mlp.experts", k * T * cdt * per_copy)
    if dense:
        _dense_saved(layer, model, plan, dense, targets, cdt=cdt, dt=dt, amp=amp)


def _dense_saved(
    layer: SavedTensors,
    model: ModelSpec,
    plan: TrainingPlan,
    dense: list[Linear],
    targets,
    *,
    cdt: int,
    dt: int,
    amp: bool,
) -> None:
    """The dense MLP and any shared expert: their input, activation tensors and down-projection input."""
    T = plan.micro_batch * plan.seq_len
    h = model.hidden_size
    up_in = [l for l in dense if l.name.endswith(_UP_PROJECTIONS)]
    down = [l for l in dense if l not in up_in]
    savers = up_in if targets is None else []
    if amp:
        layer.add("mlp.input_casts", 2 * T * h * len(savers))
    elif savers:
        layer.add("mlp.input", dt * T * h)
    blocks: dict[str, list[Linear]] = {}
    for l in up_in:  # the dense MLP and a shared expert are separate blocks
        blocks.setdefault(block_of(l), []).append(l)
    for prefix, block in blocks.items():
        fused = any(l.name.endswith("gate_up_proj") for l in block)
        width = max(l.out_features for l in block) // (2 if fused else 1)
        gated = fused or any(l.name.endswith("gate_proj") for l in block)
        # gated: gate output (the activation's input), activation output, up output; plain: fc1 output
        # Liger's SiLU/GELU-mul saves only its inputs a (gate) and b (up)
        layer.add("mlp.act", cdt * T * width * ((2 if liger_glu(model, plan) else 3) if gated else 1))
        has_down = any(block_of(l) == prefix for l in down)
        if has_down and targets is None:
            layer.add("mlp.down_input", cdt * T * width)


def tiles(plan: TrainingPlan) -> bool:
    """Does the plan run ALST's tiled MLP (`--tiled-mlp N`, N > 1)?"""
    return plan.tiled_mlp > 1


def tiled_shard_bytes(
    model: ModelSpec, plan: TrainingPlan, linears: list[Linear], targets, *, dt: int, amp: bool
) -> int:
    """Extra bytes while a tiled MLP runs backward: one shard's recomputed MLP tensors plus its input gradient.

    DeepSpeed 0.19.8 `runtime/sequence_parallel/ulysses_sp.py` `TiledMLP.backward`: flattens the saved input to
    (tokens, hidden), allocates its gradient (`torch.zeros_like(x)`, the whole input) and, per shard of
    ⌈tokens / N⌉ (`torch.chunk`), reruns the MLP with grad enabled and back-propagates it before the next shard:
    one shard's untiled MLP tensors at a time."""
    shard = plan.replace(tiled_mlp=0, micro_batch=1, seq_len=-(-plan.micro_batch * plan.seq_len // plan.tiled_mlp))
    one = SavedTensors()
    mlp_saved(one, model, shard, linears, targets, dt=dt, amp=amp)
    return sum(one.items.values()) + dt * plan.micro_batch * plan.seq_len * model.hidden_size


def block_of(linear: Linear) -> str:
    """'shared_expert' for 'shared_expert.up_proj', '' for a top-level 'up_proj'."""
    return linear.name.rsplit(".", 1)[0] if "." in linear.name else ""


__all__ = ["block_of", "mlp_saved", "tiled_shard_bytes", "tiles"]
