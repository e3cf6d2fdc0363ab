"""What a GPT-2, GPT-NeoX, Falcon, Phi-2 or BERT layer saves (LayerNorm, plain GELU MLP)."""

from __future__ import annotations

from memdoc.core.billing.activations.kernels import eager_attention
from memdoc.core.billing.activations.saved import FP32, SavedTensors
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.params import Linear
from memdoc.core.model.plan import TrainingPlan

_PYTHON_GELUS = ("gelu_new", "gelu_fast", "gelu_python", "quick_gelu")
"""GELUs written as Python formulas (transformers' NewGELUActivation & co.): four intermediates kept."""


def layernorm_layer_saved(
    layer: SavedTensors,
    model: ModelSpec,
    plan: TrainingPlan,
    linears: list[Linear],
    targets,
    *,
    dt: int,
    amp: bool,
    act_dt: int,
) -> None:
    """GPT-2, GPT-NeoX, Falcon, Phi-2 (and BERT) decoder layers, from autograd's saved tensors.

    LayerNorm saves its input and per-token mean/rstd; parallel-residual layers (NeoX, Falcon,
    Phi-2) feed attention and MLP from the same input, so it is kept once; Phi-2 and Falcon use
    one norm for both. Attention keeps q, k, v, its output and the merged-head copy the output
    projection saves; Falcon's multi-query attention does not fit SDPA's fused kernels (one k/v
    head for many query heads, no `enable_gqa`) and runs the math kernel, which keeps the fp32
    probabilities (heads × s²) and an fp32 copy of q instead (transformers < 5.25; from 5.25 its SDPA gets a
    materialised mask, `_masked_interface_sdpa`). Residual dropout keeps one mask per
    dropout (GPT-2, Phi-2: `resid_pdrop`); GPT-2's attention dropout runs inside the flash kernel
    on CUDA (it keeps the RNG state, not a mask). The MLP keeps the activation's input (four
    intermediates for GELUs written in Python) and the down projection's input; `act_dt` is the
    activation's width when it can differ (`kbit.stream_bytes`: fp32 after the QLoRA upcast).
    """
    cfg, family = model.config, model.arch
    T, h = plan.micro_batch * plan.seq_len, model.hidden_size
    b, s, heads = plan.micro_batch, plan.seq_len, model.num_heads
    full = targets is None
    cdt = 2 if amp else dt
    parallel = family.parallel_residual(cfg)
    layer.add("layernorm", (1 if parallel else 2) * ((FP32 if amp else dt) * T * h + 2 * FP32 * T))
    if full:
        layer.add("layernorm_out", (1 if family.shared_norm(cfg) else 2) * cdt * T * h)
    q, kv = model.q_dim, model.kv_dim
    if eager_attention(model, plan):
        layer.add("attention.eager_probs", (FP32 + dt) * b * heads * s * s)
        layer.add("attention.qkv", cdt * T * (q + 2 * kv))
    elif family.gqa_math_kernel and model.num_kv_heads != heads:
        layer.add("attention.math_kernel", FP32 * b * heads * s * s + FP32 * T * (q + 2 * kv))
    elif family.materialized_mask:
        _masked_interface_sdpa(layer, model, plan, cdt=cdt)
    else:
        layer.add("attention.sdpa", cdt * T * (2 * q + 2 * kv) + FP32 * b * heads * s)
    if full and (eager_attention(model, plan) or not family.materialized_mask):
        layer.add("attention.dense_input", cdt * T * q)
    if cfg.get("resid_pdrop") or cfg.get("hidden_dropout") or cfg.get("hidden_dropout_prob"):
        layer.add("dropout", 2 * cdt * T * h)
    up = next(l for l in linears if l.group == "mlp")
    act = cfg.get("activation_function") or cfg.get("hidden_act") or "gelu"
    layer.add("mlp.act", (4 if act in _PYTHON_GELUS else 1) * max(cdt, act_dt) * T * up.out_features)
    if full:
        layer.add("mlp.down_input", cdt * T * up.out_features)


def _masked_interface_sdpa(layer: SavedTensors, model: ModelSpec, plan: TrainingPlan, *, cdt: int) -> None:
    """SDPA through transformers' shared interface with a materialised mask (`Family.materialized_mask`):
    q, k and v as the kernel gets them, its output (which the output projection reads, so no copy of its own),
    the per-head logsumexp, and the mask in the query's dtype. `repeat_kv` (transformers 5.25
    `integrations/sdpa_attention.py:127`) expands k and v to every query head: a view with one kv head
    (`expand` + `reshape` merges a size-1 dim) or one group per head, a copy otherwise."""
    b, s, T, heads = plan.micro_batch, plan.seq_len, plan.micro_batch * plan.seq_len, model.num_heads
    q, kv = model.q_dim, model.kv_dim
    kv_saved = kv if model.num_kv_heads in (1, heads) else q
    layer.add("attention.sdpa", cdt * T * (2 * q + 2 * kv_saved) + FP32 * b * heads * s)
    layer.add("attention.mask", cdt * b * s * s)


__all__ = ["layernorm_layer_saved"]
