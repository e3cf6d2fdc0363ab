"""The activation model against autograd itself: a census of the tensors a real CPU forward saves.

For each case the real transformers model is built twice (2 and 3 decoder layers, bf16, random
weights, no download) and run forward with `torch.autograd.graph.saved_tensors_hooks`; every
distinct storage saved for backward that is not a parameter is counted once. The difference
between the two runs is what one decoder layer saves — an independent truth for
`memdoc.core.billing.activations.layer_activations`, which never sees torch.
"""

import dataclasses
import json

import pytest
from conftest import CATALOG, saved_storages

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from memdoc.core.billing.activations import layer_activations  # noqa: E402
from memdoc.core.model.model_spec import spec_from_config  # noqa: E402
from memdoc.core.model.plan import parse_plan  # noqa: E402

SEQ = 128
VOCAB = 1024
"""The census models' vocabulary: a decoder layer saves nothing vocabulary-sized (the embedding's and the head's
tensors are the same in the 2- and 3-layer runs and cancel), while a 256k-token embedding takes seconds to build."""


def _beyond(ids) -> bool:
    return any(i >= VOCAB for i in (ids if isinstance(ids, list) else [ids or 0]))


def _small_vocab(config: dict) -> dict:
    """`config` with `VOCAB` tokens; special token ids beyond it moved to 0."""
    ids = {key: 0 for key in ("pad_token_id", "bos_token_id", "eos_token_id") if _beyond(config.get(key))}
    return dict(config, vocab_size=VOCAB, **ids)


def saved_bytes(
    config: dict,
    layers: int,
    *,
    attention: str,
    lora_targets: list[str] | None,
    dropout: float = 0.05,
    dtype: str = "bfloat16",
) -> int:
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.initialization import no_init_weights

    hf_config = AutoConfig.for_model(**dict(_small_vocab(config), num_hidden_layers=layers))
    hf_config._attn_implementation = attention
    with no_init_weights():
        model = AutoModelForCausalLM.from_config(hf_config).to(getattr(torch, dtype))
    if lora_targets:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=16, target_modules=lora_targets, lora_dropout=dropout))
    model.train()
    torch.manual_seed(0)
    ids = torch.randint(0, 100, (1, SEQ))
    with saved_storages(model) as seen:
        model(input_ids=ids, labels=ids)
    return sum(seen.values())


# MoE layers at full size would need gigabytes of RAM per layer: the same architectures, shrunk.
SMALL_MOE = {
    "Qwen--Qwen3-30B-A3B": {
        "hidden_size": 256,
        "moe_intermediate_size": 128,
        "num_experts": 16,
        "num_experts_per_tok": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "vocab_size": 1000,
    },
    "mistralai--Mixtral-8x7B-v0.1": {
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 1000,
    },
    "Qwen--Qwen2-57B-A14B": {
        "hidden_size": 256,
        "moe_intermediate_size": 128,
        "shared_expert_intermediate_size": 384,
        "num_experts": 16,
        "num_experts_per_tok": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 1000,
    },
}

CASES = [
    ("meta-llama--Llama-3.2-1B", "full", "sdpa", None),
    ("meta-llama--Llama-3.2-1B", "lora", "sdpa", ["q_proj", "v_proj"]),
    ("meta-llama--Llama-3.2-1B", "full", "eager", None),
    ("Qwen--Qwen2.5-0.5B", "full", "sdpa", None),
    (
        "Qwen--Qwen2.5-0.5B",
        "lora",
        "sdpa",
        ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    ),
    ("Qwen--Qwen3-0.6B", "full", "sdpa", None),
    ("google--gemma-2b", "lora", "sdpa", ["q_proj", "v_proj"]),
    ("google--gemma-2-2b", "full", "eager", None),
    ("microsoft--Phi-3-mini-4k-instruct", "full", "sdpa", None),
    ("microsoft--Phi-3-mini-4k-instruct", "lora", "sdpa", ["qkv_proj"]),
    ("EleutherAI--pythia-1b", "full", "sdpa", None),
    ("EleutherAI--pythia-1b", "lora", "sdpa", ["query_key_value"]),
    ("microsoft--phi-2", "full", "sdpa", None),
    ("microsoft--phi-2", "lora", "sdpa", ["q_proj", "v_proj"]),
    ("tiiuae--falcon-7b", "full", "sdpa", None),
    ("tiiuae--falcon-7b", "lora", "sdpa", ["query_key_value"]),
    ("Qwen--Qwen3-30B-A3B", "full", "sdpa", None),
    ("Qwen--Qwen3-30B-A3B", "lora", "sdpa", ["q_proj", "v_proj"]),
    ("mistralai--Mixtral-8x7B-v0.1", "full", "sdpa", None),
    ("Qwen--Qwen2-57B-A14B", "full", "sdpa", None),
]


@pytest.mark.slow
@pytest.mark.parametrize("name,method,attention,targets", CASES)
def test_layer_activations_equal_autograd_census(name, method, attention, targets):
    config = json.loads((CATALOG / f"{name}.json").read_text()) | SMALL_MOE.get(name, {})
    real = saved_bytes(config, 3, attention=attention, lora_targets=targets) - saved_bytes(
        config, 2, attention=attention, lora_targets=targets
    )
    # billed as the installed release builds the model (`Family.as_of`): `make drift` runs this on newer ones
    spec = dataclasses.replace(spec_from_config(config, model_id=name), transformers=transformers.__version__)
    plan = parse_plan(
        seq=SEQ, method=method, attention=attention, lora_targets=targets or ["q_proj"], lora_dropout=0.05
    )
    billed = sum(layer_activations(spec, plan, 2).values())
    # Exact up to the per-token rsqrt/logsumexp vectors (a few hundred bytes per token).
    assert billed == pytest.approx(real, rel=0.005, abs=256 * SEQ), (billed, real)


@pytest.mark.slow
@pytest.mark.parametrize(
    "name,targets",
    [
        ("meta-llama--Llama-3.2-1B", ["q_proj", "v_proj"]),
        ("Qwen--Qwen2.5-0.5B", ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]),
    ],
)
@pytest.mark.parametrize("dropout", [0.0, 0.1])
@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_lora_dropout_census(name, targets, dropout, precision):
    """`--lora-dropout` is billed as autograd saves it: dropout 0 (peft's nn.Identity) keeps only the
    fp32 cast input per adapter (in fp32: the layer's input, shared); any dropout > 0 its noise and
    the dropped-out copy per adapter."""
    config = json.loads((CATALOG / f"{name}.json").read_text())
    dtype = {"bf16": "bfloat16", "fp32": "float32"}[precision]
    real = saved_bytes(config, 3, attention="sdpa", lora_targets=targets, dropout=dropout, dtype=dtype) - saved_bytes(
        config, 2, attention="sdpa", lora_targets=targets, dropout=dropout, dtype=dtype
    )
    plan = parse_plan(seq=SEQ, method="lora", lora_targets=targets, lora_dropout=dropout, precision=precision)
    billed = sum(layer_activations(spec_from_config(config, model_id=name), plan, 2).values())
    assert billed == pytest.approx(real, rel=0.005, abs=256 * SEQ), (billed, real)
