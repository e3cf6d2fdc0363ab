"""Validation of every config.json value memdoc reads, before anything is computed from it.

A config is data from anywhere (a local file, the HF cache, the Hub): a negative vocabulary
would bill negative bytes, `hidden_size: 0` zero parameters, a string a TypeError deep in the
bill. `check_config` refuses such a config with one `ConfigError` that names the key, so the
counting code (`params`, `model_spec`) can trust the numbers it reads.

Rules:
* sizes (`_POSITIVE`) are integers ≥ 1; counts that may be zero (`_NON_NEGATIVE`: no experts,
  no dense prefix) are integers ≥ 0. JSON has no integer type distinct from float, so an
  integral float (4096.0) is accepted; 2.5, true, "4096" are not.
* every integer is at most `MAX_VALUE` (2³¹ − 1, the int32 shape limit): larger values are
  not models, and bigger products would overflow the float arithmetic of the step-time model;
* flags (`_BOOLEANS`) are JSON booleans;
* the head arithmetic the architectures need: `hidden_size` divisible by the head count when
  the head width is derived from it (no `head_dim`), the head count divisible by the
  key/value head count (grouped-query attention), top-k ≤ the number of routed experts, and at least one
  routed expert where every MoE layer routes (Mixtral, DeepSeek-V2);
* `model_type` is a non-empty string (it is looked up in tables).
"""

from __future__ import annotations

from memdoc.core.model.families import Family, HeadDim, MoeLayout
from memdoc.errors import ConfigError, quoted

MAX_VALUE = 2**31 - 1
"""Largest integer accepted for any size or count (torch shapes are int32-addressable per dim)."""

_POSITIVE = (
    "hidden_size",
    "n_embd",
    "d_model",
    "num_hidden_layers",
    "n_layer",
    "num_layers",
    "num_attention_heads",
    "n_head",
    "vocab_size",
    "num_key_value_heads",
    "num_kv_heads",
    "head_dim",
    "intermediate_size",
    "n_inner",
    "ffn_hidden_size",
    "ffn_dim",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "decoder_sparse_step",
    "moe_layer_freq",
    "max_position_embeddings",
    "n_positions",
    "seq_length",
    "type_vocab_size",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
    "kv_lora_rank",
    "num_ln_in_parallel_attn",
)
_NON_NEGATIVE = (
    "num_local_experts",
    "num_experts",
    "n_routed_experts",
    "num_experts_per_tok",
    "n_shared_experts",
    "first_k_dense_replace",
    "q_lora_rank",
)
_BOOLEANS = (
    "tie_word_embeddings",
    "attention_bias",
    "mlp_bias",
    "bias",
    "multi_query",
    "new_decoder_architecture",
    "parallel_attn",
)


def _integer(config: dict, key: str, where: str, minimum: int) -> int | None:
    value = config.get(key)
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer() and abs(value) <= MAX_VALUE:
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"{where}: {key} must be an integer, got {quoted(value)}")
    if value < minimum:
        kind = "positive" if minimum == 1 else "non-negative"
        raise ConfigError(f"{where}: {key} must be a {kind} integer, got {value}")
    if value > MAX_VALUE:
        raise ConfigError(f"{where}: {key} = {quoted(value)} is larger than any model ({MAX_VALUE:,} at most)")
    return value


def _first(config: dict, *keys: str) -> int | None:
    for key in keys:
        if config.get(key) is not None:
            return int(config[key])
    return None


def check_config(config: dict, *, model_id: str, family: Family | None = None) -> None:
    """Raise `ConfigError` naming the first config value memdoc cannot bill from (see module doc)."""
    where = f"config of {model_id}"
    if not isinstance(config, dict):
        raise ConfigError(f"{where} is not a JSON object")
    model_type = config.get("model_type")
    if model_type is None or model_type == "":
        raise ConfigError(f"{where} has no model_type")
    if not isinstance(model_type, str):
        raise ConfigError(f"{where}: model_type must be a string, got {quoted(model_type)}")
    for key in _POSITIVE:
        _integer(config, key, where, 1)
    for key in _NON_NEGATIVE:
        _integer(config, key, where, 0)
    for key in _BOOLEANS:
        if config.get(key) is not None and not isinstance(config[key], bool):
            raise ConfigError(f"{where}: {key} must be true or false, got {quoted(config[key])}")
    only = config.get("mlp_only_layers")
    if only is not None and (
        not isinstance(only, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in only)
    ):
        raise ConfigError(f"{where}: mlp_only_layers must be a list of layer indices, got {quoted(only)}")
    for key in family.required_keys if family else ():
        if config.get(key) is None:
            raise ConfigError(f"{where} has no {key} (needed for model_type {model_type!r})")
    hidden = _first(config, "hidden_size", "n_embd", "d_model")
    heads = _first(config, "num_attention_heads", "n_head")
    kv_heads = _first(config, "num_key_value_heads", "num_kv_heads")
    if hidden and heads:
        head_dim = family.head_dim if family else HeadDim.CONFIG
        derived = head_dim is HeadDim.HIDDEN_OVER_HEADS or config.get("head_dim") is None
        if derived and head_dim is not HeadDim.MLA and hidden % heads:
            raise ConfigError(
                f"{where}: hidden_size {hidden} is not divisible by num_attention_heads {heads} "
                "(the head width is hidden_size / heads)"
            )
    if heads and kv_heads and heads % kv_heads:
        raise ConfigError(
            f"{where}: num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads} "
            "(grouped-query attention shares each key/value head among a whole number of query heads)"
        )
    experts = _first(config, "num_local_experts", "num_experts", "n_routed_experts")
    top_k = _first(config, "num_experts_per_tok")
    if experts and top_k is not None and top_k > experts:
        raise ConfigError(f"{where}: num_experts_per_tok {top_k} exceeds the {experts} routed experts")
    if experts and top_k == 0:
        raise ConfigError(f"{where}: num_experts_per_tok must be at least 1 with {experts} routed experts")
    _check_routed(config, where, family, experts, top_k)


def _check_routed(config: dict, where: str, family: Family | None, experts: int | None, top_k: int | None) -> None:
    """Mixtral routes every layer, DeepSeek-V2 every layer past its dense prefix: with 0 routed experts and a
    top-k, the router picks k of none (transformers fails in `torch.topk`). Qwen-MoE's 0 experts is a dense model
    (`Qwen3MoeDecoderLayer`: sparse only when `num_experts > 0`)."""
    routes = family is not None and family.moe in (MoeLayout.EVERY_LAYER, MoeLayout.DENSE_PREFIX)
    if routes and experts == 0 and top_k:
        key = next(k for k in ("num_local_experts", "num_experts", "n_routed_experts") if k in config)
        raise ConfigError(f"{where}: {key} is 0, but every {family.name} MoE layer routes to {top_k} of its experts")
