"""Shared helper of the HF examples: a catalog config shrunk to a tiny model (no download)."""

import json
from pathlib import Path

CATALOG = Path(__file__).resolve().parents[1] / "memdoc" / "data" / "catalog"

SHRINK = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 512,
    "max_window_layers": 2,
    "layer_types": None,
    "bos_token_id": 0,
    "eos_token_id": 1,
}


def tiny_config(model_id: str = "Qwen/Qwen2.5-0.5B", **overrides):
    """transformers config of `model_id` from the bundled catalog, shrunk to a few hundred K params."""
    from transformers import AutoConfig

    raw = json.loads((CATALOG / (model_id.replace("/", "--", 1) + ".json")).read_text())
    raw.update(SHRINK)
    raw.update(overrides)
    raw = {k: v for k, v in raw.items() if v is not None}
    model_type = raw.pop("model_type")
    for key in ("architectures", "transformers_version", "torch_dtype", "dtype"):
        raw.pop(key, None)
    config = AutoConfig.for_model(model_type, **raw)
    config._name_or_path = model_id + " (tiny)"
    return config


def tiny_model(model_id: str = "Qwen/Qwen2.5-0.5B", seed: int = 0, **overrides):
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(tiny_config(model_id, **overrides), attn_implementation="sdpa")


def random_batch(batch: int = 2, seq: int = 32, vocab: int = 512, seed: int = 0):
    import torch

    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (batch, seq), generator=g)
    return {"input_ids": ids, "labels": ids.clone()}
