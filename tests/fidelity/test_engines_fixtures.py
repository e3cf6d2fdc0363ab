"""The engine fixtures against exact arithmetic, and memdoc against DeepSpeed's own estimators.

The first tests pin what the engines were measured to hold (`tests/fixtures/engines/`, written by
`benchmarks/engines/harness.py`) to hand counts of the tiny models, so a fixture that drifts (a rerun on another
DeepSpeed) fails here before the bill comparison (`test_engines_bill.py`) reads it. The last ones compare
memdoc's per-GPU bill for Llama-3.1-8B and 70B with `estimate_zero2_model_states_mem_needs_all_cold`
(`tests/fixtures/engines/deepspeed-estimators.json`, `benchmarks/engines/ds_estimators.py`) where both model the
same tensors.
"""

from __future__ import annotations

import json

import pytest
from conftest import FIXTURES, bill_plan

from benchmarks.engines.cases import CASES
from benchmarks.engines.categories import categorise
from benchmarks.engines.tiny import MODELS

ENGINES = FIXTURES / "engines"
RUNS = sorted(p.stem for p in ENGINES.glob("*-*-*.json") if p.stem != "deepspeed-estimators")
WORLD = 2


def load(name: str) -> dict:
    return json.loads((ENGINES / f"{name}.json").read_text())


def hand_count(model: str) -> int:
    """Parameters of a tiny model from its config: embedding, per layer q/k/v/o + gated MLP + two norms
    (+ Qwen3's q/k norms of head_dim), final norm, and a head unless tied."""
    c = MODELS[model]
    h, layers, vocab = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
    head_dim = c.get("head_dim", h // c["num_attention_heads"])
    q, kv = c["num_attention_heads"] * head_dim, c["num_key_value_heads"] * head_dim
    layer = h * q + 2 * h * kv + q * h + 3 * h * c["intermediate_size"] + 2 * h
    if c["model_type"] == "qwen3":
        layer += 2 * head_dim
    return vocab * h + layers * layer + h + (0 if c["tie_word_embeddings"] else vocab * h)


@pytest.mark.parametrize("name", RUNS)
def test_fixture_params_are_the_hand_count(name):
    doc = load(name)
    assert doc["params"] == hand_count(doc["definition"]["model"])


@pytest.mark.parametrize("name", RUNS)
def test_fixture_categories_follow_the_census(name):
    """The stored categories are those `categories.categorise` gives the stored tensors."""
    doc = load(name)
    for rank in doc["ranks"]:
        for when, tensors in rank["census"].items():
            assert rank["categories"][when] == categorise(CASES[name], tensors)


@pytest.mark.parametrize("name", [n for n in RUNS if n.startswith("deepspeed-")])
def test_deepspeed_holds_16_bytes_per_parameter(name):
    """Each rank: fp32 master 4 + exp_avg 4 + exp_avg_sq 4 bytes per parameter of its half, plus the 16-bit
    gradient partition (on the host with offload under ZeRO-3; none kept with offload under ZeRO-1/2, whose
    gradients go straight to the fp32 `.grad` on the host) and the fp32 step gradient (4)."""
    doc = load(name)
    part = doc["params"] // WORLD
    for rank in doc["ranks"]:
        step = rank["categories"]["during_step"]
        where = "host" if doc["definition"]["offload"] else "device"
        assert step[where]["master"] == 4 * part
        assert step[where]["optimizer"] == 8 * part
        assert step[where]["master_grads"] == 4 * part


@pytest.mark.parametrize("name", [n for n in RUNS if n.startswith("fsdp2-")])
def test_fsdp2_shards_in_the_parameter_dtype(name):
    """FSDP2 keeps each rank's shard, its gradient and AdamW's two states in the parameters' dtype."""
    doc = load(name)
    width = 2 if doc["definition"]["load_dtype"] == "bfloat16" else 4
    part = doc["params"] // WORLD
    for rank in doc["ranks"]:
        held = rank["categories"]["after_step"]["device"]
        assert (held["weights"], held["gradients"], held["optimizer"]) == (width * part, width * part, 2 * width * part)


def estimator_row(model: str, gpus: int, nodes: int, stage: str, offload: bool) -> dict:
    doc = load("deepspeed-estimators")
    entry = next(
        m for m in doc["models"] if (m["model"], m["num_gpus_per_node"], m["num_nodes"]) == (model, gpus, nodes)
    )
    return next(r for r in entry["rows"][stage] if r["offload_optimizer"] is offload and not r.get("offload_param"))


@pytest.mark.parametrize("model", ["meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-70B"])
@pytest.mark.parametrize("nodes", [1, 2])
def test_zero2_gpu_model_states_match_deepspeed_estimator(model, nodes):
    """`estimate_zero2_model_states_mem_needs` (stage_1_and_2.py): 2P + int(18P/N) on each GPU without offload
    (16-bit params 2, 16-bit grads 2, fp32 grads 4, fp32 params 4, states 8), 2P with offload. memdoc's
    weights + gradients + optimizer + fp32 step gradient, up to the partition's rounding (N bytes × 18)."""
    for offload in (False, True):
        flags = {"offload": "optimizer"} if offload else {}
        bill = bill_plan(model, None, method="full", shard="zero2", gpus=8, nodes=nodes, precision="bf16", **flags)
        phase = bill.phases["optimizer"]
        held = (
            phase.weights
            + phase.gradients
            + phase.optimizer
            + getattr(bill, "buffers", {}).get("fp32 step gradient", 0)
        )
        expected = estimator_row(model, 8, nodes, "zero2", offload)["gpu_bytes"]
        assert abs(held - expected) <= 18 * 8 * nodes
