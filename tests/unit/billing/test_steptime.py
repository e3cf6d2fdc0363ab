"""Step time: FLOP counts derived by hand from the architecture, and the model against real H200 steps.

The measured rows are benchmarks/data/h200.jsonl (a copy of the shared H200 measurements: real
training steps, `step_s` the fastest synchronised step).
"""

import json
import statistics
import sys

import pytest
from conftest import BENCHMARKS
from typer.testing import CliRunner

from memdoc.cli import app
from memdoc.core.billing.states import model_states
from memdoc.core.billing.steptime import matmul_flops, step_seconds, step_time
from memdoc.core.model.gpu import resolve_gpu
from memdoc.core.model.plan import Checkpointing, parse_plan
from memdoc.resolve.models import resolve_model

sys.path.insert(0, str(BENCHMARKS))
from steptime import HELD_OUT, load_rows, setup_of  # noqa: E402

H200 = resolve_gpu("h200")
LLAMA2 = resolve_model("meta-llama/Llama-2-7b-hf")
# Llama-2-7B by hand: 32 layers of q, k, v, o (4096²) and gate, up, down (4096 × 11008); head 4096 × 32000.
L, H, I, V = 32, 4096, 11008, 32000
LINEAR = L * (4 * H * H + 3 * H * I)


def flops(**plan):
    p = parse_plan(**plan)
    return matmul_flops(LLAMA2, p, model_states(LLAMA2, p).trainable_params)


def test_full_fine_tuning_is_six_flops_per_weight_and_token_plus_causal_attention():
    T, s = 2048, 2048
    attention_forward = 4 * s * s * H * L / 2  # QKᵀ and PV, half of the square under a causal mask
    expected = 6 * T * (LINEAR + H * V) + attention_forward * (1 + 2.5)  # flash backward: 5 matmuls for 2
    assert flops(seq=2048) == pytest.approx(expected, rel=1e-9)


def test_lora_skips_the_frozen_weight_gradients_and_adds_its_own_matmuls():
    T, r = 2048, 16
    adapters = 2 * L * r * (H + H)  # q_proj and v_proj, A: H→r, B: r→H
    assert flops(method="lora", seq=2048) - flops(seq=2048) == pytest.approx(
        -2 * T * (LINEAR + H * V) + 6 * T * adapters, rel=1e-9
    )


def test_full_checkpointing_recomputes_one_forward_of_the_decoder_not_the_head():
    T = s = 2048
    forward = 2 * T * LINEAR + 4 * s * s * H * L / 2
    assert flops(checkpointing=Checkpointing.FULL) - flops() == pytest.approx(forward, rel=1e-9)


def test_eager_attention_computes_the_whole_square():
    s = 2048
    square = 4 * s * s * H * L  # forward, no causal skip; backward 2 × forward
    assert flops(attention="eager") - flops() == pytest.approx(3 * square - 3.5 * square / 2, rel=1e-9)


def test_fp32_runs_at_the_fp32_rate_not_the_tensor_core_rate():
    # H200 datasheet: 989 TFLOPS dense bf16 vs 67 TFLOPS FP32; torch keeps TF32 off by default.
    bf16 = step_time(LLAMA2, parse_plan(), H200)
    fp32 = step_time(LLAMA2, parse_plan(precision="fp32"), H200)
    assert fp32.compute > 8 * bf16.compute


def _measured():
    return {row["id"]: row for row in load_rows()}


def _modelled(row):
    model, plan = setup_of(row["memdoc_args"])
    return step_seconds(model, plan, H200)


def test_step_time_within_fifteen_percent_of_real_h200_steps():
    ratios = {case: _modelled(row) / row["step_s"] for case, row in _measured().items()}
    assert len(ratios) >= 18
    assert statistics.median(abs(r - 1) for r in ratios.values()) <= 0.15
    assert all(1 / 1.5 <= r <= 1.5 for r in ratios.values()), ratios
    held_out = [abs(ratios[case] - 1) for case in HELD_OUT]
    assert statistics.median(held_out) <= 0.15


@pytest.mark.parametrize(
    "without,with_",
    [
        ("l2-7b-full-bf16-s2048", "l2-7b-full-bf16-s2048-ckpt"),
        ("l2-7b-lora16qv-s2048", "l2-7b-lora16qv-s2048-ckpt"),
        pytest.param(
            "q25-05b-full-bf16-b8-s1024",
            "q25-05b-full-bf16-b8-s1024-ckpt",
            marks=pytest.mark.xfail(
                strict=True,
                reason="known gap: on a 0.5B model checkpointing costs ×1.83 on the H200, "
                "2.5 recomputed forwards; the model counts one (×1.23)",
            ),
        ),
    ],
)
def test_checkpointing_costs_what_it_costs_on_the_h200(without, with_):
    rows = _measured()
    measured = rows[with_]["step_s"] / rows[without]["step_s"]
    modelled = _modelled(rows[with_]) / _modelled(rows[without])
    assert modelled == pytest.approx(measured, rel=0.2)


def test_lora_is_faster_than_full_as_measured():
    rows = _measured()
    measured = rows["l2-7b-lora16qv-s2048"]["step_s"] / rows["l2-7b-full-bf16-s2048"]["step_s"]  # 0.59
    modelled = _modelled(rows["l2-7b-lora16qv-s2048"]) / _modelled(rows["l2-7b-full-bf16-s2048"])
    assert modelled == pytest.approx(measured, rel=0.1)


def test_bill_json_has_time_and_ladder_rungs_have_step_seconds():
    result = CliRunner().invoke(app, ["bill", "meta-llama/Llama-2-7b", "--gpu", "rtx-4090", "--batch", "2", "--json"])
    data = json.loads(result.output)
    time = data["time"]
    assert time["step_seconds"] > 0
    assert time["tokens_per_second"] == pytest.approx(2 * 2048 / time["step_seconds"], rel=0.01)
    assert data["ladder"] and all(step["step_seconds"] > 0 for step in data["ladder"])


def test_bill_prints_time_per_step_and_per_billion_tokens():
    result = CliRunner().invoke(app, ["bill", "Qwen/Qwen2.5-0.5B", "--gpu", "h200"])
    assert "per optimizer step" in result.output and "per billion tokens" in result.output


def test_every_gpu_has_an_fp32_rate_below_its_tensor_rate():
    from memdoc.core.model.gpu import load_gpu_table

    for gpu in load_gpu_table():
        tensor = gpu.bf16_tflops or gpu.fp16_tflops
        assert gpu.fp32_tflops and gpu.fp32_tflops < tensor, gpu.id
    assert resolve_gpu("h100-sxm").fp32_tflops == pytest.approx(67, abs=0.5)  # H100 datasheet: FP32 67 TFLOPS
    assert resolve_gpu("a100-80").fp32_tflops == 19.5  # A100 datasheet


def test_partial_checkpointing_recomputes_only_the_checkpointed_layers():
    """`--checkpoint-every 2` on Llama-3.1-8B checkpoints layers 0, 2, …, 30: 16 of 32 layers run their forward
    again in backward, so the recomputed matmul FLOPs are half those of checkpointing every layer (the head is
    never recomputed, and attention is part of each layer's forward)."""
    model = resolve_model("meta-llama/Llama-3.1-8B")
    base = parse_plan(seq_len=2048)
    trainable = model_states(model, base).trainable_params
    none = matmul_flops(model, base, trainable)
    every = matmul_flops(model, base.replace(checkpointing=Checkpointing.FULL), trainable) - none
    half = matmul_flops(model, base.replace(checkpointing=Checkpointing.FULL, checkpoint_every=2), trainable) - none
    assert every > 0.2 * none  # one more forward of the decoder
    assert half == pytest.approx(every / 2)
    odd = matmul_flops(model, base.replace(checkpointing=Checkpointing.FULL, checkpoint_every=3), trainable) - none
    assert odd == pytest.approx(every * 11 / 32)  # layers 0, 3, …, 30
