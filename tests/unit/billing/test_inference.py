"""The inference bill, its ladder and vLLM's budget, against independent counts and fake-tensor traces."""

import json

import pytest
from conftest import invoke as run

from memdoc.core.billing.inference import InferencePlan, KvCache, Weights, inference_bill
from memdoc.core.billing.vllm_budget import vllm_startup
from memdoc.core.billing.vllm_startup import VllmArgs
from memdoc.core.model.gpu import resolve_gpu
from memdoc.core.model.plan import parse_plan
from memdoc.core.remedies.inference import climb_inference, max_inference
from memdoc.resolve.models import resolve_model

LLAMA31_8B = "meta-llama/Llama-3.1-8B"
# Llama-3.1-8B's published config: hidden 4096, 32 layers, 8 KV heads × 128, intermediate 14336
H, KV_DIM, INTER, LAYERS, PARAMS = 4096, 8 * 128, 14336, 32, 8_030_261_248


def plan(model=LLAMA31_8B, batch=1, seq=8192, **kw):
    return resolve_model(model), InferencePlan(plan=parse_plan(precision="bf16", batch=batch, seq=seq), **kw)


def test_kv_cache_per_token_is_the_published_128_kib_and_halves_in_fp8():
    model, p = plan(seq=1)
    assert inference_bill(model, p, None).kv_cache == 2 * LAYERS * KV_DIM * 2 == 128 * 1024
    assert inference_bill(model, p.replace(kv_cache=KvCache.FP8), None).kv_cache == 64 * 1024


def test_int4_cache_keeps_128_tokens_in_bf16_and_groups_of_64_with_scale_and_zero_point():
    model, p = plan(seq=8192, kv_cache=KvCache.INT4)
    per_token_elements = 2 * LAYERS * KV_DIM
    expected = (8192 - 128) * per_token_elements * (0.5 + 2 * 2 / 64) + 128 * per_token_elements * 2
    assert inference_bill(model, p, None).kv_cache == pytest.approx(expected, abs=1)


def test_int8_weights_are_int8_codes_plus_an_fp32_scale_per_output_row():
    model, p = plan(weights=Weights.INT8)
    linear = LAYERS * (2 * H * H + 2 * H * KV_DIM + 3 * H * INTER)  # q,o + k,v + gate,up,down
    rows = LAYERS * (H + 2 * KV_DIM + H + 2 * INTER + H)  # out_features of q,k,v,o,gate,up,down
    assert inference_bill(model, p, None).weights == linear + 4 * rows + (PARAMS - linear) * 2


def test_qlora_method_means_nf4_weights_for_inference():
    model = resolve_model(LLAMA31_8B)
    q = inference_bill(model, InferencePlan(plan=parse_plan(method="qlora", precision="bf16")), None)
    nf4 = inference_bill(model, InferencePlan(plan=parse_plan(precision="bf16"), weights=Weights.NF4), None)
    assert q.weights == nf4.weights < PARAMS  # under a byte per parameter


def test_chunked_prefill_bounds_the_transient_by_the_chunk_not_the_context():
    model, whole = plan(seq=131072)
    chunked = whole.replace(prefill_chunk=2048)
    a, b = inference_bill(model, whole, None), inference_bill(model, chunked, None)
    # whole: the MLP of 131072 tokens, 2 × 131072 × (3 × 14336 + 4 × 4096) bytes
    assert a.activations == 2 * 131072 * (3 * INTER + 4 * H)
    # chunked: K and V repeated to 32 heads over the whole context dominate (2 × 32 × 131072 × 128 × 2)
    assert 2 * 32 * 131072 * 128 * 2 < b.activations < a.activations / 5


def test_ladder_stops_at_the_first_fit_and_the_batch_never_exceeds_the_request():
    model, p = plan(batch=8, seq=8192)
    gpu = resolve_gpu("rtx-4090")
    steps = climb_inference(model, p, gpu)
    assert steps and steps[-1].fits and not any(s.fits for s in steps[:-1])
    assert all(1 <= s.bill.inference.batch <= 8 for s in steps)
    assert steps[0].rung.id == "chunked-prefill"


def test_no_rung_fits_a_70b_on_24_gb():
    # 70.6e9 parameters at ~0.5 byte (NF4) are ~33 GiB before any cache: more than the card
    model, p = plan(model="meta-llama/Llama-3.1-70B", seq=2048)
    steps = climb_inference(model, p, resolve_gpu("rtx-4090"))
    assert steps and not any(s.fits for s in steps)
    assert steps[-1].bill.weights > 30 * 1024**3


def test_max_batch_is_the_boundary():
    model, p = plan(seq=4096)
    gpu = resolve_gpu("rtx-4090")
    best = max_inference(model, p, gpu, "batch")
    assert inference_bill(model, p.replace(batch=best), gpu).fits
    assert not inference_bill(model, p.replace(batch=best + 1), gpu).fits


def test_vllm_budget_counts_whole_blocks_and_the_sequences_it_holds():
    model, p = plan(seq=8192)
    fit = vllm_startup(model, p, resolve_gpu("rtx-4090"), VllmArgs(max_model_len=8192))
    assert fit.kv_bytes_per_token == 128 * 1024
    assert fit.kv_cache_tokens % 16 == 0 and fit.kv_cache_tokens * fit.kv_bytes_per_token <= fit.available_kv
    # vLLM's rule: 0.9 × the card − bf16 weights − the process outside torch − the profiling run (on a < 70 GiB
    # card 2048 tokens or the sampler's 256 rows: under a GiB) − the CUDA graphs (vLLM ≥ 0.21, under a GiB)
    card = 25_756_172_288  # RTX 4090, torch's total_memory
    upper = 0.9 * card - 2 * PARAMS - 0.3 * 2**30
    assert upper - 2 * 2**30 < fit.available_kv < upper
    assert fit.max_concurrency == fit.blocks / (8192 // 16)


def test_bill_inference_json_has_ladder_vllm_and_max():
    data = json.loads(
        run(
            "bill",
            LLAMA31_8B,
            "--gpu",
            "rtx-4090",
            "--inference",
            "--batch",
            "8",
            "--seq",
            "8192",
            "--max",
            "batch",
            "--json",
        ).stdout
    )
    assert data["mode"] == "inference" and data["fits"] is False
    assert data["ladder"][-1]["fits"] and data["vllm"]["kv_bytes_per_token"] == 128 * 1024
    assert data["max"]["knob"] == "batch" and 1 <= data["max"]["value"] < 8
    assert data["verdict"]["error_source"].startswith("fake-tensor traces")


def test_inference_flags_need_inference():
    r = run("bill", LLAMA31_8B, "--gpu", "24", "--kv-cache", "fp8")
    assert r.exit_code == 2 and "--inference" in r.output


def test_prescribe_inference_oom_is_quantified_on_the_inference_bill():
    r = run(
        "prescribe", "--symptom", "inference-oom", LLAMA31_8B, "--gpu", "24", "--batch", "8", "--seq", "16384", "--json"
    )
    data = json.loads(r.stdout)
    total = data["bill"]["per_gpu"]["process_total"]
    kv = 2 * LAYERS * KV_DIM * 2 * 8 * 16384  # 16 GiB of cache
    assert PARAMS * 2 + kv < total < PARAMS * 2 + kv + 20 * 1024**3  # not the training bill (> 100 GiB)
    saves = {p["id"]: p["saves_bytes"] for p in data["prescriptions"]}
    assert saves["infer-limit-batch"] >= kv // 2  # half the sequences, half the cache
    assert saves["infer-kv-quant"] >= kv // 2  # fp8: one byte instead of two
    assert saves["infer-no-grad"] is None


# ------------------------------------------------------------------ fake-tensor traces (slow)


@pytest.mark.slow
@pytest.mark.parametrize(
    "model_id,batch,seq,chunk",
    [
        ("Qwen/Qwen2.5-0.5B", 2, 1024, None),
        ("meta-llama/Llama-3.2-1B", 4, 2048, None),
        ("meta-llama/Llama-3.2-1B", 2, 4096, 1024),
        ("meta-llama/Llama-3.2-1B", 2, 4096, 512),
        ("google/gemma-2-2b", 1, 4096, None),  # eager attention: b·heads·s² scores, two masks
    ],
)
def test_peak_matches_a_trace_of_the_real_forward(model_id, batch, seq, chunk):
    from memdoc.probe.inference_trace import trace_prefill

    model, p = plan(model=model_id, batch=batch, seq=seq, prefill_chunk=chunk)
    traced = trace_prefill(model.config, p.plan, chunk=chunk, vocab_size=model.vocab_size)
    billed = inference_bill(model, p, None)
    assert (billed.weights, billed.kv_cache) == (traced.weights, traced.kv_cache)
    assert billed.peak_allocated == pytest.approx(traced.peak, rel=0.01)


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv",
    [
        ["bill", LLAMA31_8B, "--gpu", "24", "--inference", "--seq", "32768", "--json"],
        ["prescribe", "--symptom", "inference-oom", LLAMA31_8B, "--gpu", "24", "--json"],
    ],
)
def test_inference_paths_do_not_import_torch(argv):
    import subprocess
    import sys

    code = (
        f"import sys, runpy; sys.argv={['memdoc', *argv]!r}\n"
        "try:\n    runpy.run_module('memdoc', run_name='__main__')\nexcept SystemExit: pass\n"
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, 'torch was imported'"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)
