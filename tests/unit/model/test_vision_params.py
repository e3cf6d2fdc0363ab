"""Vision-language models: every part's exact parameter count against transformers' own meta-device build, and
every catalog VLM's total against its published figure.

The published figures are independent of memdoc: the Hub's safetensors metadata (the "Model size" a model page
shows, rounded as the page shows it) or the exact count its model card states.
"""

from __future__ import annotations

import collections

import pytest

from memdoc.core.model.vision.registry import VLMS
from memdoc.core.model.vision.vlm import TEXT_DEFAULTS, is_vlm, text_config_of, vlm_spec_from_config
from memdoc.resolve.models import catalog_config, catalog_ids, resolve_model

VLM_IDS = sorted(i for i in set(catalog_ids().values()) if is_vlm(catalog_config(i)))

# (published total, digits after the decimal point of the billions the source gives, source)
PUBLISHED = {
    "Qwen/Qwen2.5-VL-3B-Instruct": (3.75e9, 2, "Hub model page, safetensors: 3.75B params"),
    "Qwen/Qwen2.5-VL-7B-Instruct": (8.29e9, 2, "Hub model page, safetensors: 8.29B params"),
    "Qwen/Qwen3-VL-8B-Instruct": (8.77e9, 2, "Hub model page, safetensors: 8.77B params"),
    "meta-llama/Llama-3.2-11B-Vision-Instruct": (10_670_220_835, 9, "model card: 10,670,220,835 parameters"),
    "google/gemma-3-4b-it": (4.3e9, 1, "Hub model page, safetensors: 4.3B params"),
    "google/gemma-3-12b-it": (12.2e9, 1, "Hub model page, safetensors: 12.2B params"),
    "google/gemma-3-27b-it": (27.4e9, 1, "Hub model page, safetensors: 27.4B params"),
    "llava-hf/llava-onevision-qwen2-7b-ov-hf": (8.03e9, 2, "Hub model page, safetensors: 8.03B params"),
    "HuggingFaceM4/Idefics3-8B-Llama3": (8.46e9, 2, "Hub model page, safetensors: 8.46B params"),
    "HuggingFaceTB/SmolVLM-Instruct": (2.25e9, 2, "Hub model page, safetensors: 2.25B params"),
    "mistral-community/pixtral-12b": (12.7e9, 1, "Hub model page, safetensors: 12.7B params"),
    "mistralai/Mistral-Small-3.1-24B-Instruct-2503": (24.0e9, 1, "Hub model page, safetensors: 24B params"),
    "llava-hf/llava-1.5-7b-hf": (7.06e9, 2, "Hub model page, safetensors: 7.06B params"),
}


def test_every_family_of_the_issue_is_in_the_catalog():
    assert set(PUBLISHED) <= set(VLM_IDS)
    assert {catalog_config(i)["model_type"] for i in VLM_IDS} == set(VLMS)


@pytest.mark.parametrize("model_id", sorted(PUBLISHED))
def test_total_is_the_published_figure(model_id):
    figure, digits, _source = PUBLISHED[model_id]
    total = vlm_spec_from_config(catalog_config(model_id), model_id=model_id).params.total
    if digits == 9:
        assert total == figure
    else:
        assert round(total / 1e9, digits) == round(figure / 1e9, digits)


def _part(name: str, model_type: str) -> str:
    """The part a parameter of transformers' VLM belongs to, by its module path."""
    if ".merger." in name or ".deepstack_merger_list." in name or "multi_modal_projector" in name:
        return "projector"
    if ".connector." in name or name == "model.image_newline":
        return "projector"
    if name.startswith(("model.visual.", "model.vision_tower.", "model.vision_model.")):
        return "vision"
    if model_type == "mllama" and name.startswith("model.language_model.layers."):
        return "cross" if ".cross_attn" in name else "language"
    return "language"


def _meta_parts(config: dict) -> dict[str, int]:
    import torch
    from transformers import AutoConfig, AutoModelForImageTextToText

    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(AutoConfig.for_model(**config))
    parts: collections.Counter = collections.Counter()
    cross_layers = set(config.get("text_config", {}).get("cross_attention_layers", []))
    for name, param in model.named_parameters():
        part = _part(name, config["model_type"])
        if part == "language" and config["model_type"] == "mllama" and name.startswith("model.language_model.layers."):
            part = "cross" if int(name.split(".")[3]) in cross_layers else "language"
        parts[part] += param.numel()
    return dict(parts)


@pytest.mark.slow
@pytest.mark.parametrize("model_id", VLM_IDS)
def test_every_part_equals_the_meta_build(model_id):
    config = catalog_config(model_id)
    params = vlm_spec_from_config(config, model_id=model_id).params
    meta = _meta_parts(config)
    assert params.vision == meta["vision"]
    assert params.projector == meta["projector"]
    assert params.cross_attention == meta.get("cross", 0)
    assert params.language - params.cross_attention == meta["language"]
    assert params.total == sum(meta.values())


@pytest.mark.parametrize("text_type", sorted(TEXT_DEFAULTS))
def test_text_defaults_are_the_config_class_defaults(text_type):
    from transformers import AutoConfig

    defaults = AutoConfig.for_model(text_type)
    for key, value in TEXT_DEFAULTS[text_type].items():
        assert getattr(defaults, key) == value, key


@pytest.mark.parametrize("vlm_type", sorted(VLMS))
def test_tied_default_is_the_config_class_default(vlm_type):
    from transformers import AutoConfig

    # MllamaConfig has no such attribute: `PreTrainedModel.get_expanded_tied_weights_keys` then reads False.
    assert VLMS[vlm_type].tied is bool(getattr(AutoConfig.for_model(vlm_type), "tie_word_embeddings", False))


def test_language_model_is_read_from_text_config():
    qwen = text_config_of(catalog_config("Qwen/Qwen2.5-VL-3B-Instruct"))  # flat: text keys at the top level
    assert qwen["model_type"] == "qwen2" and qwen["hidden_size"] == 2048 and qwen["tie_word_embeddings"]
    assert "vision_config" not in qwen
    gemma = text_config_of(catalog_config("google/gemma-3-4b-it"))
    assert gemma["model_type"] == "gemma3_text" and gemma["vocab_size"] == 262_208 and gemma["tie_word_embeddings"]
    mllama = text_config_of(catalog_config("meta-llama/Llama-3.2-11B-Vision-Instruct"))
    assert mllama["num_hidden_layers"] == 40 - 8  # the self-attention layers; the 8 cross-attention ones apart


def test_vision_spec_shapes():
    qwen = resolve_model("Qwen/Qwen2.5-VL-7B-Instruct").vision
    assert (qwen.kind, qwen.patch_size, qwen.temporal_patch_size, qwen.merge) == ("qwen2_5_vl", 14, 2, 2)
    assert (qwen.layers, qwen.hidden_size, qwen.projector_in, qwen.projector_out) == (32, 1280, 5120, 3584)
    assert qwen.image_token_id == 151655 and qwen.image_size is None
    gemma = resolve_model("google/gemma-3-4b-it").vision
    assert (gemma.kind, gemma.image_size, gemma.merge, gemma.tokens_per_image) == ("siglip", 896, 4, 256)
    mllama = resolve_model("meta-llama/Llama-3.2-11B-Vision-Instruct").vision
    assert mllama.cross_attention_layers == (3, 8, 13, 18, 23, 28, 33, 38) and mllama.global_layers == 8
    assert mllama.max_tiles == 4 and mllama.projector_in == 7680
    assert resolve_model("HuggingFaceTB/SmolVLM-Instruct").vision.merge == 3


def test_text_models_have_no_vision():
    spec = resolve_model("Qwen/Qwen2.5-7B")
    assert spec.vision is None and spec.params.total == spec.params.language == 7_615_616_512


@pytest.mark.parametrize(
    "vision", [{"hidden_size": "wide"}, {"depth": 0}, "not an object", {"model_type": "no_such_tower"}]
)
def test_malformed_vision_config_is_a_config_error(vision):
    from memdoc.errors import ConfigError

    config = catalog_config("Qwen/Qwen2.5-VL-3B-Instruct") | {"vision_config": vision}
    with pytest.raises(ConfigError):
        vlm_spec_from_config(config, model_id="m")
