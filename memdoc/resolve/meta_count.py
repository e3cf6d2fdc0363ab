"""Exact parameter counts for architectures memdoc has no analytic layout for.

Builds the model with transformers on the meta device (no memory, no download; ~3 s including
the torch import), as accelerate's `estimate-memory` does, and splits the count into embedding,
head and the rest. Activation estimates for such models use the generic family coefficients.
"""

from __future__ import annotations

from memdoc.core.model.model_spec import ModelSpec, spec_from_config
from memdoc.core.model.params import ParamCounts
from memdoc.errors import ConfigError


def meta_param_counts(config: dict) -> ParamCounts:
    """Count the parameters of `config` by building it on the meta device."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        hf_config = AutoConfig.for_model(**config)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(hf_config)
    except Exception as exc:  # transformers raises many types for configs it cannot build
        raise ConfigError(f"transformers cannot build model_type {config.get('model_type')!r}: {exc}") from None
    total = sum(p.numel() for p in model.parameters())
    embedding = model.get_input_embeddings().weight.numel()
    output = model.get_output_embeddings()
    head = 0
    if output is not None and output.weight is not model.get_input_embeddings().weight:
        head = output.weight.numel()
    norms = sum(p.numel() for n, p in model.named_parameters() if "norm" in n.lower())
    rest = total - embedding - head - norms
    return ParamCounts(embedding=embedding, attention=0, mlp=rest, norms=norms, head=head, active=total)


def spec_with_meta_count(config: dict, *, model_id: str, source: str) -> ModelSpec:
    return spec_from_config(config, model_id=model_id, source=source, params=meta_param_counts(config))
