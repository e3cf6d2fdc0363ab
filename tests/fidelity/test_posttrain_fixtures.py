"""The post-training fixtures are coherent with counts derived here, independently of the harness and of memdoc.

`tests/fixtures/posttrain/<case>.json` (written by `benchmarks/posttrain/harness.py`) hold the peak of live
tensor bytes per phase of a real TRL 1.16 `DPOTrainer` / `GRPOTrainer` optimizer step on the CPU. Checked here:

* the parameter count against the Llama layout counted from the config (embedding, q/k/v/o with grouped KV
  heads, gated MLP, two RMSNorms per layer, final norm, untied head), and the LoRA adapter's count
  (peft `LoraLayer`: A is r × in, B is out × r), the adapter in fp32 (peft 0.21
  `tuners_utils.BaseTuner._cast_adapter_dtype` upcasts bf16 adapters with `autocast_adapter_dtype=True`);
* which copies of the weights each case holds: DPO full and GRPO beta 0.04 a frozen reference copy
  (`DPOTrainer.__init__` / `GRPOTrainer.__init__` `create_model_from_path`), the LoRA case none (the reference
  is the base with the adapter disabled, `use_adapter`), GRPO beta 0 and precomputed DPO no reference forward;
* the phases' floor: every phase holds at least the weights, the reference weights and the AdamW states
  (exp_avg and exp_avg_sq in the parameters' dtype, torch's `_fused_adamw`), and the optimizer phase is those
  plus the gradients, almost exactly;
* the fused LM head's tile buffer `[min(N, 4096) × 32768]` in the compute dtype
  (`trl/kernels/chunked_logprob.py` `_ChunkedLogProbFunction.forward`, `mm_buf`), N the scored tokens, is the
  largest transient of the forward.
"""

from __future__ import annotations

import json

import pytest
from conftest import FIXTURES

from benchmarks.posttrain.cases import CASES, COMPLETION_LEN, COMPLETIONS, CONFIG, LORA, PAIRS, PROMPT_LEN

POSTTRAIN = FIXTURES / "posttrain"
BF16, FP32 = 2, 4
TILE_WIDTH, TOKEN_CHUNK = 32768, 4096
"""`_CHUNKED_LOGPROB_CHUNK_SIZE` (trl/trainer/utils.py) and `TOKEN_CHUNK_SIZE` (trl/kernels/chunked_logprob.py)."""


def load(case: str) -> dict:
    return json.loads((POSTTRAIN / f"{case}.json").read_text())


def llama_params(c: dict) -> int:
    h, i, v, n = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["num_hidden_layers"]
    kv = c["num_key_value_heads"] * h // c["num_attention_heads"]
    layer = 2 * h * h + 2 * h * kv + 3 * h * i + 2 * h
    return 2 * v * h + n * layer + h


def lora_params(c: dict) -> int:
    """q_proj (h -> h) and v_proj (h -> kv) adapters of rank r on every layer."""
    h, r = c["hidden_size"], LORA["r"]
    kv = c["num_key_value_heads"] * h // c["num_attention_heads"]
    return c["num_hidden_layers"] * (r * (h + h) + r * (h + kv))


def test_every_case_has_a_current_fixture():
    for name, case in CASES.items():
        doc = load(name)
        assert doc["config"] == CONFIG
        assert doc["plan"] == json.loads(json.dumps(case.plan))
        assert doc["versions"]["trl"].startswith("1.16")


@pytest.mark.parametrize("name", sorted(CASES))
def test_parameter_counts(name):
    doc = load(name)
    base = llama_params(CONFIG)
    if CASES[name].lora:
        assert doc["trainable_params"] == lora_params(CONFIG)
        assert doc["params"] == base + lora_params(CONFIG)
    else:
        assert doc["params"] == doc["trainable_params"] == base
    assert doc["param_bytes"] == BF16 * base + trainable_bytes(doc) * CASES[name].lora


@pytest.mark.parametrize(
    ("name", "reference_copy", "reference_phase"),
    [
        ("dpo-full", True, True),
        ("dpo-lora", False, True),
        ("dpo-precompute", False, False),
        ("grpo-beta0", False, False),
        ("grpo-beta004", True, True),
        ("grpo-iter2", False, True),  # the old-policy log-probs: the policy itself under no_grad
    ],
)
def test_reference_weights_and_phase(name, reference_copy, reference_phase):
    doc = load(name)
    assert doc["reference_param_bytes"] == (doc["param_bytes"] if reference_copy else 0)
    assert ("reference" in doc["phases"]) is reference_phase
    assert ("generation" in doc["phases"]) is (doc["trainer"] == "GRPOTrainer")


def trainable_bytes(doc: dict) -> int:
    """Bytes of the trainable parameters: bf16 when fully fine-tuned, fp32 LoRA adapters."""
    return (FP32 if doc["knobs"]["lora"] else BF16) * doc["trainable_params"]


def floor(doc: dict) -> int:
    """Weights, reference weights and the two AdamW moments (the parameter's dtype) of every trainable one."""
    return doc["param_bytes"] + doc["reference_param_bytes"] + 2 * trainable_bytes(doc)


@pytest.mark.parametrize("name", sorted(CASES))
def test_phases_hold_the_model_states(name):
    doc = load(name)
    for phase, peak in doc["phases"].items():
        assert peak >= floor(doc), phase
    grads = trainable_bytes(doc)
    assert doc["phases"]["optimizer"] == pytest.approx(floor(doc) + grads, rel=0.01)
    assert doc["breakdown"]["optimizer"]["gradients"] == grads


@pytest.mark.parametrize("name", sorted(CASES))
def test_shapes_and_tile_buffer(name):
    """Every row has exactly its length, and the forward's largest transient is the fused head's tile buffer
    over the completion tokens (2 × pairs rows for DPO, completions for GRPO, `COMPLETION_LEN` each)."""
    doc = load(name)
    if doc["trainer"] == "DPOTrainer":
        rows = 2 * PAIRS
        assert doc["inputs"]["input_ids"] == [rows, PROMPT_LEN + COMPLETION_LEN]
    else:
        rows = COMPLETIONS
        assert doc["inputs"]["generated"] == [rows, PROMPT_LEN + COMPLETION_LEN]
        assert doc["inputs"]["completion_ids"] == [rows, COMPLETION_LEN]
    tile = min(rows * COMPLETION_LEN, TOKEN_CHUNK) * TILE_WIDTH * BF16
    assert doc["breakdown"]["forward"]["largest_other"] == tile
    assert doc["phases"]["forward"] >= floor(doc) + tile
