"""The architecture families memdoc bills, one `Family` record each: the one place family facts live.

Every place that depends on the architecture (parameter layouts, activation tensors, step time,
config checks, LoRA defaults, Liger kernels) reads a field of the model's record instead of
comparing family names. HF `model_type`s map to families through `Family.model_types`
(`family_of`); a model_type no family lists is `UNKNOWN`, counted on the meta device.

Adding a family: one entry in `FAMILIES`, its decoder layout in `memdoc.core.model.params` when
no `Layout` fits, and the catalog JSON of its models (`memdoc/data/catalog`). The tied-embedding
defaults are checked against transformers' config classes (`tests/test_families.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import Enum
from functools import cache

from memdoc.core.model.stack import parse_version


class Layout(Enum):
    """Which decoder-layer layout `memdoc.core.model.params` counts for the family."""

    LLAMA_LIKE = "llama-like"
    """Pre-norm decoder with q/k/v/o projections and a gated MLP; the variations are the record's fields."""
    GPT2 = "gpt2"
    """GPT-2: fused `c_attn`, Conv1D projections, learned positions (`n_positions`)."""
    GPT_NEOX = "gpt_neox"
    """GPT-NeoX (Pythia): fused `query_key_value`, `dense_h_to_4h` MLP."""
    FALCON = "falcon"
    """Falcon: fused multi-query `query_key_value`; the old and the new decoder architecture."""
    PHI = "phi"
    """Phi-1/2: q/k/v with biases, `dense`, `fc1`/`fc2` MLP, one norm per layer, LM head with a bias."""
    BERT = "bert"
    """BERT (masked LM): token, position and type embeddings, post-norm layers, an MLM transform head."""


class Norm(Enum):
    """The norm of the decoder layers (and the final norm)."""

    RMS = "RMSNorm"
    """LlamaRMSNorm: `weight * (x32 * rsqrt(mean(x32²))).to(dtype)`; a weight, no bias."""
    GEMMA_RMS = "GemmaRMSNorm"
    """GemmaRMSNorm: multiplies by (1 + weight) in fp32, so its normalised output is fp32."""
    LAYER = "LayerNorm"
    """nn.LayerNorm: weight and bias; saves its input and per-token mean and rstd."""


class Mlp(Enum):
    """The shape of the dense MLP."""

    GATED = "gated"
    """Three matrices: act(gate_proj(x)) * up_proj(x) → down_proj."""
    FUSED_GATE_UP = "fused gate_up"
    """Phi-3: one `gate_up_proj` (2 × intermediate wide) chunked into gate and up, then `down_proj`."""
    PLAIN = "plain"
    """Two matrices with a GELU between (fc1 → gelu → fc2)."""


class QkvLayout(Enum):
    """How the attention's queries, keys and values are projected."""

    SEPARATE = "separate"
    """q_proj, k_proj, v_proj (and o_proj)."""
    FUSED = "fused"
    """One projection whose output is sliced into q, k and v (Phi-3 `qkv_proj`, GPT-2 `c_attn`,
    NeoX/Falcon `query_key_value`); Phi-3's SDPA output then needs a contiguous copy."""
    MLA = "mla"
    """DeepSeek-V2 multi-head latent attention: a compressed kv (`kv_lora_rank`) normed and
    expanded by `kv_b_proj`; head width qk_nope + qk_rope for q and k, `v_head_dim` for v."""


class HeadDim(Enum):
    """Where the width of one attention head comes from."""

    CONFIG = "config"
    """`head_dim` when the config states it, else hidden_size / heads."""
    HIDDEN_OVER_HEADS = "hidden / heads"
    """Always hidden_size / heads: the modelling code ignores any `head_dim` key."""
    MLA = "qk_nope + qk_rope"
    """DeepSeek-V2: `qk_nope_head_dim + qk_rope_head_dim` (the hidden size need not divide)."""


class MoeLayout(Enum):
    """Which decoder layers route over experts, and where the expert numbers are read."""

    EVERY_LAYER = "every layer"
    """Mixtral: every layer, `num_local_experts` experts as wide as `intermediate_size`."""
    SPARSE_STEP = "sparse step"
    """Qwen-MoE: layers i with (i + 1) % `decoder_sparse_step` == 0, except `mlp_only_layers`;
    `num_experts` experts of `moe_intermediate_size`."""
    DENSE_PREFIX = "dense prefix"
    """DeepSeek-V2: layers i ≥ `first_k_dense_replace` with i % `moe_layer_freq` == 0;
    `n_routed_experts` experts of `moe_intermediate_size`."""


class SharedExpert(Enum):
    """The always-on expert an MoE layer adds to its routed ones."""

    GATED = "gated"
    """Qwen2-MoE: `shared_expert` (`shared_expert_intermediate_size` wide) and a 1-wide `shared_expert_gate`."""
    SCALED = "scaled"
    """DeepSeek-V2: `shared_experts`, `n_shared_experts` × `moe_intermediate_size` wide (when stated)."""


def _never(config: dict) -> bool:
    return False


def _always(config: dict) -> bool:
    return True


DEFAULT_LORA_TARGETS = ("q_proj", "v_proj")
"""peft's default LoRA targets for Llama-style attention (`TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING`)."""


@dataclass(frozen=True, kw_only=True)
class Family:
    """One architecture family: how it is counted, what it saves, and its quirks."""

    name: str
    """memdoc's family name (the key in `FAMILIES`)."""
    model_types: tuple[str, ...]
    """The HF `model_type`s counted with this family's layout."""
    layout: Layout | None
    """The decoder-layer layout in `memdoc.core.model.params`; None: no analytic layout (meta-device count)."""
    norm: Norm = Norm.RMS
    """The norm class of the decoder layers and the final norm."""
    norms_per_layer: int = 2
    """Norms in a Llama-like decoder layer (Gemma-2: 4, norms before and after attention and MLP)."""
    mlp: Mlp = Mlp.GATED
    """The shape of the dense MLP."""
    attention: QkvLayout = QkvLayout.SEPARATE
    """How q, k and v are projected."""
    qkv_bias: bool = False
    """q/k/v projections with biases and o_proj without, whatever `attention_bias` says (Qwen2)."""
    qk_norm: bool = False
    """An RMSNorm over each head's q and k (`q_norm`, `k_norm`, head_dim wide each; Qwen3)."""
    head_dim: HeadDim = HeadDim.CONFIG
    """Where the head width comes from."""
    moe: MoeLayout | None = None
    """Which layers are MoE layers; None for dense families."""
    shared_expert: SharedExpert | None = None
    """The MoE layers' shared expert, if any."""
    tied_default: bool = False
    """`tie_word_embeddings` when the config does not say: the default of transformers' config class."""
    head_bias: bool = False
    """The LM head has a bias (vocab parameters), tied weights or not (Phi-2)."""
    lora_targets: tuple[str, ...] = DEFAULT_LORA_TARGETS
    """peft's default `target_modules` for the family (its attention's module names)."""
    required_keys: tuple[str, ...] = ()
    """Config keys the analytic layout cannot do without (beyond hidden/layers/heads/vocab)."""
    liger_norm: bool = False
    """Liger's `apply_liger_kernel_to_*` patches the family's RMSNorm, RoPE and MLP (`--loss fused`)."""
    liger_glu: bool = False
    """Of those, a dense gated MLP with separate gate/up projections: LigerSwiGLUMLP / LigerGEGLUMLP."""
    eager_only: bool = False
    """transformers runs eager attention whatever is asked (Gemma-2: attention-logit soft-capping)."""
    logit_softcapping: bool = False
    """`final_logit_softcapping` in the config caps the logits: logits / cap → tanh → × cap (Gemma-2)."""
    alternating_sliding_window: bool = False
    """Layers alternate sliding-window and full attention, so both masks exist (Gemma-2)."""
    sliding_window_pattern: int = 0
    """Without `layer_types` in the config, every n-th layer is full attention and the rest slide (transformers
    5.25's defaults: Gemma-2 2, `gemma2/configuration_gemma2.py` line 96; Gemma-3 6, `gemma3/configuration_gemma3.py`
    lines 105-109, or the config's `sliding_window_pattern`); 0: no default pattern."""
    parallel_residual: Callable[[dict], bool] = _never
    """Given the config: attention and MLP read the same layer input (NeoX, Falcon, Phi-2)."""
    shared_norm: Callable[[dict], bool] = _never
    """Given the config: one norm feeds both attention and MLP (Phi-2, Falcon's old architecture)."""
    gqa_math_kernel: bool = False
    """Grouped/multi-query attention runs SDPA's math kernel (no `enable_gqa`): fp32 probabilities (Falcon before
    transformers 5.25)."""
    materialized_mask: bool = False
    """Attention goes through transformers' shared SDPA interface with a materialised 4-D causal mask: the model
    calls `create_causal_mask(..., allow_is_causal_skip=False)` (Falcon ≥ 5.25, `modeling_falcon.py`
    `FalconModel.forward`, for ALiBi's sake). Then `use_gqa_in_sdpa` is false and K/V are `repeat_kv`'d
    (`integrations/sdpa_attention.py:119-128`), torch saves the mask converted to the query's dtype in every
    layer (`convert_boolean_attn_mask`, aten `native/transformers/attention.cpp`), and the output projection
    reads the kernel's own output (`attn_output.transpose(1, 2).contiguous()` is a no-op on its
    (batch, seq, heads, dim) layout)."""
    before: tuple[tuple[str, dict], ...] = ()
    """Version rules: (transformers version, {field: value}) — the family's facts before that release, the
    newest first. The fields above are the newest release's (`LATEST_KNOWN`); `Family.as_of` applies these."""

    def as_of(self, transformers: str | None) -> Family:
        """The family as the given transformers release builds it (None: the newest memdoc knows)."""
        return _as_of(self.name, transformers) if transformers and self.before else self

    @property
    def has_layout(self) -> bool:
        """Is there an analytic layout (else parameters come from the meta device)?"""
        return self.layout is not None


_QWEN_MOE_KEYS = ("num_experts", "num_experts_per_tok", "moe_intermediate_size")
_LAYERNORM = {"norm": Norm.LAYER, "mlp": Mlp.PLAIN, "head_dim": HeadDim.HIDDEN_OVER_HEADS}

_ENTRIES = (
    Family(
        name="llama",
        model_types=("llama", "mistral"),
        layout=Layout.LLAMA_LIKE,
        liger_norm=True,
        liger_glu=True,
    ),
    Family(
        name="qwen2", model_types=("qwen2",), layout=Layout.LLAMA_LIKE, qkv_bias=True, liger_norm=True, liger_glu=True
    ),
    Family(
        name="qwen3", model_types=("qwen3",), layout=Layout.LLAMA_LIKE, qk_norm=True, liger_norm=True, liger_glu=True
    ),
    Family(
        name="gemma",
        model_types=("gemma",),
        layout=Layout.LLAMA_LIKE,
        norm=Norm.GEMMA_RMS,
        tied_default=True,
        liger_norm=True,
        liger_glu=True,
    ),
    Family(
        name="gemma2",
        model_types=("gemma2",),
        layout=Layout.LLAMA_LIKE,
        norm=Norm.GEMMA_RMS,
        norms_per_layer=4,
        tied_default=True,
        liger_norm=True,
        liger_glu=True,
        eager_only=True,
        logit_softcapping=True,
        alternating_sliding_window=True,
        sliding_window_pattern=2,
    ),
    Family(
        name="gemma3",
        model_types=("gemma3_text",),
        layout=Layout.LLAMA_LIKE,
        norm=Norm.GEMMA_RMS,
        norms_per_layer=4,
        qk_norm=True,
        tied_default=True,
        alternating_sliding_window=True,
        sliding_window_pattern=6,
    ),
    Family(
        name="phi3",
        model_types=("phi3",),
        layout=Layout.LLAMA_LIKE,
        mlp=Mlp.FUSED_GATE_UP,
        attention=QkvLayout.FUSED,
        lora_targets=("qkv_proj",),
        required_keys=("intermediate_size",),
        liger_norm=True,
    ),
    Family(
        name="mixtral",
        model_types=("mixtral",),
        layout=Layout.LLAMA_LIKE,
        moe=MoeLayout.EVERY_LAYER,
        required_keys=("num_local_experts", "num_experts_per_tok"),
        liger_norm=True,
    ),
    Family(
        name="qwen2_moe",
        model_types=("qwen2_moe",),
        layout=Layout.LLAMA_LIKE,
        qkv_bias=True,
        moe=MoeLayout.SPARSE_STEP,
        shared_expert=SharedExpert.GATED,
        required_keys=(*_QWEN_MOE_KEYS, "shared_expert_intermediate_size"),
    ),
    Family(
        name="qwen3_moe",
        model_types=("qwen3_moe",),
        layout=Layout.LLAMA_LIKE,
        qk_norm=True,
        moe=MoeLayout.SPARSE_STEP,
        required_keys=_QWEN_MOE_KEYS,
        liger_norm=True,
    ),
    Family(
        name="deepseek_v2",
        model_types=("deepseek_v2",),
        layout=Layout.LLAMA_LIKE,
        attention=QkvLayout.MLA,
        head_dim=HeadDim.MLA,
        moe=MoeLayout.DENSE_PREFIX,
        shared_expert=SharedExpert.SCALED,
        lora_targets=("q_proj", "kv_b_proj"),
        required_keys=("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "kv_lora_rank"),
    ),
    Family(
        name="gpt2",
        model_types=("gpt2",),
        layout=Layout.GPT2,
        attention=QkvLayout.FUSED,
        tied_default=True,
        lora_targets=("c_attn",),
        required_keys=("n_positions",),
        **_LAYERNORM,
    ),
    Family(
        name="gpt_neox",
        model_types=("gpt_neox",),
        layout=Layout.GPT_NEOX,
        attention=QkvLayout.FUSED,
        lora_targets=("query_key_value",),
        parallel_residual=lambda config: bool(config.get("use_parallel_residual", True)),
        **_LAYERNORM,
    ),
    Family(
        name="falcon",
        model_types=("falcon",),
        layout=Layout.FALCON,
        attention=QkvLayout.FUSED,
        tied_default=True,
        lora_targets=("query_key_value",),
        parallel_residual=lambda config: bool(
            config.get("parallel_attn", True) or config.get("new_decoder_architecture")
        ),
        shared_norm=lambda config: not config.get("new_decoder_architecture"),
        materialized_mask=True,
        # transformers 5.24 `modeling_falcon.py` `FalconAttention.forward`: its own SDPA call with one k/v head
        # broadcast over the queries (the math kernel); 5.25 moved Falcon to the shared attention interface.
        before=(("5.25.0", {"gqa_math_kernel": True, "materialized_mask": False}),),
        **_LAYERNORM,
    ),
    Family(
        name="phi",
        model_types=("phi",),
        layout=Layout.PHI,
        head_bias=True,
        required_keys=("intermediate_size",),
        parallel_residual=_always,
        shared_norm=_always,
        **_LAYERNORM,
    ),
    Family(
        name="bert",
        model_types=("bert",),
        layout=Layout.BERT,
        tied_default=True,
        lora_targets=("query", "value"),
        required_keys=("intermediate_size", "max_position_embeddings"),
        **_LAYERNORM,
    ),
)

UNKNOWN = Family(name="unknown", model_types=(), layout=None)
"""Any other model_type: parameters from the meta device, activations of a generic decoder layer
of its sizes billed as a Llama-like one (the bill says so)."""

FAMILIES: dict[str, Family] = {family.name: family for family in (*_ENTRIES, UNKNOWN)}
"""Every family by name, `UNKNOWN` included."""

_BY_MODEL_TYPE = {model_type: family for family in _ENTRIES for model_type in family.model_types}


@cache
def _as_of(name: str, transformers: str) -> Family:
    family, version = FAMILIES[name], parse_version(transformers)
    for since, facts in family.before:
        if version < parse_version(since):
            family = replace(family, **facts)
    return family


def family_of(model_type: str) -> Family:
    """The family of an HF model_type (`UNKNOWN` when memdoc has no analytic layout for it)."""
    return _BY_MODEL_TYPE.get(model_type, UNKNOWN)


__all__ = [
    "DEFAULT_LORA_TARGETS",
    "FAMILIES",
    "UNKNOWN",
    "Family",
    "HeadDim",
    "Layout",
    "Mlp",
    "MoeLayout",
    "Norm",
    "QkvLayout",
    "SharedExpert",
    "family_of",
]
