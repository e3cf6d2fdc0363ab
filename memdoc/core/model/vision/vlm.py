"""Vision-language models: the `ModelSpec` of a VLM config, its language model read from `text_config`.

A VLM's `config.json` nests `vision_config` and `text_config` (Qwen2.5-VL keeps the text keys at the top
level). The language model is read with `spec_from_config` on the text config, its `model_type` mapped
onto memdoc's text family (`TEXT_FAMILY_TYPES`); the vision tower and projector are counted by the records
of `registry.VLMS` and `registry.TOWERS`; `ModelSpec.vision` holds them and `ModelSpec.params` counts every part.
"""

from __future__ import annotations

import dataclasses

from memdoc.core.model.model_spec import ModelSpec, spec_from_config
from memdoc.core.model.vision.mllama import cross_attention_params
from memdoc.core.model.vision.registry import TOWERS, VLMS, tower_kind
from memdoc.core.model.vision.spec import VisionSpec
from memdoc.errors import ConfigError

TEXT_FAMILY_TYPES = {
    "qwen2_5_vl_text": "qwen2",
    "qwen3_vl_text": "qwen3",
    "mllama_text_model": "llama",
}
"""A VLM's text model_type → the text model_type whose decoder layer it is (`modeling_qwen2_5_vl.py`
`Qwen2_5_VLDecoderLayer` is Qwen2's, `modeling_qwen3_vl.py` Qwen3's, `modeling_mllama.py`'s self-attention
layers Llama's); others (qwen2, llama, mistral, gemma3_text) are text families themselves."""

_LLAMA_SIZES = {"vocab_size": 32_000, "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32}

TEXT_DEFAULTS = {
    "llama": _LLAMA_SIZES | {"intermediate_size": 11_008, "max_position_embeddings": 2048},
    "mistral": _LLAMA_SIZES
    | {"intermediate_size": 14_336, "num_key_value_heads": 8, "max_position_embeddings": 131_072},
    "gemma3_text": {"vocab_size": 262_208, "max_position_embeddings": 131_072, "head_dim": 256},
    "mllama_text_model": {"vocab_size": 128_256, "max_position_embeddings": 131_072},
}
"""Sizing keys published text_configs leave to their config class (`LlamaConfig`, `MistralConfig`,
`Gemma3TextConfig`, `MllamaTextConfig`): llava-1.5's `text_config` names only its vocabulary and context."""


def is_vlm(config: dict) -> bool:
    """Is this config a vision-language model memdoc knows (its `model_type` in `VLMS`)?"""
    return isinstance(config, dict) and isinstance(config.get("model_type"), str) and config["model_type"] in VLMS


def text_config_of(config: dict) -> dict:
    """The language model's config: `text_config` (or the top-level keys, Qwen2.5-VL), with the class defaults
    of `TEXT_DEFAULTS`, the model-wide `tie_word_embeddings` and a text family's model_type."""
    vlm = VLMS[config["model_type"]]
    nested = config.get("text_config")
    if nested is not None and not isinstance(nested, dict):
        raise ConfigError("text_config is not an object")
    text = dict(nested) if nested else {k: v for k, v in config.items() if k not in ("vision_config", "text_config")}
    text_type = str(text.get("model_type") or vlm.text_type) if nested else vlm.text_type
    text = TEXT_DEFAULTS.get(text_type, {}) | text
    tied = bool(config.get("tie_word_embeddings", vlm.tied))
    text["tie_word_embeddings"] = tied or (vlm.tie_from_text and bool(text.get("tie_word_embeddings")))
    text["model_type"] = TEXT_FAMILY_TYPES.get(text_type, text_type)
    if vlm.cross_attention:  # the cross-attention layers are counted as the vision part's
        text["num_hidden_layers"] = int(text.get("num_hidden_layers", 40)) - len(cross_layers(config, text))
    return text


def cross_layers(config: dict, text: dict) -> tuple[int, ...]:
    """The decoder's cross-attention layer indices (`text_config.cross_attention_layers`, else the class default)."""
    default = VLMS[config["model_type"]].cross_attention
    return tuple(int(i) for i in text.get("cross_attention_layers", default)) if default else ()


def vision_spec(config: dict, text: ModelSpec) -> VisionSpec:
    """The `VisionSpec` of a VLM config whose language model is `text`."""
    vlm = VLMS[config["model_type"]]
    vision = config.get("vision_config") or {}
    if not isinstance(vision, dict):
        raise ConfigError("vision_config is not an object")
    kind = tower_kind(vision, vlm.tower)
    try:
        tower = TOWERS[kind].count(vision)
        out = int(vision.get("out_hidden_size", text.hidden_size)) if TOWERS[kind].out_hidden else text.hidden_size
        projector, merge, width = vlm.projector.count(config, tower, out)
    except (TypeError, ValueError, KeyError, AttributeError, ZeroDivisionError) as exc:
        raise ConfigError(f"vision_config of a {config['model_type']} config is malformed ({exc})") from None
    if min(tower.layers, tower.hidden, tower.patch, out, merge) < 1:
        raise ConfigError(f"vision_config of a {config['model_type']} config has a size below 1")
    cross = cross_layers(config, text.config)
    return VisionSpec(
        kind=kind,
        layers=tower.layers,
        hidden_size=tower.hidden,
        num_heads=tower.heads,
        intermediate_size=tower.inter,
        patch_size=tower.patch,
        temporal_patch_size=tower.temporal,
        image_size=tower.image,
        merge=merge,
        global_layers=tower.global_layers,
        max_tiles=tower.max_tiles,
        projector_in=width,
        projector_out=out,
        cross_attention_layers=cross,
        image_token_id=config.get("image_token_id", config.get("image_token_index")),
        tokens_per_image=vlm.tokens_per_image(config) if vlm.tokens_per_image else None,
        encoder_params=tower.params,
        projector_params=projector,
        cross_attention_params=cross_attention_params(
            len(cross), text.hidden_size, text.head_dim, text.q_dim, text.kv_dim, text.intermediate_size
        ),
        config=config,
    )


def vlm_spec_from_config(config: dict, *, model_id: str, source: str = "catalog") -> ModelSpec:
    """A VLM config → `ModelSpec` of its language model, with `vision` set and every part in `params`."""
    vlm = VLMS[config["model_type"]]
    text = spec_from_config(text_config_of(config), model_id=model_id, source=source)
    if vlm.extra_embeddings:
        embedding = text.params.embedding + vlm.extra_embeddings * text.hidden_size
        text = dataclasses.replace(text, params=dataclasses.replace(text.params, embedding=embedding))
    vision = vision_spec(config, text)
    counts = text.params
    params = dataclasses.replace(
        counts,
        vision=vision.encoder_params,
        projector=vision.projector_params,
        cross_attention=vision.cross_attention_params,
        active=counts.active + vision.encoder_params + vision.projector_params + vision.cross_attention_params,
    )
    return dataclasses.replace(text, model_type=config["model_type"], params=params, vision=vision)


def model_spec(config: dict, *, model_id: str, source: str = "catalog") -> ModelSpec:
    """Any config → `ModelSpec`: a VLM's through `vlm_spec_from_config`, a text model's through `spec_from_config`."""
    if is_vlm(config):
        return vlm_spec_from_config(config, model_id=model_id, source=source)
    return spec_from_config(config, model_id=model_id, source=source)
