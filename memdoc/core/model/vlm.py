"""Vision-language models: the `ModelSpec` of a VLM config, its language model read from `text_config`.

A VLM's `config.json` nests `vision_config` and `text_config` (Qwen2.5-VL keeps the text keys at the top
level). The language model is read with `spec_from_config` on the text config, its `model_type` mapped
onto memdoc's text family (`Vlm.text_family`); the vision tower and projector come from
`memdoc.core.model.vision`; `ModelSpec.vision` holds them and `ModelSpec.params` counts every part.
The per-family facts (default text model, tied embeddings, projector shape) are the config classes' and
modeling files' of transformers 5.24, named on each `Vlm` entry.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from memdoc.core.model.model_spec import ModelSpec, spec_from_config
from memdoc.core.model.vision import Tower, VisionSpec, count_tower, tower_kind
from memdoc.errors import ConfigError


def _linear(i: int, o: int, bias: bool = True) -> int:
    return i * o + (o if bias else 0)


def _feature_layers(config: dict, default: int | list[int]) -> int:
    layer = config.get("vision_feature_layer", default)
    return len(layer) if isinstance(layer, list) else 1


def _qwen2_5_merger(config: dict, t: Tower, out: int) -> tuple[int, int, int]:
    """`modeling_qwen2_5_vl.py` `Qwen2_5_VLPatchMerger`: RMSNorm, then Linear(h·m², h·m²) → GELU → Linear(h·m², out)."""
    m = int(config["vision_config"].get("spatial_merge_size", 2))
    wide = t.hidden * m * m
    return t.hidden + _linear(wide, wide) + _linear(wide, out), m, wide


def _qwen3_mergers(config: dict, t: Tower, out: int) -> tuple[int, int, int]:
    """`modeling_qwen3_vl.py` `Qwen3VLVisionPatchMerger`: the merger (LayerNorm over h) plus one DeepStack merger
    per `deepstack_visual_indexes` entry (LayerNorm over h·m²), each Linear(h·m², h·m²) → GELU → Linear(h·m², out)."""
    vision = config["vision_config"]
    m = int(vision.get("spatial_merge_size", 2))
    wide = t.hidden * m * m
    mlp = _linear(wide, wide) + _linear(wide, out)
    deepstack = len(vision.get("deepstack_visual_indexes", [8, 16, 24]))
    return 2 * t.hidden + mlp + deepstack * (2 * wide + mlp), m, wide


def _gemma3_projector(config: dict, t: Tower, out: int) -> tuple[int, int, int]:
    """`modeling_gemma3.py` `Gemma3MultiModalProjector`: a (vision h × text h) weight and an RMSNorm over vision h;
    an average pool of (patches per side / √mm_tokens_per_image) per side before it."""
    tokens = int(config.get("mm_tokens_per_image", 256))
    pool = (t.image // t.patch) // round(tokens**0.5) if t.image else 1
    return t.hidden * out + t.hidden, pool, t.hidden


def _llava_projector(config: dict, t: Tower, out: int) -> tuple[int, int, int]:
    """`modeling_llava.py` `LlavaMultiModalProjector`: Linear(h × feature layers, out) → GELU → Linear(out, out),
    biased unless `multimodal_projector_bias` is false; LLaVA-OneVision adds its `image_newline` vector (out)."""
    onevision = config.get("model_type") == "llava_onevision"
    width = t.hidden * _feature_layers(config, -1 if onevision else -2)
    bias = bool(config.get("multimodal_projector_bias", True))
    return _linear(width, out, bias) + _linear(out, out, bias) + (out if onevision else 0), 1, width


def _idefics3_connector(config: dict, t: Tower, out: int) -> tuple[int, int, int]:
    """`modeling_idefics3.py` `Idefics3Connector`: pixel shuffle by `scale_factor`, Linear(h·s², out) without bias."""
    s = int(config.get("scale_factor", 2))
    return t.hidden * s * s * out, s, t.hidden * s * s


def _mistral3_projector(config: dict, t: Tower, out: int) -> tuple[int, int, int]:
    """`modeling_mistral3.py` `Mistral3MultiModalProjector`: RMSNorm, `Mistral3PatchMerger` (Linear(h·m², h), no bias),
    Linear(h × feature layers, out) → GELU → Linear(out, out), biased when `multimodal_projector_bias` (default off)."""
    m = int(config.get("spatial_merge_size", 2))
    width = t.hidden * _feature_layers(config, -1)
    bias = bool(config.get("multimodal_projector_bias", False))
    return t.hidden + t.hidden * m * m * t.hidden + _linear(width, out, bias) + _linear(out, out, bias), m, width


def _mllama_projector(config: dict, t: Tower, out: int) -> tuple[int, int, int]:
    """`modeling_mllama.py` `MllamaModel.multi_modal_projector`: Linear(vision_output_dim, out) with bias."""
    width = int(config.get("vision_config", {}).get("vision_output_dim", 7680))
    return _linear(width, out), 1, width


Projector = Callable[[dict, Tower, int], tuple[int, int, int]]


@dataclass(frozen=True)
class Vlm:
    """One VLM architecture (a VLM `model_type`): how its config nests, what its parts are."""

    tower: str
    """The vision tower when `vision_config` names no model_type (the config class's default)."""
    text_type: str
    """The text model_type when `text_config` names none (the config class's default)."""
    projector: Projector
    """(projector parameters, merge factor, projector input width) from the config, tower and text hidden size."""
    tied: bool = False
    """The config class's `tie_word_embeddings` default."""
    tie_from_text: bool = False
    """A tied `text_config` ties the whole model (the config class forwards it: Qwen2.5-VL, LLaVA)."""


VLMS: dict[str, Vlm] = {
    "qwen2_5_vl": Vlm("qwen2_5_vl", "qwen2_5_vl_text", _qwen2_5_merger, tie_from_text=True),
    "qwen3_vl": Vlm("qwen3_vl", "qwen3_vl_text", _qwen3_mergers),
    "gemma3": Vlm("siglip_vision_model", "gemma3_text", _gemma3_projector, tied=True),
    "llava_onevision": Vlm("siglip_vision_model", "qwen2", _llava_projector, tie_from_text=True),
    "llava": Vlm("clip_vision_model", "llama", _llava_projector, tie_from_text=True),
    "idefics3": Vlm("idefics3", "llama", _idefics3_connector),
    "mistral3": Vlm("pixtral", "mistral", _mistral3_projector, tied=True),
    "mllama": Vlm("mllama_vision_model", "mllama_text_model", _mllama_projector),
}
"""The VLM model_types memdoc counts, with their config classes' defaults (`configuration_<type>.py`)."""

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
    if text_type == "mllama_text_model":  # the cross-attention layers are counted as the vision part's
        text["num_hidden_layers"] = int(text.get("num_hidden_layers", 40)) - len(_cross_layers(text))
    return text


def _cross_layers(text: dict) -> tuple[int, ...]:
    return tuple(int(i) for i in text.get("cross_attention_layers", [3, 8, 13, 18, 23, 28, 33, 38]))


def _cross_attention_params(text: dict, spec: ModelSpec) -> int:
    """`modeling_mllama.py` `MllamaCrossAttentionDecoderLayer`: q/k/v/o without bias, q/k RMSNorms over head_dim,
    two RMSNorms, two gate scalars and a gated MLP, per cross-attention layer."""
    h, d = spec.hidden_size, spec.head_dim
    layer = 2 * h * spec.q_dim + 2 * h * spec.kv_dim + 2 * d + 2 * h + 2 + 3 * h * spec.intermediate_size
    return len(_cross_layers(text)) * layer


def vision_spec(config: dict, text: ModelSpec) -> VisionSpec:
    """The `VisionSpec` of a VLM config whose language model is `text`."""
    vlm = VLMS[config["model_type"]]
    vision = config.get("vision_config") or {}
    if not isinstance(vision, dict):
        raise ConfigError("vision_config is not an object")
    kind = tower_kind(vision, vlm.tower)
    try:
        tower = count_tower(vision, kind)
        out = int(vision.get("out_hidden_size", text.hidden_size)) if kind.startswith("qwen") else text.hidden_size
        projector, merge, width = vlm.projector(config, tower, out)
    except (TypeError, ValueError, KeyError, AttributeError, ZeroDivisionError) as exc:
        raise ConfigError(f"vision_config of a {config['model_type']} config is malformed ({exc})") from None
    if min(tower.layers, tower.hidden, tower.patch, out, merge) < 1:
        raise ConfigError(f"vision_config of a {config['model_type']} config has a size below 1")
    cross = _cross_layers(text.config) if kind == "mllama" else ()
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
        global_layers=int(vision.get("num_global_layers", 8)) if kind == "mllama" else 0,
        max_tiles=int(vision.get("max_num_tiles", 4)) if kind == "mllama" else 1,
        projector_in=width,
        projector_out=out,
        cross_attention_layers=cross,
        image_token_id=config.get("image_token_id", config.get("image_token_index")),
        tokens_per_image=int(config.get("mm_tokens_per_image", 256)) if config["model_type"] == "gemma3" else None,
        encoder_params=tower.params,
        projector_params=projector,
        cross_attention_params=_cross_attention_params(text.config, text) if cross else 0,
        config=config,
    )


def vlm_spec_from_config(config: dict, *, model_id: str, source: str = "catalog") -> ModelSpec:
    """A VLM config → `ModelSpec` of its language model, with `vision` set and every part in `params`."""
    text_config = text_config_of(config)
    text = spec_from_config(text_config, model_id=model_id, source=source)
    if config["model_type"] == "mllama":  # `MllamaTextModel.embed_tokens` has vocab_size + 8 rows
        text = dataclasses.replace(
            text, params=dataclasses.replace(text.params, embedding=text.params.embedding + 8 * text.hidden_size)
        )
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
