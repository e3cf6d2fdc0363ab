"""The memory of decoding with a model: its KV cache and the transient peak of a no-grad forward (prefill).

Shared by the inference bill (`inference`) and post-training's generation and reference forwards
(`posttrain`); pure arithmetic, no import of the bill (so the bill may use it).
"""

from __future__ import annotations

from memdoc.core.model.families import Mlp
from memdoc.core.model.model_spec import ModelSpec


def kv_cache_bytes(model: ModelSpec, *, batch: int, context: int, bytes_per_element: float) -> int:
    """2 × layers × kv_heads × head_dim × context × batch × bytes (K and V of every layer)."""
    return int(2 * model.num_layers * model.kv_dim * context * batch * bytes_per_element)


def prefill_activation_bytes(model: ModelSpec, tokens: int, compute_bytes: int) -> int:
    """The transient peak of one prefill forward of `tokens` tokens, inside a decoder layer's MLP.

    `down_proj(act(gate_proj(x)) * up_proj(x))` holds act(gate), up and their product (3 × T ×
    intermediate); a fused `gate_up_proj` (Phi-3) keeps its whole 2 × intermediate output alive
    under the chunks, so 4 × T × intermediate. Meanwhile four hidden-sized tensors are alive: the
    embedding output (held by the model's forward), the layer's input (held by the caller's loop),
    the residual after attention and the normed MLP input (4 × T × hidden). Checked against
    fake-tensor traces of transformers' forward (benchmarks/inference.py)."""
    width = max(model.intermediate_size, model.moe_intermediate_size * max(model.experts_per_token, 1))
    fused = model.arch.mlp is Mlp.FUSED_GATE_UP  # Phi-3's gate_up_proj output is 2 × intermediate wide
    return compute_bytes * tokens * ((4 if fused else 3) * width + 4 * model.hidden_size)


__all__ = ["kv_cache_bytes", "prefill_activation_bytes"]
