"""`--checkpointing sac-op` (torchtitan's op-level selective checkpointing) against torch's own SAC cache.

torchtitan's policy (`_apply_ac_to_transformer_block`, `selective_ac_option = "op"`, the `_custom_policy` of its
2024 releases; torchtitan at 01db32e moved it to `torchtitan/distributed/activation_checkpoint.py` with named save
lists): MUST_SAVE the outputs of `aten.mm` and the SDPA kernels, except every second `aten.mm` of a layer
(`meta["forward_mm_count"] % 2 == 0`, a fresh `meta` per `selective_checkpointing_context_fn` call);
PREFER_RECOMPUTE the rest. The policy is written out here from that source, independently of
`memdoc/probe/build.py`, and a real CPU step of a small bf16 Llama runs under it: torch's
`_CachingTorchDispatchMode` keeps each saved output in its `storage`, which is read back, per layer, against the
bill. On CPU the SDPA op is `_scaled_dot_product_flash_attention_for_cpu` (CUDA: `_scaled_dot_product_flash_attention`,
the same outputs: out and an fp32 logsumexp).
"""

import pytest

from memdoc.core.billing.activations.sac_op import saved_matmuls
from memdoc.core.billing.activations.step import estimate_activations
from memdoc.core.model.model_spec import spec_from_config
from memdoc.core.model.plan import parse_plan
from memdoc.core.model.plan_checks import check_requested_plan
from memdoc.errors import PlanError

SMALL = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "vocab_size": 128,
    "hidden_size": 64,
    "intermediate_size": 160,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
    "tie_word_embeddings": False,
}


def _torchtitan_saved_bytes(batch: int, seq: int) -> list[int]:
    """Bytes torch's SAC cache holds per checkpointed layer, one real CPU step under torchtitan's op policy."""
    import torch
    from torch.utils._pytree import tree_leaves
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts
    from transformers import LlamaConfig, LlamaForCausalLM

    aten = torch.ops.aten
    save_list = {aten.mm.default, aten._scaled_dot_product_flash_attention_for_cpu.default}
    modes = []

    def context_fn():
        meta = {"forward_mm_count": 0, "recompute_mm_count": 0}

        def policy(ctx, func, *args, **kwargs):
            key = f"{'recompute' if ctx.is_recompute else 'forward'}_mm_count"
            if func == aten.mm.default:
                meta[key] += 1
            to_save = func in save_list and not (func == aten.mm.default and meta[key] % 2 == 0)
            return CheckpointPolicy.MUST_SAVE if to_save else CheckpointPolicy.PREFER_RECOMPUTE

        forward, recompute = create_selective_checkpoint_contexts(policy)
        modes.append(forward)
        return forward, recompute

    torch.manual_seed(0)
    config = LlamaConfig(**{k: v for k, v in SMALL.items() if k not in ("model_type", "architectures")})
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.config._attn_implementation = "sdpa"
    model.gradient_checkpointing_enable(
        gradient_checkpointing_kwargs={"use_reentrant": False, "context_fn": context_fn}
    )
    model.train()
    ids = torch.randint(0, SMALL["vocab_size"], (batch, seq))
    per_layer = []
    out = model(input_ids=ids, labels=ids)
    for mode in modes:  # read before backward consumes the cache: {op key: {call index: outputs or _RECOMPUTE}}
        leaves = [leaf for calls in mode.storage.values() for entry in calls.values() for leaf in tree_leaves(entry)]
        tensors = [getattr(leaf, "val", None) for leaf in leaves]  # a saved output: `_VersionWrapper(tensor)`
        per_layer.append(sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor)))
    out.loss.backward()
    return per_layer


def test_llama_layer_saves_q_v_gate_down():
    spec = spec_from_config(SMALL, model_id="small-llama")
    saved, recomputed = saved_matmuls(spec.layouts[0].linears)
    assert [l.name for l in saved] == ["q_proj", "v_proj", "gate_proj", "down_proj"]
    assert [l.name for l in recomputed] == ["k_proj", "o_proj", "up_proj"]


@pytest.mark.slow
@pytest.mark.parametrize(("batch", "seq"), [(1, 32), (2, 48)])
def test_saved_bytes_are_what_torch_keeps_under_torchtitans_policy(batch, seq):
    cached = _torchtitan_saved_bytes(batch, seq)
    assert len(cached) == SMALL["num_hidden_layers"] and all(cached)
    spec = spec_from_config(SMALL, model_id="small-llama")
    plan = parse_plan(batch=batch, seq=seq, checkpointing="sac-op")
    layer_input = batch * seq * SMALL["hidden_size"] * 2  # bf16: what the checkpoint itself keeps
    assert estimate_activations(spec, plan).layers_saved == sum(cached) + len(cached) * layer_input


def test_sac_op_keeps_less_than_hf_selective_and_more_than_full():
    spec = spec_from_config(SMALL, model_id="small-llama")
    saved = {
        mode: estimate_activations(spec, parse_plan(seq=64, checkpointing=mode)).layers_saved
        for mode in ("full", "sac-op", "selective")
    }
    assert saved["full"] < saved["sac-op"] < saved["selective"]


def test_sac_op_needs_full_fine_tuning():
    with pytest.raises(PlanError, match="torchtitan"):
        check_requested_plan(parse_plan(method="lora", checkpointing="sac-op"))
