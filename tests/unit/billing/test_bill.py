"""The bill against independent truth: exact state arithmetic, DeepSpeed's published estimator
formulas, and fake-tensor traces of the real HF code (a fast subset of benchmarks/accuracy.py)."""

import json
import statistics
import sys

import pytest
from conftest import BENCHMARKS, bill_plan

from memdoc.core.billing.bill import compute_bill
from memdoc.core.billing.inference import kv_cache_bytes
from memdoc.core.model.gpu import resolve_gpu
from memdoc.core.model.plan import parse_plan
from memdoc.core.remedies.climb import climb
from memdoc.core.remedies.maximum import max_fitting
from memdoc.resolve.models import resolve_model

LLAMA2_7B = 6_738_415_616


def bill(model="meta-llama/Llama-2-7b-hf", gpu=None, **flags):
    return compute_bill(resolve_model(model), parse_plan(**flags), resolve_gpu(gpu) if gpu else None)


def test_full_bf16_adamw_states_are_exact():
    b = bill(optimizer="adamw-foreach")
    opt = b.phases["optimizer"]
    assert opt.weights == 2 * LLAMA2_7B and opt.gradients == 2 * LLAMA2_7B
    assert opt.optimizer == 4 * LLAMA2_7B  # exp_avg + exp_avg_sq in bf16
    assert opt.other == 2 * LLAMA2_7B  # foreach AdamW's sqrt(exp_avg_sq) buffer
    assert b.peak_phase == "optimizer"
    assert bill(optimizer="adamw").plan.optimizer.value == "adamw-foreach"  # the old name still means foreach


def test_default_optimizer_is_fused_adamw_as_in_hf_trainer():
    # transformers' TrainingArguments.optim defaults to adamw_torch_fused (torch >= 2.8): no step temporaries
    opt = bill().phases["optimizer"]
    assert bill().plan.optimizer.value == "adamw-fused"
    assert opt.optimizer == 4 * LLAMA2_7B and opt.other == 0


def test_amp_is_16_bytes_per_param_plus_foreach():
    opt = bill(precision="amp-bf16").phases["optimizer"]
    assert opt.weights + opt.gradients + opt.optimizer == 16 * LLAMA2_7B
    assert bill(precision="amp-bf16", optimizer="adamw-fused").phases["optimizer"].other == 0


def test_lora_trains_only_adapters():
    b = bill(method="lora", lora_rank=16)
    # q_proj and v_proj: 32 layers × 2 × r × (4096 + 4096)
    assert b.states.trainable_params == 32 * 2 * 16 * 8192
    assert b.phases["optimizer"].gradients == 4 * b.states.trainable_params  # fp32 adapters


def test_qlora_nf4_bytes():
    full = bill(method="lora").states.weights
    q = bill(method="qlora").states.weights
    linear = LLAMA2_7B - 2 * 32000 * 4096 - (2 * 32 + 1) * 4096  # all decoder linears
    saved = linear * 2 - linear * (0.5 + 1 / 64 + 4 / 16384)
    assert abs((full - q) - saved) <= 1


# DeepSpeed's estimators (deepspeed/runtime/zero/stage_1_and_2.py estimate_zero2_model_states_mem_needs,
# stage3.py estimate_zero3_model_states_mem_needs), additional_buffer_factor aside:
#   ZeRO-2 + cpu_offload:     gpu = 2 · P
#   ZeRO-3, no offload:       gpu = 4 · largest_layer + 18 · P / N
#   ZeRO-3 + offload opt.:    gpu = 4 · largest_layer + 2 · P / N
#   ZeRO-3 + offload params:  gpu = 4 · largest_layer
@pytest.mark.parametrize(
    "flags,formula,tolerance",
    [
        ({"shard": "zero2", "offload": "optimizer"}, lambda P, L, N: 2 * P, 0.0),
        ({"shard": "zero3", "offload": "optimizer"}, lambda P, L, N: 4 * L + 2 * P / N, 0.001),
        ({"shard": "zero3", "offload": "optimizer+params"}, lambda P, L, N: 4 * L, 0.001),
        # DeepSpeed counts 18 bytes/param: 2 more than weights+grads+master+Adam (its fp32 grad partition).
        ({"shard": "zero3"}, lambda P, L, N: 4 * L + 16 * P / N, 0.001),
    ],
)
def test_model_states_match_deepspeed_estimators(flags, formula, tolerance):
    b = bill(precision="amp-bf16", gpus=8, **flags)
    opt = b.phases["optimizer"]
    states = opt.weights + opt.gradients + opt.optimizer
    gather = 2 * b.states.largest_layer_params * 2 if flags["shard"] == "zero3" else 0
    expected = formula(LLAMA2_7B, b.states.largest_layer_params, 8)
    assert states + gather == pytest.approx(expected, rel=tolerance, abs=8)


def test_sharding_over_8_divides_states():
    # issue 28: ZeRO-1 runs DeepSpeed's layout, not pure bf16: its optimizer keeps the fp32 master partition
    # (4 bytes) and fp32 exp_avg + exp_avg_sq (8 bytes) of every parameter (stage_1_and_2.py
    # `single_partition_of_fp32_groups`), sharded over the 8 GPUs (was 4 bytes: bf16 states, no master)
    one = bill(gpus=8, shard="zero1").phases["optimizer"].optimizer
    assert one == -(-12 * LLAMA2_7B // 8)


def test_checkpointing_cuts_activations_and_lora_peaks_in_backward():
    plain = bill(method="lora")
    ckpt = bill(method="lora", checkpointing="full")
    assert ckpt.acts.layers_saved < 0.1 * plain.acts.layers_saved
    assert plain.peak_phase == "backward"


def test_eager_attention_grows_quadratically():
    sdpa = bill(seq=4096).acts.layer_saved
    eager = bill(seq=4096, attention="eager").acts.layer_saved
    # eager keeps the fp32 softmax and its bf16 copy: 6 bytes × 32 heads × 4096² per layer
    assert eager - sdpa == pytest.approx(6 * 32 * 4096 * 4096, rel=0.001)


def test_kv_cache_formula():
    spec = resolve_model("meta-llama/Llama-3.1-8B")
    # 2 × 32 layers × 8 KV heads × 128 × 8192 tokens × 2 bytes = 1 GiB per sequence
    assert kv_cache_bytes(spec, batch=1, context=8192, bytes_per_element=2) == 2 * 32 * 8 * 128 * 8192 * 2 == 1024**3


def test_ladder_stops_at_first_fit_and_is_cheapest_first():
    steps = climb(resolve_model("meta-llama/Llama-2-7b-hf"), parse_plan(batch=4), resolve_gpu("24"))
    climbed = [s for s in steps if s.rung.id != "drop-unneeded"]  # the final pass comes after the first fit
    ids = [s.rung.id for s in climbed]
    assert ids[0] == "accumulate" and climbed[-1].fits and not any(s.fits for s in climbed[:-1])
    assert steps[0].plan.grad_accum == 4 and steps[0].plan.micro_batch == 1


def test_max_fitting_is_the_boundary():
    model, gpu = resolve_model("meta-llama/Llama-2-7b-hf"), resolve_gpu("rtx-4090")
    plan = parse_plan(method="qlora", checkpointing="full")
    # issue 25: max_fitting answers by the one fit rule, comfortable by default, at all with comfortable=False
    best = max_fitting(model, plan, gpu, "batch")
    assert compute_bill(model, plan.replace(micro_batch=best), gpu).comfortable
    assert not compute_bill(model, plan.replace(micro_batch=best + 1), gpu).comfortable
    at_all = max_fitting(model, plan, gpu, "batch", comfortable=False)
    assert at_all >= best and compute_bill(model, plan.replace(micro_batch=at_all), gpu).fits
    assert not compute_bill(model, plan.replace(micro_batch=at_all + 1), gpu).fits


sys.path.insert(0, str(BENCHMARKS))


@pytest.mark.slow
def test_bill_within_a_few_percent_of_traces():
    from accuracy import FAST, traced_vs_billed

    errors = [abs(traced_vs_billed(m, f)["error"]) for m, f in FAST]
    assert statistics.median(errors) <= 0.03
    assert max(errors) <= 0.08


def test_qlora_leaves_fused_moe_experts_16_bit():
    # transformers 5 stores Mixtral's experts as 3-D parameters; bitsandbytes quantises nn.Linear only.
    experts = 32 * 8 * 3 * 4096 * 14336  # layers × experts × (gate, up, down) × hidden × intermediate
    b = bill("mistralai/Mixtral-8x7B-v0.1", method="qlora")
    assert b.states.weights > experts * 2
    assert any("experts 16-bit" in note for note in b.notes)


def test_zero3_gathers_the_embedding_when_it_is_the_largest_unit():
    b = bill("meta-llama/Llama-3.1-8B", gpus=8, shard="zero3")
    # 128256 × 4096 LM head (untied) is larger than a decoder layer: two such units in flight, bf16.
    assert b.phases["forward"].other >= 2 * 128256 * 4096 * 2


def test_fused_loss_never_stores_the_logits():
    # Liger fused_linear_cross_entropy_forward: chunk = next_power_of_2(ceil(BT / ceil(V / H))) tokens;
    # Llama-3.1-8B at 2 x 4096: ceil(128256 / 4096) = 32, 8192 / 32 = 256 tokens, logits 256 x V in bf16.
    hf = bill("meta-llama/Llama-3.1-8B", method="lora", batch=2, seq=4096)
    fused = bill("meta-llama/Llama-3.1-8B", method="lora", batch=2, seq=4096, loss="fused-ce")  # the loss alone
    tokens, vocab, hidden = 8192, 128256, 4096
    assert fused.acts.loss_forward_peak == 256 * vocab * 2
    assert fused.acts.loss_backward_peak == 0
    # HF keeps the fp32 log-softmax (4·T·V); Liger keeps grad_input (T·H bf16) and an fp32 loss per token.
    assert hf.acts.head_saved - fused.acts.head_saved == 4 * tokens * vocab - (2 * tokens * hidden + 4 * tokens)
    assert hf.peak_allocated - fused.peak_allocated > 8 * 1024**3


def test_ladder_skips_remedies_that_save_nothing_yet():
    # Full fine-tuning of a 7B model peaks at the optimizer step: checkpointing (or a fused loss)
    # cannot help until LoRA has moved the peak into backward, so LoRA comes first.
    # Fused AdamW (no foreach temporaries) is the one cheaper remedy that saves there.
    steps = climb(resolve_model("meta-llama/Llama-2-7b-hf"), parse_plan(optimizer="adamw"), resolve_gpu("24"))
    climbed = [s for s in steps if s.rung.id != "drop-unneeded"]
    ids = [s.rung.id for s in climbed]
    assert ids[:2] == ["fused-adamw", "lora"] and steps[-1].fits
    assert all(s.saved_bytes > 0 for s in climbed)


@pytest.mark.slow
def test_fp32_soft_capped_logits_bill_matches_the_trace():
    # Gemma-2 soft-caps its logits (/ cap, tanh, × cap). In fp32 the soft-cap's backward starts from the
    # log-softmax's gradient itself; the allocator replay crashed on that path ("internal error").
    from conftest import invoke_diagnose

    flags = ("--precision", "fp32", "--seq", "512")
    traced = json.loads(invoke_diagnose("google/gemma-2-2b", *flags, "--json").stdout)["measured"]
    billed = bill_plan("google/gemma-2-2b", "80", precision="fp32", seq=512)
    assert billed.peak_allocated == pytest.approx(traced["peak_allocated"], rel=0.001)
    assert billed.peak_reserved >= billed.peak_allocated
