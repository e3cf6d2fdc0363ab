"""`diagnose MODEL --task dpo|grpo` (issue 23, item 5): the traced post-training step against independent truths.

- the KV cache of generation: an exact count from the config (layers × 2 × rows × kv heads × tokens × head dim ×
  dtype bytes), the token count checked on a real `generate` of a tiny model (transformers' own cache);
- DPO's concatenated forward: the decoder layers' kept activations equal those of a supervised trace of twice the
  batch (the supervised trace is tied to autograd's saved tensors by test_tracer.py / test_activations_census.py);
- the reference: a second copy of the weights for full fine-tuning (counted on a meta-device model of the same
  config), none with LoRA (the adapter is disabled instead);
- GRPO with long completions on a large generation batch peaks in generation.
"""

from __future__ import annotations

import json

import pytest
from conftest import invoke_diagnose

from memdoc.core.billing.measurement import Measurement
from memdoc.core.model.plan import parse_plan

MODEL = "Qwen/Qwen2.5-0.5B"
LAYERS = 2
"""Traced depth of the slow tests (seconds per trace); the CLI test runs the extrapolated real depth."""


def _config(model: str = MODEL) -> dict:
    from memdoc.resolve.models import load_config

    return load_config(model)[1]


def _trace(**flags) -> Measurement:
    from memdoc.probe.posttrain import trace_posttrain_step

    return trace_posttrain_step(_config(), parse_plan(**flags), layers=LAYERS)


def _model_bytes(config: dict, layers: int, dtype_bytes: int) -> int:
    """Bytes of the distinct parameters (at `dtype_bytes` each) and the buffers (fp32 rotary frequencies) of the
    config's causal LM at `layers` layers, built on the meta device by transformers itself (no memdoc code)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    data = {k: v for k, v in config.items() if k not in ("model_type", "transformers_version", "auto_map")}
    conf = AutoConfig.for_model(config["model_type"], **data)
    conf.num_hidden_layers = layers
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(conf)
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    return sum(p.numel() for p in model.parameters()) * dtype_bytes + buffers


# ------------------------------------------------------------------------------------------------- fast
def test_measurement_takes_the_post_training_phases_in_step_order():
    items = {"weights": 10, "gradients": 0, "optimizer": 0, "activations": 5, "other": 0}
    m = Measurement.from_phases({"forward": items, "generation": {**items, "activations": 50}, "reference": items})
    assert list(m.phases) == ["generation", "reference", "forward"]
    assert m.peak_phase == "generation" and m.peak_allocated == 60
    assert m.to_json()["phases"]["generation"]["peak_allocated"] == 60


def test_generation_batch_per_gpu_is_trls():
    """TRL's GRPOConfig.__post_init__: generation_batch_size defaults to per-device batch × processes ×
    steps_per_generation (= gradient_accumulation_steps); each process generates its share."""
    from memdoc.probe.generation_trace import generation_shape

    plan = parse_plan(task="grpo", micro_batch=2, grad_accum=4, seq_len=100, completion_len=300)
    shape = generation_shape(plan)
    assert (shape.rows, shape.prompt, shape.completion, shape.cached_tokens) == (8, 100, 300, 399)
    given = parse_plan(task="grpo", micro_batch=2, gpus=4, generation_batch=64, seq_len=100)
    assert generation_shape(given).rows == 16


def test_unsupported_tasks_are_refused_in_one_line():
    from memdoc.errors import ConfigError
    from memdoc.probe.posttrain import check_traceable

    for flags in ({"task": "kto"}, {"task": "grpo", "vllm": "colocate"}):
        with pytest.raises(ConfigError):
            check_traceable(parse_plan(**flags))
    check_traceable(parse_plan(task="dpo", method="lora"))


# ------------------------------------------------------------------------------------------------- slow
@pytest.mark.slow
def test_generate_caches_prompt_plus_completion_minus_one_tokens():
    """transformers' own `generate` (GenerationMixin._sample) on a tiny real model: the last sampled token is never
    fed back, so the cache ends at prompt + completion − 1 tokens (what `GenerationShape.cached_tokens` claims)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    conf = LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2
    )
    model = LlamaForCausalLM(conf).eval()
    prompt, completion = 7, 5
    out = model.generate(
        torch.randint(0, 100, (2, prompt)),
        max_new_tokens=completion,
        min_new_tokens=completion,
        do_sample=True,
        return_dict_in_generate=True,
        pad_token_id=0,
    )
    assert out.sequences.shape[1] == prompt + completion
    assert out.past_key_values.get_seq_length() == prompt + completion - 1


@pytest.mark.slow
def test_kv_cache_of_generation_is_the_exact_count():
    """The cache the traced generation holds, against the config: layers × 2 × rows × kv heads × (prompt +
    completion − 1) × head dim × 2 bytes (bf16)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from memdoc.probe.build import build_model
    from memdoc.probe.generation_trace import generation_shape, trace_generation
    from memdoc.probe.memtrack import masks_as_in_eager_execution

    config = _config()
    plan = parse_plan(task="grpo", precision="bf16", micro_batch=2, grad_accum=3, seq_len=40, completion_len=24)
    shape = generation_shape(plan)
    with FakeTensorMode(), masks_as_in_eager_execution():
        kv = trace_generation(build_model(config, plan, LAYERS), shape, config["vocab_size"])
    head_dim = config["hidden_size"] // config["num_attention_heads"]
    truth = LAYERS * 2 * 6 * config["num_key_value_heads"] * (40 + 24 - 1) * head_dim * 2
    assert kv == truth


@pytest.mark.slow
def test_dpo_forward_keeps_the_activations_of_twice_the_rows():
    """Chosen and rejected in one forward: every decoder module keeps what it keeps for a supervised batch of 2 ×
    micro-batch rows (same layers, same tokens; the LM head differs: TRL's fused head vs the full logits)."""
    from memdoc.probe.tracer import trace_training_step

    dpo = _trace(task="dpo", method="lora", micro_batch=1, seq_len=128)
    sft = trace_training_step(_config(), parse_plan(method="lora", micro_batch=2, seq_len=128), layers=LAYERS)
    layers = {k: v for k, v in sft.modules if ".layers.*" in k}
    assert layers and {k: v for k, v in dpo.modules if k in layers} == layers


@pytest.mark.slow
def test_reference_holds_its_own_weights_for_full_fine_tuning_and_none_with_lora():
    """Full: the frozen reference (bf16) adds exactly one copy of the model's parameters, in every phase, against
    the same plan with precomputed reference log-probs (no reference). LoRA: the reference is the base with the
    adapter disabled, so the reference phase holds the policy's weights only."""
    full = _trace(task="dpo", precision="bf16", micro_batch=1, seq_len=64)
    pre = _trace(task="dpo", precision="bf16", micro_batch=1, seq_len=64, precompute_ref=True)
    assert "reference" in full.phases and "reference" not in pre.phases
    copy = _model_bytes(_config(), LAYERS, 2)
    assert full.phases["forward"]["weights"] - pre.phases["forward"]["weights"] == copy
    assert full.phases["reference"]["weights"] == full.phases["forward"]["weights"]
    lora = _trace(task="dpo", method="lora", micro_batch=1, seq_len=64)
    assert lora.phases["reference"]["weights"] == lora.phases["forward"]["weights"]
    # TRL runs the reference after the policy's forward: the policy's activations are alive during it
    assert lora.phases["reference"]["activations"] >= lora.phases["forward"]["activations"]


@pytest.mark.slow
def test_grpo_with_long_completions_peaks_in_generation():
    """64 completions of 2048 tokens generated at once, trained one row per micro-batch with checkpointing: the KV
    cache of the generation batch outweighs one row's forward and backward."""
    m = _trace(
        task="grpo",
        method="lora",
        micro_batch=1,
        generation_batch=64,
        num_generations=8,
        seq_len=64,
        completion_len=2048,
        checkpointing="full",
    )
    assert m.peak_phase == "generation"
    # beta 0 (TRL's GRPO default): no reference model; but 64 completions feed 64 micro-steps while the accumulation
    # is 1, so TRL computes the old policy's log-probs (`grpo_trainer.py`: accumulation % (steps_per_generation ×
    # num_iterations) != 0): a no-grad scoring phase
    assert list(m.phases)[:3] == ["generation", "reference", "forward"]


@pytest.mark.slow
def test_diagnose_grpo_json_carries_the_phases_and_the_whole_cache():
    """The CLI at the real depth (24 layers, extrapolated from short traces): the phases in --json, and a generation
    phase that holds at least the whole KV cache of 8 rows × (256 + 1024 − 1) tokens at 24 layers — a prefill's
    transients outweigh the cache at 2-4 layers, the cache wins at 24 (each part is extrapolated on its own)."""
    res = invoke_diagnose(
        MODEL, "--task", "grpo", "--method", "lora", "--batch", "1", "--generation-batch", "8", "--seq", "256",
        "--completion-len", "1024", "--beta", "0.04", "--json",
    )  # fmt: skip
    data = json.loads(res.stdout)
    assert {"generation", "reference", "forward", "backward", "optimizer"} <= set(data["phases"])
    assert set(data["bill"]["phases"]) == set(data["phases"])
    assert data["plan"]["task"] == "grpo"
    config = _config()
    head_dim = config["hidden_size"] // config["num_attention_heads"]
    cache = config["num_hidden_layers"] * 2 * 8 * config["num_key_value_heads"] * (256 + 1024 - 1) * head_dim * 2
    assert data["phases"]["generation"]["activations"] >= cache
