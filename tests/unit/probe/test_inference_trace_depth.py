"""Issue 27: the prefill trace (`diagnose --inference`) is flat in the layer count.

Beyond `max_layers`, the trace is extrapolated from 2, 3 and 4 layer periods; the truth it is checked against
is the full trace of the real transformers model (a tiny Llama, so the full trace is cheap), and its cost is
counted in decoder layers built, not seconds.
"""

from __future__ import annotations

import pytest

import memdoc.probe.build as build
from memdoc.core.model.plan import TrainingPlan
from memdoc.errors import ConfigError
from memdoc.probe.inference_trace import trace_prefill

pytestmark = pytest.mark.slow  # fake-tensor traces of a real model

TINY = {
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 256,
    "max_position_embeddings": 512,
}
PLAN = TrainingPlan(seq_len=64, micro_batch=2)


def test_extrapolated_trace_equals_the_full_trace():
    config = {**TINY, "num_hidden_layers": 12}
    full = trace_prefill(config, PLAN, vocab_size=256)
    extrapolated = trace_prefill(config, PLAN, vocab_size=256, max_layers=8)
    assert extrapolated == full


def test_a_million_layers_build_nine(monkeypatch):
    built = []
    real = build.build_model
    monkeypatch.setattr(build, "build_model", lambda c, p, layers=None, **k: built.append(layers) or real(c, p, layers))
    traced = trace_prefill({**TINY, "num_hidden_layers": 1_000_000}, PLAN, vocab_size=256)
    assert built == [2, 3, 4]
    # K and V of every layer: 2 × 10⁶ layers × 2 KV heads × 16 head_dim × 2 × 64 tokens × 2 bytes (bf16)
    assert traced.kv_cache == 2 * 1_000_000 * 2 * 16 * 2 * 64 * 2


def test_layers_that_do_not_repeat_are_refused_beyond_the_limit():
    config = {**TINY, "num_hidden_layers": 10, "layer_types": ["full_attention"] * 9 + ["sliding_attention"]}
    with pytest.raises(ConfigError, match="do not repeat"):
        trace_prefill(config, PLAN, vocab_size=256, max_layers=8)
