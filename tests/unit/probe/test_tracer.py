"""The fake-tensor tracer against independent truth, its extrapolation, and every plan knob."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from conftest import CATALOG, TINY_LLAMA

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


from memdoc.core.billing.measurement import LINE_ITEMS, Measurement  # noqa: E402
from memdoc.core.model.plan import TrainingPlan, parse_plan  # noqa: E402
from memdoc.probe.build import build_model, build_optimizer  # noqa: E402
from memdoc.probe.emulation import adam8bit_state_bytes, nf4_storage_bytes  # noqa: E402
from memdoc.probe.tracer import layer_period, trace_training_step  # noqa: E402

CONFIGS = CATALOG
if not CONFIGS.is_dir():  # pragma: no cover
    CONFIGS = Path("/work/shared/hf-configs")


def catalog(name: str) -> dict:
    return json.loads((CONFIGS / f"{name}.json").read_text())


# ------------------------------------------------------------------- (a) independent measurement
def _storage_bytes(tensors) -> int:
    seen, total = set(), 0
    for t in tensors:
        st = t.untyped_storage()
        if st.data_ptr() not in seen:
            seen.add(st.data_ptr())
            total += st.nbytes()
    return total


def real_cpu_peak(config: dict, plan: TrainingPlan) -> int:
    """Peak bytes of a real CPU training step (the second: states exist), from the CPU allocator's
    own alloc/free events (torch.profiler profile_memory) - independent of the dispatch-level tracer."""
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    model = build_model(config, plan, None)
    with torch.no_grad():
        for p in model.parameters():
            if p.is_floating_point():
                p.normal_(0, 0.02)
    opt = build_optimizer(model, plan)
    ids = torch.randint(0, config["vocab_size"], (plan.micro_batch, plan.seq_len))

    def step() -> None:
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        del loss
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()
    base = _storage_bytes(list(model.parameters()) + list(model.buffers()) + [ids])
    base += _storage_bytes(v for s in opt.state.values() for v in s.values() if isinstance(v, torch.Tensor))
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    events = sorted(
        (e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"), key=lambda e: e.start_ns()
    )
    live = peak = 0
    for e in events:
        live += e.nbytes()
        peak = max(peak, live)
    return base + peak


SMALL_LLAMA = dict(TINY_LLAMA, vocab_size=8000, hidden_size=256, intermediate_size=704)


@pytest.mark.slow
@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"checkpointing": "full"},
        {"precision": "fp32", "attention": "eager"},
        {"method": "lora"},
    ],
)
def test_trace_matches_real_cpu_step(changes):
    plan = parse_plan(micro_batch=2, seq_len=256, **changes)
    real = real_cpu_peak(SMALL_LLAMA, plan)
    traced = trace_training_step(SMALL_LLAMA, plan).peak_allocated
    assert traced == pytest.approx(real, rel=0.002), (traced, real)  # measured: within 0.01%


# -------------------------------------------------------------------------- (b) extrapolation
def _assert_same(extrapolated: Measurement, full: Measurement, rel: float = 1e-3) -> None:
    assert extrapolated.peak_phase == full.peak_phase
    for phase, items in full.phases.items():
        for key in (*LINE_ITEMS, "peak_allocated"):
            assert extrapolated.phases[phase][key] == pytest.approx(items[key], rel=rel, abs=1024), (phase, key)


@pytest.mark.slow
def test_extrapolation_equals_full_trace():
    config = catalog("Qwen--Qwen2.5-0.5B")
    plan = parse_plan(seq_len=256)
    extrapolated = trace_training_step(config, plan)
    assert any("extrapolated" in n for n in extrapolated.notes)
    full = trace_training_step(config, plan, layers=config["num_hidden_layers"])
    _assert_same(extrapolated, full)


@pytest.mark.slow
@pytest.mark.parametrize(
    "changes",
    [
        {"method": "lora", "lora_targets": "all-linear", "checkpointing": "full"},
        {"checkpointing": "selective", "precision": "amp-bf16"},
    ],
)
def test_extrapolation_equals_full_trace_other_plans(changes):
    config = catalog("meta-llama--Llama-3.2-1B")
    plan = parse_plan(seq_len=512, **changes)
    _assert_same(trace_training_step(config, plan), trace_training_step(config, plan, layers=16))


def test_layer_period_detects_heterogeneous_models():
    assert layer_period(catalog("meta-llama--Llama-2-7b-hf")) == 1
    assert layer_period({"num_hidden_layers": 42, "layer_types": ["sliding_attention", "full_attention"] * 21}) == 2
    assert layer_period({"num_hidden_layers": 61, "first_k_dense_replace": 3}) is None
    assert layer_period({"num_hidden_layers": 24, "mlp_only_layers": [0, 1]}) is None


# ------------------------------------------------------------------------------- (c) the knobs
SMALL = "meta-llama--Llama-3.2-1B"


@pytest.fixture(scope="module")
def small():
    return catalog(SMALL)


def trace(config, **changes) -> Measurement:
    return trace_training_step(config, parse_plan(**{"seq_len": 512, **changes}), layers=2)


@pytest.fixture(scope="module")
def base(small):
    return trace(small, optimizer="adamw-foreach")  # foreach: the step's temporaries are visible


def param_bytes(config, dtype_bytes: int, layers: int = 2) -> int:
    with torch.device("meta"):
        from transformers import AutoConfig, AutoModelForCausalLM

        data = dict(config)
        conf = AutoConfig.for_model(data.pop("model_type"), **data)
        conf.num_hidden_layers = layers
        model = AutoModelForCausalLM.from_config(conf)
        model.tie_weights()
    return sum(p.numel() for p in model.parameters()) * dtype_bytes


def test_baseline_full_bf16_items(small, base):
    weights = param_bytes(small, 2)
    assert base.weights == pytest.approx(weights, rel=1e-3)  # + rotary buffer
    assert base.optimizer == pytest.approx(2 * weights, rel=1e-3)  # exp_avg + exp_avg_sq (bf16) + steps
    opt = base.phases["optimizer"]
    assert opt["gradients"] == pytest.approx(weights, rel=1e-3)
    assert opt["other"] >= weights  # foreach AdamW: one parameter-sized temporary at the step
    assert base.to_json()["measured"]["peak_allocated"] == base.peak_allocated


@pytest.mark.slow
def test_checkpointing_cuts_activations(small, base):
    full = trace(small, checkpointing="full")
    sel = trace(small, checkpointing="selective")
    per_layer = lambda m: dict(m.modules).get("model.layers.*", 0)  # noqa: E731
    assert per_layer(full) < 0.2 * per_layer(base)  # a checkpointed layer keeps about its output only
    assert per_layer(full) < per_layer(sel) < per_layer(base)
    assert (
        full.phases["forward"]["activations"]
        < sel.phases["forward"]["activations"]
        < base.phases["forward"]["activations"]
    )


@pytest.mark.slow
def test_lora_removes_full_size_grads_and_states(small, base):
    lora = trace(small, method="lora")
    assert lora.phases["optimizer"]["gradients"] < 0.01 * base.phases["optimizer"]["gradients"]
    assert lora.optimizer < 0.01 * base.optimizer
    assert lora.peak_allocated < base.peak_allocated
    wide = trace(small, method="lora", lora_targets="all-linear")
    assert wide.optimizer > lora.optimizer


@pytest.mark.slow
def test_qlora_stores_nf4(small):
    lora = trace(small, method="lora")
    qlora = trace(small, method="qlora")
    conf = small
    h, i, kv = conf["hidden_size"], conf["intermediate_size"], conf["num_key_value_heads"] * conf["head_dim"]
    shapes = [h * h, h * kv, h * kv, h * h, h * i, h * i, i * h]
    saved = 2 * sum(2 * n - nf4_storage_bytes(n) for n in shapes)  # 2 layers, bf16 -> NF4
    assert lora.weights - qlora.weights == pytest.approx(saved, rel=1e-3)


@pytest.mark.slow
def test_fp32_doubles_weights_and_amp_adds_master(small, base):
    fp32 = trace(small, precision="fp32")
    amp = trace(small, precision="amp-bf16")
    assert fp32.weights == pytest.approx(2 * base.weights, rel=1e-3)
    assert amp.weights == fp32.weights  # fp32 master weights
    assert amp.optimizer == pytest.approx(2 * base.optimizer, rel=1e-3)
    # autocast keeps bf16 copies of the weights (its cast cache) alive through forward, as on CUDA
    assert amp.phases["forward"]["activations"] > base.phases["forward"]["activations"] + base.weights // 2


@pytest.mark.slow
def test_eager_attention_exceeds_sdpa_at_long_sequence(small):
    sdpa = trace(small, seq_len=2048)
    eager = trace(small, seq_len=2048, attention="eager")
    heads, layers, s = small["num_attention_heads"], 2, 2048
    extra = eager.phases["forward"]["activations"] - sdpa.phases["forward"]["activations"]
    assert extra >= layers * heads * s * s * 2  # at least the bf16 s×s probabilities per head


@pytest.mark.slow
def test_activations_scale_with_batch_and_sequence(small, base):
    assert trace(small, micro_batch=2).phases["forward"]["activations"] == pytest.approx(
        2 * base.phases["forward"]["activations"], rel=0.01
    )
    assert trace(small, seq_len=1024).phases["forward"]["activations"] == pytest.approx(
        2 * base.phases["forward"]["activations"], rel=0.01
    )


@pytest.mark.slow
def test_optimizer_state_sizes(small, base):
    from memdoc.probe.build import build_model

    with torch._subclasses.fake_tensor.FakeTensorMode():
        numels = [p.numel() for p in build_model(small, parse_plan(), 2).parameters()]
    weights = sum(numels) * 2
    eight = trace(small, optimizer="adamw-8bit")
    assert eight.optimizer == sum(adam8bit_state_bytes(n) for n in numels)
    # bf16 AdamW keeps 4 bytes/param; 8-bit keeps 2 + 8/256: ratio (2 + 1/32) / 4 ≈ 0.508
    assert eight.optimizer / base.optimizer == pytest.approx((2 + 1 / 32) / 4, rel=0.01)
    assert trace(small, optimizer="paged-adamw-8bit").optimizer == eight.optimizer
    assert trace(small, optimizer="sgd").optimizer == pytest.approx(weights, rel=1e-3)
    assert trace(small, optimizer="lion").optimizer == pytest.approx(weights, rel=1e-3)
    assert trace(small, optimizer="adafactor").optimizer < 0.01 * weights
    fused = trace(small, optimizer="adamw-fused")
    assert fused.optimizer == base.optimizer
    assert fused.phases["optimizer"]["other"] < 0.01 * base.phases["optimizer"]["other"]


@pytest.mark.slow
def test_sharding_divides_states(small, base):
    n = 8
    fsdp = trace(small, shard="fsdp", gpus=n)
    assert fsdp.optimizer == pytest.approx(base.optimizer / n, rel=0.01)
    assert fsdp.phases["optimizer"]["gradients"] == pytest.approx(base.phases["optimizer"]["gradients"] / n, rel=0.01)
    assert fsdp.phases["optimizer"]["weights"] == pytest.approx(base.weights / n, rel=0.01)
    z1 = trace(small, shard="zero1", gpus=n)
    z2 = trace(small, shard="zero2", gpus=n)
    assert z1.optimizer == math.ceil(base.optimizer / n)
    assert z1.phases["optimizer"]["gradients"] == base.phases["optimizer"]["gradients"]
    assert z2.phases["optimizer"]["gradients"] == math.ceil(base.phases["optimizer"]["gradients"] / n)
    off = trace(small, offload="optimizer")
    assert off.optimizer == 0 and off.phases["optimizer"]["gradients"] == 0
    # weight offload: the sharded weights leave the GPU; what is left is at most the gathered layers
    params_off = trace(small, shard="fsdp", gpus=n, offload="optimizer+params")
    assert params_off.phases["optimizer"]["weights"] < 1024  # only buffers (rotary inv_freq) stay
    assert params_off.phases["forward"]["weights"] < fsdp.phases["forward"]["weights"]


def test_measurement_json_shape(base):
    data = base.to_json()
    assert data["mode"] == "traced"
    assert set(data["measured"]) == {*LINE_ITEMS, "peak_allocated"}
    assert data["peak_phase"] in data["phases"]
    assert data["modules"] and all(m["activation_bytes"] > 0 for m in data["modules"])
    json.dumps(data)


def test_accumulation_runs_n_micro_batches_with_gradients_resident(small):
    """`--accum 2`: the second micro-batch's forward and backward hold the first one's gradients."""
    one = trace(small)
    two = trace(small, accum=2)
    grads = param_bytes(small, 2)
    assert two.phases["forward"]["gradients"] == pytest.approx(grads, rel=1e-3)
    assert one.phases["forward"]["gradients"] == 0
    assert two.phases["forward"]["peak_allocated"] - one.phases["forward"]["peak_allocated"] == pytest.approx(
        grads, rel=1e-3
    )
    assert two.phases["optimizer"] == one.phases["optimizer"]
    # the bill of the same 2-layer model rises as the trace does, phase by phase
    from memdoc.core.billing.bill import compute_bill
    from memdoc.core.model.model_spec import spec_from_config

    spec = spec_from_config(dict(small, num_hidden_layers=2), model_id=SMALL)
    b1, b2 = (compute_bill(spec, parse_plan(seq_len=512, grad_accum=n)) for n in (1, 2))
    for phase in ("forward", "backward"):
        traced = two.phases[phase]["peak_allocated"] - one.phases[phase]["peak_allocated"]
        assert b2.phases[phase].total - b1.phases[phase].total == pytest.approx(traced, rel=0.01), phase


def test_tracing_two_micro_batches_equals_tracing_all_of_them(small, monkeypatch):
    """`--accum 5`: the tracer runs `TRACED_MICRO_BATCHES` (2) of them; running all five gives the same phases."""
    import memdoc.probe.tracer as tracer

    capped = trace(small, accum=5)
    monkeypatch.setattr(tracer, "TRACED_MICRO_BATCHES", 5)
    every = trace(small, accum=5)
    assert tracer.TRACED_MICRO_BATCHES == 5 and capped.phases == every.phases
