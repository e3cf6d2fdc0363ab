"""The family registry checked against transformers and peft themselves, not against memdoc's own tables.

The tied-embedding default is the default of each model_type's config class; norm classes, norms per
layer, q/k norms and projection layouts are read off a one-layer model built on the meta device from
the config class's defaults; LoRA defaults off peft's per-model_type mapping.
"""

from __future__ import annotations

import pytest

from memdoc.core.model.families import FAMILIES, UNKNOWN, Layout, Mlp, Norm, QkvLayout, family_of
from memdoc.resolve.models import catalog_config, catalog_ids

MODEL_TYPES = sorted((model_type, family) for family in FAMILIES.values() for model_type in family.model_types)
IDS = [model_type for model_type, _ in MODEL_TYPES]


def test_every_model_type_has_one_family():
    assert len(IDS) == len(set(IDS))
    for model_type, family in MODEL_TYPES:
        assert family_of(model_type) is family
    assert family_of("no-such-model-type") is UNKNOWN and not UNKNOWN.has_layout


@pytest.mark.parametrize("model_type,family", MODEL_TYPES, ids=IDS)
def test_tied_default_is_the_config_class_default(model_type, family):
    from transformers import AutoConfig

    assert family.tied_default is bool(AutoConfig.for_model(model_type).tie_word_embeddings)


@pytest.mark.parametrize("model_type,family", MODEL_TYPES, ids=IDS)
def test_lora_targets_are_peft_defaults(model_type, family):
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as PEFT

    if model_type not in PEFT:
        pytest.skip(f"peft has no default target_modules for {model_type}")
    # phi: peft also adapts the MLP (fc1, fc2); memdoc's default is the attention subset
    assert set(family.lora_targets) <= set(PEFT[model_type])


def test_required_keys_are_in_every_catalog_config():
    for model_id in sorted(set(catalog_ids().values())):
        config = catalog_config(model_id)
        missing = [k for k in family_of(config["model_type"]).required_keys if config.get(k) is None]
        assert not missing, (model_id, missing)


def _first_layer(model_type: str):
    """Decoder layer 0 of a one-layer model of `model_type`'s default config, on the meta device."""
    import torch
    from transformers import AutoConfig, AutoModel

    config = AutoConfig.for_model(model_type, num_hidden_layers=1)
    with torch.device("meta"):
        model = AutoModel.from_config(config)
    return model, next(m for name, m in model.named_modules() if name.endswith(("layers.0", "h.0", "layer.0")))


@pytest.mark.parametrize("model_type,family", MODEL_TYPES, ids=IDS)
def test_norms_and_projections_match_a_meta_build(model_type, family):
    import torch

    model, layer = _first_layer(model_type)
    norms = [
        m
        for m in model.modules()
        if type(m).__name__.endswith(("Norm", "LayerNorm")) or isinstance(m, torch.nn.LayerNorm)
    ]
    if family.norm is Norm.LAYER:
        assert norms and all(isinstance(m, torch.nn.LayerNorm) for m in norms)
    else:
        names = {type(m).__name__ for m in norms}
        assert all(n.endswith("RMSNorm") for n in names), names
        assert all(n.startswith("Gemma") for n in names) is (family.norm is Norm.GEMMA_RMS), names
    if family.layout is not Layout.LLAMA_LIKE:
        return
    direct = [m for m in layer.children() if type(m).__name__.endswith("Norm")]
    assert len(direct) == family.norms_per_layer
    attention, mlp = layer.self_attn, layer.mlp
    assert hasattr(attention, "q_norm") is family.qk_norm
    assert hasattr(attention, "qkv_proj") is (family.attention is QkvLayout.FUSED)
    assert hasattr(attention, "kv_b_proj") is (family.attention is QkvLayout.MLA)
    assert hasattr(mlp, "gate_up_proj") is (family.mlp is Mlp.FUSED_GATE_UP)
    if family.attention is QkvLayout.SEPARATE and not getattr(model.config, "attention_bias", False):
        assert (attention.q_proj.bias is not None) is family.qkv_bias
        assert attention.o_proj.bias is None
    experts = ("num_local_experts", "num_experts", "n_routed_experts")
    assert any(getattr(model.config, key, 0) for key in experts) is (family.moe is not None)
