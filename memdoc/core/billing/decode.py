"""The memory of decoding with a model: its KV cache and the transient peak of a no-grad forward (prefill).

Shared by the inference bill (`inference`) and post-training's generation and reference forwards
(`posttrain`); pure arithmetic, no import of the bill (so the bill may use it).
"""

from __future__ import annotations

from memdoc.core.model.families import Mlp, QkvLayout
from memdoc.core.model.model_spec import ModelSpec


def kv_elements_per_token(model: ModelSpec) -> int:
    """Cached elements per token, over all layers: K and V of every KV head (2 × layers × kv_heads × head_dim),
    or MLA's latent cache (DeepSeek-V2/V3, Kimi): layers × (kv_lora_rank + qk_rope_head_dim).

    transformers 5.25 caches MLA before `kv_b_proj` expands it: `DeepseekV2Attention.forward` splits
    `kv_a_proj_with_mqa`'s output into the normed latent (`kv_lora_rank`) and the roped key (`qk_rope_head_dim`),
    both single-head, and `cache.update(k_nope, k_pe, ...)` stores those two
    (`models/deepseek_v2/modeling_deepseek_v2.py`, lines 370-380; DeepSeek-V3 the same, `modeling_deepseek_v3.py`
    line 444). vLLM's `MLAAttentionSpec.real_page_size_bytes` stores the same per token and layer: one head of
    `kv_lora_rank + qk_rope_head_dim` elements (`vllm/v1/kv_cache_interface.py` at 001cabc1)."""
    if model.arch.attention is QkvLayout.MLA:
        return model.num_layers * (int(model.config["kv_lora_rank"]) + int(model.config["qk_rope_head_dim"]))
    return 2 * model.num_layers * model.kv_dim


def kv_cache_bytes(model: ModelSpec, *, batch: int, context: int, bytes_per_element: float) -> int:
    """The cache of `batch` sequences of `context` tokens: `kv_elements_per_token` × context × batch × bytes."""
    return int(kv_elements_per_token(model) * context * batch * bytes_per_element)


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


__all__ = ["kv_cache_bytes", "kv_elements_per_token", "prefill_activation_bytes"]
