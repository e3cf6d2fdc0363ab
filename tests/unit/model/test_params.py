"""Exact parameter counts: analytic (no torch) vs transformers on the meta device, every catalog model."""

import pytest

from memdoc.core.model.model_spec import spec_from_config
from memdoc.core.model.vision.vlm import is_vlm
from memdoc.resolve.models import catalog_config, catalog_ids

# Text models; the vision-language models are counted per part in test_vision_params.py.
CATALOG = sorted(i for i in set(catalog_ids().values()) if not is_vlm(catalog_config(i)))

# Published exact counts (../shared/hf-configs/SOURCES.md and the design brief), independent of memdoc.
PUBLISHED = {
    "meta-llama/Llama-2-7b-hf": 6_738_415_616,
    "meta-llama/Meta-Llama-3-8B": 8_030_261_248,
    "mistralai/Mistral-7B-v0.1": 7_241_732_096,
    "Qwen/Qwen2.5-7B": 7_615_616_512,
    "mistralai/Mixtral-8x7B-v0.1": 46_702_792_704,
    "openai-community/gpt2": 124_439_808,
    "Qwen/Qwen2-57B-A14B": 57_408_658_944,
    "Qwen/Qwen3-30B-A3B": 30_532_122_624,
    "google/gemma-2-9b": 9_241_705_984,
    "microsoft/phi-2": 2_779_683_840,
    "google-bert/bert-large-uncased": 335_174_458,
    "meta-llama/Llama-2-70b-hf": 68_976_648_192,
}


def test_catalog_is_large_enough():
    assert len(CATALOG) >= 35


@pytest.mark.parametrize("model_id,expected", sorted(PUBLISHED.items()))
def test_published_counts(model_id, expected):
    assert spec_from_config(catalog_config(model_id), model_id=model_id).params.total == expected


def _meta_count(config: dict) -> int:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM

    hf_config = AutoConfig.for_model(**config)
    cls = AutoModelForMaskedLM if config["model_type"] == "bert" else AutoModelForCausalLM
    with torch.device("meta"):
        model = cls.from_config(hf_config)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("model_id", CATALOG)
def test_analytic_count_equals_meta_device(model_id):
    config = catalog_config(model_id)
    spec = spec_from_config(config, model_id=model_id)
    assert spec.params.total == _meta_count(config)


def test_moe_active_params_are_top_k():
    spec = spec_from_config(catalog_config("mistralai/Mixtral-8x7B-v0.1"), model_id="m")
    # Mixtral 8x7B: ~12.9B active of 46.7B (2 of 8 experts per token), as Mistral AI states.
    assert 12.8e9 < spec.params.active < 13.0e9
    dense = spec_from_config(catalog_config("meta-llama/Llama-2-7b-hf"), model_id="d")
    assert dense.params.active == dense.params.total


def test_tied_embeddings_counted_once():
    spec = spec_from_config(catalog_config("meta-llama/Llama-3.2-1B"), model_id="m")
    assert spec.tie_embeddings and spec.params.head == 0
