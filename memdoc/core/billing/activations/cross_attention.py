"""Llama-3.2-Vision's cross-attention decoder layers: what each saves for backward (transformers 5.24
`modeling_mllama.py` `MllamaCrossAttentionDecoderLayer`, `MllamaTextCrossAttention`).

For T text tokens and C vision states (`ImageTokens.cross` per image: tiles × (patches + CLS)), with the weights
training: the RMSNorms (fp32 input copy, rsqrt, normalised output), q_proj's input, q_norm over head_dim (fp32 copy,
rsqrt, normalised output) and its output (SDPA's q), k_proj/v_proj's input (the vision states), k_norm over the C
keys, the keys and values `repeat_kv` expands to every query head (transformers' SDPA takes no GQA with a mask:
`integrations/sdpa_attention.py` `use_gqa_in_sdpa`), the T × C mask, SDPA's output and logsumexp, the attention
output the tanh gate multiplies, the gated MLP (input, gate, SiLU output, up, down's input) and the product the
second gate multiplies. A census of a tiny real model's cross-attention layer matches it to the byte (the two
tanh'd gate scalars aside: `tests/fidelity/test_vision_census.py`).

With LoRA (frozen weights) the normalised outputs and frozen linears' inputs are not kept; the adapters' own
tensors are billed as `adapters.lora_saved` bills the language model's (an estimate here, not census-checked).
With gradient checkpointing each layer (a `GradientCheckpointingLayer`) keeps its input.
"""

from __future__ import annotations

from memdoc.core.billing.activations.saved import FP32
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.plan import Checkpointing, Method, TrainingPlan

_CROSS_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def cross_layer_saved(
    model: ModelSpec, text: int, cross: int, *, dt: int, trained: bool = True, mask: int | None = None
) -> int:
    """Bytes one cross-attention layer saves for `text` tokens attending to `cross` vision states (module doc);
    `trained`: its weights train (full fine-tuning), else frozen (no normalised outputs, no linear inputs); `mask`:
    the attention mask's elements, rows × text per row × cross per row (default text × cross: one row)."""
    t, c, h, i = text, cross, model.hidden_size, model.intermediate_size
    mask = t * c if mask is None else mask
    q, kv, heads, kv_heads = model.q_dim, model.kv_dim, model.num_heads, model.num_kv_heads
    y = dt if trained else 0  # a norm's normalised output, a linear's input: kept only for a weight's gradient
    norms = 2 * (FP32 * t * h + FP32 * t + y * t * h)
    q_side = y * t * h + FP32 * t * q + FP32 * t * heads + y * t * q + dt * t * q  # q_proj in, q_norm, SDPA's q
    kv_side = y * c * h + FP32 * c * kv + FP32 * c * kv_heads + y * c * kv + 2 * dt * c * q  # in, k_norm, repeat
    attention = dt * mask + dt * t * q + FP32 * t * heads + dt * t * h  # mask, output, lse, the gated output
    mlp = y * t * h + 4 * dt * t * i + dt * t + dt * t * h  # input, gate/SiLU/up/down in, row mask, gated product
    return norms + q_side + kv_side + attention + mlp


def cross_attention_saved(model: ModelSpec, plan: TrainingPlan, cross_per_row: int) -> int:
    """All the cross-attention layers' saved bytes for the plan's rows (`plan.seq_len` tokens each, the language
    model's) attending to `cross_per_row` vision states per row; 0 for a model without them."""
    vision = model.vision
    if vision is None or not vision.cross_attention_layers or not cross_per_row:
        return 0
    dt = plan.precision.compute_bits // 8
    t, c = plan.micro_batch * plan.seq_len, plan.micro_batch * cross_per_row
    mask = plan.micro_batch * plan.seq_len * cross_per_row  # rows × 1 × T × C (`MllamaTextCrossAttention`)
    layers = len(vision.cross_attention_layers)
    if plan.checkpointing is not Checkpointing.NONE:
        return layers * dt * t * model.hidden_size
    trained = plan.method is Method.FULL
    shared = (dt * c * model.hidden_size if trained else 0) + dt * mask  # the vision states and the mask: one each
    saved = layers * cross_layer_saved(model, t, c, dt=dt, trained=trained, mask=mask) - (layers - 1) * shared
    if not trained:  # peft's fp32 adapters: each adapted linear keeps an fp32 copy of its input and its r-wide output
        targets = set(plan.lora_targets)
        widths = {"q_proj": (t, model.hidden_size), "k_proj": (c, model.hidden_size), "v_proj": (c, model.hidden_size)}
        widths |= {"o_proj": (t, model.q_dim), "gate_proj": (t, model.hidden_size), "up_proj": (t, model.hidden_size)}
        widths |= {"down_proj": (t, model.intermediate_size)}
        for name in _CROSS_LINEARS:
            if "all-linear" in targets or name in targets:
                tokens, width = widths[name]
                saved += layers * FP32 * tokens * (width + plan.lora_rank)
    return saved


__all__ = ["cross_attention_saved", "cross_layer_saved"]
