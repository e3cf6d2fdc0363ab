"""Exact parameter counts from an HF config, per architecture family, without torch.

Each family's decoder layer is described as the list of its linear layers (`Linear`, with the
module name HF uses, so LoRA targets can be matched) plus its norm parameters; counts are sums
over that layout. The layouts follow the `modeling_*.py` files of transformers 5.x; the test
suite builds every catalog model on the meta device and asserts equality to the parameter.
Which layout a family has, and its variations (norms, MLP shape, attention, MoE), are the fields of
its `Family` record (`memdoc.core.model.families`). Families without a layout raise
`UnsupportedArchitecture`, and callers fall back to the meta-device count (`memdoc.resolve.meta_count`).
"""

from __future__ import annotations

from dataclasses import dataclass

from memdoc.core.model.families import Family, Layout, Mlp, MoeLayout, Norm, QkvLayout, SharedExpert
from memdoc.errors import ConfigError


class UnsupportedArchitecture(ConfigError):
    """No analytic layout for this model_type; count on the meta device instead."""


@dataclass(frozen=True)
class Linear:
    """One `nn.Linear` (or a stack of `copies` identical expert matrices) in a decoder layer."""

    name: str
    """HF module name (q_proj, down_proj, …), as LoRA `target_modules` match it."""
    in_features: int
    out_features: int
    bias: bool
    group: str
    """'attention', 'mlp', 'experts' or 'router'."""
    copies: int = 1
    """Identical matrices (routed experts); `copies` × in × out parameters."""

    @property
    def adaptable(self) -> bool:
        """Can peft put an adapter on it? Fused MoE expert tensors and routers are not `nn.Linear` modules."""
        return self.group not in ("experts", "router")

    @property
    def params(self) -> int:
        return self.copies * (self.in_features * self.out_features + (self.out_features if self.bias else 0))


@dataclass(frozen=True)
class LayerLayout:
    """The parameters of one decoder layer."""

    linears: tuple[Linear, ...]
    norm_params: int
    """Norm weights (and biases) in the layer."""

    def params(self, group: str | None = None) -> int:
        return sum(l.params for l in self.linears if group is None or l.group == group)


@dataclass(frozen=True, kw_only=True)
class ParamCounts:
    """Exact parameter counts, tied weights counted once."""

    embedding: int
    """Token (and learned position) embeddings."""
    attention: int
    """All attention projections, all layers."""
    mlp: int
    """Dense MLPs, routed experts, shared experts and routers, all layers."""
    norms: int
    """Every norm weight and bias, including the final norm."""
    head: int
    """LM head (0 when tied to the embedding), incl. its bias and any MLM transform."""
    active: int
    """Parameters one token touches (MoE: top-k routed experts only); = total for dense models."""
    vision: int = 0
    """A VLM's vision encoder (`memdoc.core.model.vision`); 0 for text models."""
    projector: int = 0
    """A VLM's projector / merger from the vision encoder into the language model."""
    cross_attention: int = 0
    """Llama-3.2-Vision's cross-attention decoder layers (inside the language model)."""

    @property
    def language(self) -> int:
        """The language model: embeddings, decoder layers (cross-attention ones included), final norm, head."""
        return self.embedding + self.attention + self.mlp + self.norms + self.head + self.cross_attention

    @property
    def total(self) -> int:
        return self.language + self.vision + self.projector


def _i(config: dict, *keys: str, default=None) -> int:
    for key in keys:
        if config.get(key) is not None:
            return int(config[key])
    if default is None:
        raise ConfigError(f"config has none of {', '.join(keys)}")
    return int(default)


def _gated_mlp(
    h: int, i: int, bias: bool = False, group: str = "mlp", copies: int = 1, prefix: str = ""
) -> list[Linear]:
    return [
        Linear(prefix + "gate_proj", h, i, bias, group, copies),
        Linear(prefix + "up_proj", h, i, bias, group, copies),
        Linear(prefix + "down_proj", i, h, bias, group, copies),
    ]


def _attention(config: dict, family: Family) -> tuple[list[Linear], int]:
    """Attention projections and any q/k norm parameters of one layer."""
    h = _i(config, "hidden_size", "n_embd")
    heads = _i(config, "num_attention_heads", "n_head")
    hd = _i(config, "head_dim", default=h // heads)
    kv = _i(config, "num_key_value_heads", default=heads)
    if family.attention is QkvLayout.MLA:
        nope, rope, v_hd = _i(config, "qk_nope_head_dim"), _i(config, "qk_rope_head_dim"), _i(config, "v_head_dim")
        kv_rank, q_rank = _i(config, "kv_lora_rank"), config.get("q_lora_rank")
        bias = bool(config.get("attention_bias", False))
        q = (
            [Linear("q_proj", h, heads * (nope + rope), False, "attention")]
            if not q_rank
            else [
                Linear("q_a_proj", h, q_rank, bias, "attention"),
                Linear("q_b_proj", q_rank, heads * (nope + rope), False, "attention"),
            ]
        )
        linears = q + [
            Linear("kv_a_proj_with_mqa", h, kv_rank + rope, bias, "attention"),
            Linear("kv_b_proj", kv_rank, heads * (nope + v_hd), False, "attention"),
            Linear("o_proj", heads * v_hd, h, bias, "attention"),
        ]
        return linears, kv_rank + (q_rank or 0)
    if family.attention is QkvLayout.FUSED:
        return [
            Linear("qkv_proj", h, (heads + 2 * kv) * hd, False, "attention"),
            Linear("o_proj", heads * hd, h, False, "attention"),
        ], 0
    qkv_bias = family.qkv_bias or bool(config.get("attention_bias", False))
    o_bias = bool(config.get("attention_bias", False)) and not family.qkv_bias
    linears = [
        Linear("q_proj", h, heads * hd, qkv_bias, "attention"),
        Linear("k_proj", h, kv * hd, qkv_bias, "attention"),
        Linear("v_proj", h, kv * hd, qkv_bias, "attention"),
        Linear("o_proj", heads * hd, h, o_bias, "attention"),
    ]
    qk_norm = 2 * hd if family.qk_norm else 0
    return linears, qk_norm


def _is_moe_layer(config: dict, family: Family, index: int) -> bool:
    if family.moe is MoeLayout.EVERY_LAYER:
        return True
    if family.moe is MoeLayout.SPARSE_STEP:
        step = int(config.get("decoder_sparse_step", 1) or 1)
        only_dense = config.get("mlp_only_layers") or []
        return index not in only_dense and _i(config, "num_experts") > 0 and (index + 1) % step == 0
    if family.moe is MoeLayout.DENSE_PREFIX:
        freq = int(config.get("moe_layer_freq", 1) or 1)
        return (
            bool(config.get("n_routed_experts"))
            and index >= (config.get("first_k_dense_replace") or 0)
            and index % freq == 0
        )
    return False


def _moe_layer_count(config: dict, family: Family, layers: int) -> int:
    """How many of `layers` decoder layers are MoE layers, in closed form (no per-layer loop).

    The patterns of `_is_moe_layer`: Qwen-MoE layers i with (i + 1) % step == 0 except
    `mlp_only_layers`; DeepSeek-V2 layers i ≥ first_k_dense_replace with i % moe_layer_freq == 0.
    """
    if family.moe is MoeLayout.EVERY_LAYER:
        return layers
    if family.moe is MoeLayout.SPARSE_STEP:
        if _i(config, "num_experts") == 0:
            return 0
        step = int(config.get("decoder_sparse_step", 1) or 1)
        exempt = {i for i in (config.get("mlp_only_layers") or []) if 0 <= i < layers and (i + 1) % step == 0}
        return layers // step - len(exempt)
    if family.moe is MoeLayout.DENSE_PREFIX:
        if not config.get("n_routed_experts"):
            return 0
        freq = int(config.get("moe_layer_freq", 1) or 1)
        first = int(config.get("first_k_dense_replace") or 0)
        if first >= layers:
            return 0
        start = -(-first // freq)  # first multiple of freq at or after `first`, as a multiple index
        return max(0, (layers - 1) // freq - start + 1)
    return 0


def _first_layer(config: dict, family: Family, layers: int, moe: bool) -> int:
    """Index of the first layer that is (moe=True) or is not an MoE layer; the count says one exists.

    The first layer of each kind is among few candidates: 0 and 1, the first multiple of
    `moe_layer_freq` after the dense prefix, the first `decoder_sparse_step` multiples past each
    exempt layer, and the exempt (`mlp_only_layers`) layers themselves.
    """
    only = [i for i in (config.get("mlp_only_layers") or []) if 0 <= i < layers]
    step = int(config.get("decoder_sparse_step", 1) or 1)
    freq = int(config.get("moe_layer_freq", 1) or 1)
    first = int(config.get("first_k_dense_replace") or 0)
    candidates = {0, 1, -(-first // freq) * freq, *only, *(step * j - 1 for j in range(1, len(only) + 2))}
    for index in sorted(i for i in candidates if 0 <= i < layers):
        if _is_moe_layer(config, family, index) is moe:
            return index
    raise AssertionError("no layer of the counted kind")  # pragma: no cover (the counts say one exists)


def _mlp(config: dict, family: Family, index: int, *, active: bool) -> list[Linear]:
    """MLP of one layer; with `active`, routed experts are counted top-k times instead of E."""
    h = _i(config, "hidden_size")
    i = _i(config, "intermediate_size", default=4 * h)
    if not _is_moe_layer(config, family, index):
        return _gated_mlp(h, i, bool(config.get("mlp_bias", False)))
    if family.moe is MoeLayout.EVERY_LAYER:
        experts, top_k = _i(config, "num_local_experts"), _i(config, "num_experts_per_tok")
        width = i
    else:
        experts = _i(config, "num_experts", "n_routed_experts")
        top_k = _i(config, "num_experts_per_tok")
        width = _i(config, "moe_intermediate_size")
    linears = [Linear("gate", h, experts, False, "router")]
    linears += _gated_mlp(h, width, False, "experts", top_k if active else experts, "experts.")
    if family.shared_expert is SharedExpert.GATED:
        linears += _gated_mlp(h, _i(config, "shared_expert_intermediate_size"), False, "mlp", 1, "shared_expert.")
        linears.append(Linear("shared_expert_gate", h, 1, False, "router"))
    if family.shared_expert is SharedExpert.SCALED and config.get("n_shared_experts"):
        linears += _gated_mlp(h, width * _i(config, "n_shared_experts"), False, "mlp", 1, "shared_experts.")
    return linears


def _llama_like_layer(config: dict, family: Family, index: int, *, active: bool = False) -> LayerLayout:
    h = _i(config, "hidden_size")
    attn, qk_norm = _attention(config, family)
    if family.mlp is Mlp.FUSED_GATE_UP:
        i = _i(config, "intermediate_size")
        mlp = [Linear("gate_up_proj", h, 2 * i, False, "mlp"), Linear("down_proj", i, h, False, "mlp")]
    else:
        mlp = _mlp(config, family, index, active=active)
    return LayerLayout(tuple(attn + mlp), family.norms_per_layer * h + qk_norm)


def _gpt2_layer(config: dict) -> LayerLayout:
    h = _i(config, "n_embd", "hidden_size")
    inner = _i(config, "n_inner", default=4 * h)
    return LayerLayout(
        (
            Linear("c_attn", h, 3 * h, True, "attention"),
            Linear("attn.c_proj", h, h, True, "attention"),
            Linear("c_fc", h, inner, True, "mlp"),
            Linear("mlp.c_proj", inner, h, True, "mlp"),
        ),
        2 * 2 * h,
    )


def _neox_layer(config: dict) -> LayerLayout:
    h = _i(config, "hidden_size")
    i = _i(config, "intermediate_size", default=4 * h)
    bias = bool(config.get("attention_bias", True))
    return LayerLayout(
        (
            Linear("query_key_value", h, 3 * h, bias, "attention"),
            Linear("dense", h, h, bias, "attention"),
            Linear("dense_h_to_4h", h, i, True, "mlp"),
            Linear("dense_4h_to_h", i, h, True, "mlp"),
        ),
        2 * 2 * h,
    )


def _falcon_layer(config: dict) -> LayerLayout:
    h = _i(config, "hidden_size")
    heads = _i(config, "num_attention_heads")
    hd = h // heads
    bias = bool(config.get("bias", False))
    if config.get("new_decoder_architecture"):
        kv = _i(config, "num_kv_heads", default=heads)
        qkv_out = (heads + 2 * kv) * hd
        norms = 2 * 2 * h if config.get("num_ln_in_parallel_attn", 2) == 2 else 2 * h
    else:
        qkv_out = h + 2 * hd if config.get("multi_query", True) else 3 * h
        norms = 2 * h if config.get("parallel_attn", True) else 2 * 2 * h
    ffn = _i(config, "ffn_hidden_size", default=4 * h)
    return LayerLayout(
        (
            Linear("query_key_value", h, qkv_out, bias, "attention"),
            Linear("dense", h, h, bias, "attention"),
            Linear("dense_h_to_4h", h, ffn, bias, "mlp"),
            Linear("dense_4h_to_h", ffn, h, bias, "mlp"),
        ),
        norms,
    )


def _phi_layer(config: dict) -> LayerLayout:
    h = _i(config, "hidden_size")
    heads = _i(config, "num_attention_heads")
    kv = _i(config, "num_key_value_heads", default=heads)
    hd = h // heads
    i = _i(config, "intermediate_size")
    return LayerLayout(
        (
            Linear("q_proj", h, heads * hd, True, "attention"),
            Linear("k_proj", h, kv * hd, True, "attention"),
            Linear("v_proj", h, kv * hd, True, "attention"),
            Linear("dense", heads * hd, h, True, "attention"),
            Linear("fc1", h, i, True, "mlp"),
            Linear("fc2", i, h, True, "mlp"),
        ),
        2 * h,
    )


def _bert_layer(config: dict) -> LayerLayout:
    h = _i(config, "hidden_size")
    i = _i(config, "intermediate_size")
    return LayerLayout(
        (
            Linear("query", h, h, True, "attention"),
            Linear("key", h, h, True, "attention"),
            Linear("value", h, h, True, "attention"),
            Linear("attention.output.dense", h, h, True, "attention"),
            Linear("intermediate.dense", h, i, True, "mlp"),
            Linear("output.dense", i, h, True, "mlp"),
        ),
        2 * 2 * h,
    )


def generic_layout(hidden: int, q_dim: int, kv_dim: int, intermediate: int) -> LayerLayout:
    """A plain decoder layer (q/k/v/o projections, two-matrix MLP, two LayerNorms) for unknown families."""
    return LayerLayout(
        (
            Linear("q_proj", hidden, q_dim, False, "attention"),
            Linear("k_proj", hidden, kv_dim, False, "attention"),
            Linear("v_proj", hidden, kv_dim, False, "attention"),
            Linear("o_proj", q_dim, hidden, False, "attention"),
            Linear("fc1", hidden, intermediate, False, "mlp"),
            Linear("fc2", intermediate, hidden, False, "mlp"),
        ),
        2 * 2 * hidden,
    )


_OTHER_LAYOUTS = {
    Layout.GPT2: _gpt2_layer,
    Layout.GPT_NEOX: _neox_layer,
    Layout.FALCON: _falcon_layer,
    Layout.PHI: _phi_layer,
    Layout.BERT: _bert_layer,
}
"""The layouts that take the config only (no per-family variations, the same for every layer)."""


def layer_layout(config: dict, family: Family, index: int, *, active: bool = False) -> LayerLayout:
    """Parameters of decoder layer `index` (layers differ only for MoE / dense mixes)."""
    if family.layout is Layout.LLAMA_LIKE:
        return _llama_like_layer(config, family, index, active=active)
    if family.layout is None:
        raise UnsupportedArchitecture(f"no analytic layout for model_type {config.get('model_type')!r}")
    return _OTHER_LAYOUTS[family.layout](config)


def _embedding_norm_head(config: dict, family: Family) -> tuple[int, int, int]:
    """(embedding, final-norm, head) parameters outside the decoder layers."""
    h = _i(config, "hidden_size", "n_embd")
    vocab = _i(config, "vocab_size")
    if family.layout is Layout.GPT2:
        return vocab * h + _i(config, "n_positions") * h, 2 * h, 0
    if family.layout is Layout.BERT:
        emb = (vocab + _i(config, "max_position_embeddings") + _i(config, "type_vocab_size", default=2)) * h + 2 * h
        # BertForMaskedLM: transform dense (h×h + h) and its LayerNorm, decoder tied, decoder bias (vocab).
        return emb, 0, h * h + h + 2 * h + vocab
    tied = bool(config.get("tie_word_embeddings", family.tied_default))
    head = 0 if tied else vocab * h
    if family.head_bias:
        head += vocab  # phi-2's lm_head has a bias, also when tied weights would be shared
    final_norm = 2 * h if family.norm is Norm.LAYER else h  # LayerNorm: weight and bias
    return vocab * h, final_norm, head


def layer_groups(config: dict, family: Family, layers: int) -> tuple[tuple[int, int], ...]:
    """The distinct decoder-layer kinds as (first index, number of layers), in layer order.

    Layers differ only between dense and MoE MLPs, so a model has at most two kinds; costs scale
    with the kinds, never with `layers` (a config may say 1,000,000).
    """
    moe = _moe_layer_count(config, family, layers)
    groups = []
    if layers - moe:
        groups.append((_first_layer(config, family, layers, False), layers - moe))
    if moe:
        groups.append((_first_layer(config, family, layers, True), moe))
    return tuple(sorted(groups))


def count_params(config: dict, *, family: Family, model_id: str = "model") -> ParamCounts:
    """Exact parameter counts of `config` (raises UnsupportedArchitecture for families without a layout)."""
    if not family.has_layout:
        raise UnsupportedArchitecture(f"no analytic layout for {model_id} (model_type {config.get('model_type')!r})")
    layers = _i(config, "num_hidden_layers", "n_layer")
    embedding, final_norm, head = _embedding_norm_head(config, family)
    attention = mlp = norms = active_mlp = 0
    for index, count in layer_groups(config, family, layers):
        layout = layer_layout(config, family, index)
        attention += count * layout.params("attention")
        mlp += count * (layout.params() - layout.params("attention"))
        norms += count * layout.norm_params
        active_layout = layer_layout(config, family, index, active=True)
        active_mlp += count * (active_layout.params() - active_layout.params("attention"))
    norms += final_norm
    total = embedding + attention + mlp + norms + head
    return ParamCounts(
        embedding=embedding,
        attention=attention,
        mlp=mlp,
        norms=norms,
        head=head,
        active=total - mlp + active_mlp,
    )
