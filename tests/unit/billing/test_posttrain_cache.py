"""GRPO's generation cache against transformers' own `DynamicCache` after a real tiny `generate` on the CPU."""

import pytest

from memdoc.core.billing.posttrain.generation import kv_cache
from memdoc.core.model.plan import parse_plan
from memdoc.resolve.meta_count import spec_with_meta_count

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 96,
    "max_position_embeddings": 128,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


@pytest.mark.slow
def test_kv_cache_is_transformers_dynamic_cache():
    """After `generate`, the cache holds prompt + completion − 1 tokens per row (the last token is never fed
    back); the bill counts prompt + completion, one token more per row."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = {k: v for k, v in CONFIG.items() if k not in ("architectures", "torch_dtype")}
    model = LlamaForCausalLM(LlamaConfig(**config)).to(torch.bfloat16).eval()
    rows, prompt, completion = 4, 6, 5
    ids = torch.randint(1, 96, (rows, prompt))
    out = model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=completion,
        min_new_tokens=completion,
        do_sample=False,
        return_dict_in_generate=True,
        pad_token_id=0,
    )
    cache = out.past_key_values
    held = sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)
    spec = spec_with_meta_count(CONFIG, model_id="tiny-llama", source="test")
    plan = parse_plan(task="grpo", micro_batch=rows, seq_len=prompt, completion_len=completion, num_generations=2)
    per_token_row = 2 * 3 * 2 * 16 * 2  # K and V × layers × kv heads × head_dim × bf16
    assert held == per_token_row * rows * (prompt + completion - 1)
    assert kv_cache(spec, plan) == held + per_token_row * rows
