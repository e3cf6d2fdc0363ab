"""What a Llama-like attention block saves: projection inputs, q/k norms, SDPA or eager tensors."""

from __future__ import annotations

from memdoc.core.billing.activations.kernels import eager_attention, liger_layers
from memdoc.core.billing.activations.saved import FP32, SavedTensors, norm_saved
from memdoc.core.model.families import QkvLayout
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.params import Linear
from memdoc.core.model.plan import TrainingPlan


def attention_saved(
    layer: SavedTensors, model: ModelSpec, plan: TrainingPlan, linears: list[Linear], targets, *, dt: int, amp: bool
) -> None:
    """The attention tensors of one layer; `targets` is `lora.adapted_names(plan)` (None: full)."""
    T = plan.micro_batch * plan.seq_len
    b, s, heads = plan.micro_batch, plan.seq_len, model.num_heads
    mla = model.arch.attention is QkvLayout.MLA
    q_dim, kv_dim, v_dim = model.q_dim, model.kv_dim, model.kv_dim
    if mla:
        q_dim = kv_dim = heads * model.head_dim
        v_dim = heads * int(model.config["v_head_dim"])
    # Inputs of the q/k/v projections: the norm output (shared storage, saved once if any projection
    # needs it); under AMP each projection saves its own 16-bit cast of it.
    in_projs = [l for l in linears if l.group == "attention" and l.name not in ("o_proj", "dense")]
    savers = in_projs if targets is None else []  # LoRA inputs are counted in `adapters.lora_saved`
    if amp:
        layer.add("attention.input_casts", 2 * T * model.hidden_size * len(savers))
    elif savers:
        layer.add("attention.input", dt * T * model.hidden_size)
    if model.arch.qk_norm:  # q_norm / k_norm: RMSNorm over each head's q and k
        liger = liger_layers(model, plan)
        trainable = targets is None
        norm_saved(
            layer, "attention.qk_norm", T, q_dim + kv_dim, dt=dt, trainable=trainable, gemma=False, amp=amp, liger=liger
        )
    if mla:  # MLA: compressed kv (kv_lora_rank) normed, then expanded
        rank = int(model.config["kv_lora_rank"])
        layer.add("attention.kv_compress", FP32 * T * rank + dt * T * rank * 2)
    # rotary outputs q_embed, k_embed (new tensors) and v: the projection output, or for Phi-3's
    # fused qkv a contiguous copy of its v slice (the fused output itself is not kept).
    layer.add("attention.sdpa_inputs", dt * T * (q_dim + kv_dim + v_dim))
    if not eager_attention(model, plan):
        layer.add("attention.sdpa", dt * T * (v_dim if mla else q_dim) + FP32 * b * heads * s)
    else:
        # eager: scores → fp32 softmax (saved) → 16-bit copy (saved by probs @ v), plus the output
        layer.add("attention.eager_probs", (FP32 + dt) * b * heads * s * s)
        if model.config.get("attn_logit_softcapping"):  # Gemma-2: tanh(scores / cap) saves its output
            layer.add("attention.softcap", dt * b * heads * s * s)
        if model.num_kv_heads != heads and not mla:
            # repeat_kv copies k and v to every query head; the matmuls save the copies instead
            layer.add("attention.repeat_kv", dt * T * (2 * q_dim - kv_dim - v_dim))
    by_name = {l.name: l for l in linears}
    o_proj = by_name.get("o_proj") or by_name.get("dense")
    # `attn_output.transpose(1, 2).contiguous()` copies only for eager: flash-style SDPA returns its
    # output in (batch, seq, heads, head_dim) memory already (CUDA flash and the fake CPU kernel),
    # so o_proj saves the very tensor SDPA saved.
    # Phi-3 slices q/k/v out of one fused projection, and SDPA's output then needs the copy too
    # (saved-tensor census of a real CPU step).
    copies = eager_attention(model, plan) or model.arch.attention is QkvLayout.FUSED
    if o_proj is not None and targets is None and copies:
        layer.add("attention.o_proj_input", 2 * T * o_proj.in_features if amp else dt * T * o_proj.in_features)


__all__ = ["attention_saved"]
