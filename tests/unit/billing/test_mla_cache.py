"""MLA's KV cache is its latent (kv_lora_rank + qk_rope_head_dim per layer), as transformers caches it and vLLM
pages it — checked against transformers' own cache tensors of a tiny DeepSeek-V2 and DeepSeek-V2-Lite's published
config (vLLM: 31,104 B/token in bf16)."""

import pytest

from memdoc.core.billing.decode import kv_cache_bytes
from memdoc.core.billing.inference import InferencePlan, inference_bill
from memdoc.core.model.model_spec import spec_from_config
from memdoc.core.model.plan import TrainingPlan, parse_plan
from memdoc.resolve.models import resolve_model

TINY_V2 = {
    "model_type": "deepseek_v2",
    "hidden_size": 64,
    "intermediate_size": 96,
    "moe_intermediate_size": 32,
    "num_hidden_layers": 3,
    "first_k_dense_replace": 1,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "n_shared_experts": 1,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "kv_lora_rank": 24,
    "q_lora_rank": None,
    "qk_nope_head_dim": 16,
    "qk_rope_head_dim": 8,
    "v_head_dim": 12,
    "vocab_size": 128,
    "max_position_embeddings": 256,
    "rope_theta": 10000,
    "torch_dtype": "bfloat16",
}


def test_deepseek_v2_lite_caches_its_latent_31104_bytes_per_token():
    model = resolve_model("deepseek-ai/DeepSeek-V2-Lite")
    # (kv_lora_rank 512 + qk_rope_head_dim 64) × 2 bytes × 27 layers, vLLM's MLAAttentionSpec page per token
    assert kv_cache_bytes(model, batch=1, context=1, bytes_per_element=2) == (512 + 64) * 2 * 27 == 31_104
    p = InferencePlan(plan=parse_plan(precision="bf16", batch=1, seq=1))
    assert inference_bill(model, p, None).kv_cache == 31_104


@pytest.mark.slow
def test_the_bill_matches_transformers_own_cache_tensors_of_a_tiny_deepseek_v2():
    import torch
    from transformers import DeepseekV2Config, DeepseekV2ForCausalLM, DynamicCache

    config = DeepseekV2Config(**{k: v for k, v in TINY_V2.items() if k != "model_type"})
    torch.manual_seed(0)
    model = DeepseekV2ForCausalLM(config).to(torch.bfloat16).eval()
    batch, tokens = 2, 10
    cache = DynamicCache(config=config)
    with torch.inference_mode():
        model(torch.randint(0, 128, (batch, tokens)), cache=cache, use_cache=True)
    cached = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))
    spec = spec_from_config(TINY_V2, model_id="tiny-deepseek-v2")
    billed = kv_cache_bytes(spec, batch=batch, context=tokens, bytes_per_element=2)
    assert billed == cached == 3 * (24 + 8) * batch * tokens * 2
    plan = TrainingPlan(seq_len=tokens, micro_batch=batch)
    assert inference_bill(spec, InferencePlan(plan=plan), None).kv_cache == cached
