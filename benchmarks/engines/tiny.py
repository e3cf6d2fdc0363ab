"""The tiny models the engine runs train: a Llama and a Qwen3, built offline from a transformers config.

Both are small enough to run two ranks on two CPU cores in seconds, and keep the families' shapes:
grouped-query attention (4 query heads, 2 KV heads), a gated MLP, RMSNorm; Qwen3 adds q/k norms and
ties its embedding to the head (as Qwen3-0.6B does), the Llama keeps a separate head.
"""

from __future__ import annotations

MODELS = {
    "llama": {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 176,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 1000,
        "max_position_embeddings": 256,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    },
    "qwen3": {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "hidden_size": 64,
        "intermediate_size": 160,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "vocab_size": 1000,
        "max_position_embeddings": 256,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
    },
}
"""config.json of each tiny model (the keys memdoc's resolution and transformers both read)."""

SEQ_LEN = 32
MICRO_BATCH = 2


def build(name: str, dtype):
    """The model of `MODELS[name]` in `dtype`, weights from seed 0 (`AutoModelForCausalLM.from_config`)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = dict(MODELS[name])
    config = AutoConfig.for_model(cfg.pop("model_type"), **{k: v for k, v in cfg.items() if k != "architectures"})
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config, dtype=dtype)


def batch(rank: int):
    """One deterministic batch per rank: token ids (MICRO_BATCH, SEQ_LEN), labels = ids."""
    import torch

    gen = torch.Generator().manual_seed(100 + rank)
    ids = torch.randint(0, 1000, (MICRO_BATCH, SEQ_LEN), generator=gen)
    return ids, ids.clone()


MEMDOC_FLAGS = {"method": "full", "gpus": 2, "batch": MICRO_BATCH, "seq": SEQ_LEN}
"""The plan flags that match every run: full fine-tuning, 2 GPUs, the batch and sequence of `batch`."""
