"""Exact parameter counts for architectures memdoc has no analytic layout for.

Builds the model with transformers on the meta device (no memory, no download; ~3 s including
the torch import), as accelerate's `estimate-memory` does, and splits the count into embedding,
head and the rest. Activation estimates for such models use the generic family coefficients.
"""

from __future__ import annotations

import difflib
import warnings

from memdoc.core.model.model_spec import ModelSpec, spec_from_config
from memdoc.core.model.params import ParamCounts
from memdoc.errors import ConfigError

MAX_META_LAYERS = 1024
"""Most decoder layers built on the meta device to count an unknown architecture (real models have < 200)."""


def meta_param_counts(config: dict) -> ParamCounts:
    """Count the parameters of `config` by building it on the meta device."""
    model_type = config.get("model_type")
    layers = next(
        (config[k] for k in ("num_hidden_layers", "n_layer", "num_layers") if isinstance(config.get(k), int)), 0
    )
    if layers > MAX_META_LAYERS:
        raise ConfigError(
            f"model_type {model_type!r} has no analytic layout in memdoc, and {layers:,} layers are too many "
            f"to count by building the model ({MAX_META_LAYERS:,} at most)"
        )
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    if model_type not in CONFIG_MAPPING_NAMES:
        close = difflib.get_close_matches(str(model_type), list(CONFIG_MAPPING_NAMES), n=3, cutoff=0.6)
        hint = (
            f"did you mean {', '.join(close)}?" if close else "see `memdoc models` for the architectures memdoc bills"
        )
        raise ConfigError(f"unknown model_type {model_type!r}: neither memdoc nor transformers knows it", hint=hint)
    try:
        with warnings.catch_warnings():  # transformers' deprecation chatter is not about the user's plan
            warnings.simplefilter("ignore", FutureWarning)
            hf_config = AutoConfig.for_model(**config)
            with torch.device("meta"):
                model = AutoModelForCausalLM.from_config(hf_config)
    except Exception as exc:  # transformers raises many types for configs it cannot build
        text = " ".join(str(exc).split())
        text = text if len(text) <= 200 else text[:199] + "…"
        raise ConfigError(
            f"transformers cannot build model_type {model_type!r}: {type(exc).__name__}: {text}"
        ) from None
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
