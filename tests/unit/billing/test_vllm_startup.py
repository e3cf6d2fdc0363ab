"""vLLM's start-up (`bill --inference --engine vllm`) against published start-up logs (tests/fixtures/vllm-startup/
logs.yaml: each entry's URL and the figures its log prints) and vLLM's own rules (block size, TP, MLA)."""

import dataclasses
import json
from pathlib import Path

import pytest
import yaml
from conftest import invoke as run

from memdoc.core.billing.inference import InferencePlan, KvCache
from memdoc.core.billing.vllm_budget import vllm_startup
from memdoc.core.billing.vllm_startup import VllmArgs, capture_sizes, kv_bytes_per_token
from memdoc.core.model.gpu import resolve_gpu
from memdoc.core.model.plan import parse_plan
from memdoc.errors import PlanError
from memdoc.resolve.models import resolve_model

LOGS = yaml.safe_load((Path(__file__).parents[2] / "fixtures" / "vllm-startup" / "logs.yaml").read_text())
GiB = 2**30
PLAN = InferencePlan(plan=parse_plan(precision="bf16"))


def startup(entry):
    gpu = resolve_gpu(entry.get("gpu", "rtx-4090"))
    if "card_gib" in entry:
        gpu = dataclasses.replace(gpu, memory_bytes=int(entry["card_gib"] * GiB))
    return vllm_startup(resolve_model(entry["model"]), PLAN, gpu, VllmArgs(version=entry["vllm"], **entry["flags"]))


@pytest.mark.parametrize("entry", [e for e in LOGS if "weights_gib" in e], ids=lambda e: e["id"])
def test_weights_per_rank_within_2_percent_of_the_log(entry):
    assert startup(entry).weights / GiB == pytest.approx(entry["weights_gib"], rel=0.02)


@pytest.mark.parametrize("entry", [e for e in LOGS if "starts" in e], ids=lambda e: e["id"])
def test_starts_as_the_log_says(entry):
    assert startup(entry).starts is entry["starts"]


@pytest.mark.parametrize(
    "entry", [e for e in LOGS if "card_gib" in e and "kv_cache_tokens" in e], ids=lambda e: e["id"]
)
def test_kv_cache_tokens_within_5_percent_of_the_log(entry):
    assert startup(entry).kv_cache_tokens == pytest.approx(entry["kv_cache_tokens"], rel=0.05)


@pytest.mark.parametrize("entry", [e for e in LOGS if "activation_gib" in e], ids=lambda e: e["id"])
def test_profile_peak_matches_the_log(entry):
    assert startup(entry).activation_peak / GiB == pytest.approx(entry["activation_gib"], abs=0.05)


def test_tokens_and_concurrency_from_the_logs_own_available_memory():
    # LMCache#3430: 6.37 GiB available → "GPU KV cache size: 46,368 tokens", 2.83x at 16,384 tokens
    entry = next(e for e in LOGS if e["id"] == "qwen3-8b-24gb-v021")
    model = resolve_model(entry["model"])
    per_token = kv_bytes_per_token(model, 1, 2)
    assert per_token == 2 * 36 * 8 * 128 * 2  # Qwen3-8B: 36 layers, 8 KV heads × 128, bf16
    blocks = int(entry["available_kv_gib"] * GiB) // (16 * per_token)
    assert blocks * 16 == pytest.approx(entry["kv_cache_tokens"], abs=16)
    assert round(blocks / (16384 // 16), 2) == entry["max_concurrency"]
    assert len(capture_sizes(512)) == 51 and len(capture_sizes(256)) == 35  # "PIECEWISE=51 ..., FULL=35"


def test_refusal_says_the_max_model_len_the_memory_allows():
    s = startup(next(e for e in LOGS if e["id"] == "llama31-8b-3090-29k"))
    assert not s.starts and 0 < s.max_model_len_that_starts < 29000 and s.max_model_len_that_starts % 16 == 0
    assert s.max_model_len_that_starts == pytest.approx(23648, rel=0.05)  # the log's own KV-cache tokens
    assert "estimated maximum model length is" in s.refusal()


def test_kv_heads_are_replicated_when_tp_exceeds_them_and_mla_is_replicated():
    llama = resolve_model("meta-llama/Llama-3.1-8B")  # 8 KV heads
    assert kv_bytes_per_token(llama, 4, 2) == 2 * 32 * 2 * 128 * 2
    assert kv_bytes_per_token(llama, 16, 2) == kv_bytes_per_token(llama, 8, 2) == 2 * 32 * 1 * 128 * 2
    lite = resolve_model("deepseek-ai/DeepSeek-V2-Lite")
    assert kv_bytes_per_token(lite, 1, 2) == kv_bytes_per_token(lite, 4, 2) == 31_104  # (512 + 64) × 2 × 27
    assert kv_bytes_per_token(lite, 1, 1) == 15_552  # fp8


def test_fp8_kv_halves_the_bytes_per_token_and_doubles_the_tokens():
    model, gpu = resolve_model("meta-llama/Llama-3.1-8B"), resolve_gpu("h100-sxm")
    bf16 = vllm_startup(model, PLAN, gpu, VllmArgs())
    fp8 = vllm_startup(model, InferencePlan(plan=PLAN.plan, kv_cache=KvCache.FP8), gpu, VllmArgs())
    assert fp8.kv_bytes_per_token * 2 == bf16.kv_bytes_per_token
    assert fp8.kv_cache_tokens == pytest.approx(2 * bf16.kv_cache_tokens, abs=32)


def test_cuda_graphs_enter_the_budget_from_vllm_021_and_never_when_eager():
    model, gpu = resolve_model("meta-llama/Llama-3.1-8B"), resolve_gpu("rtx-4090")
    new, old = (vllm_startup(model, PLAN, gpu, VllmArgs(version=v)) for v in ("0.21.0", "0.20.0"))
    eager = vllm_startup(model, PLAN, gpu, VllmArgs(enforce_eager=True))
    assert new.available_kv == old.available_kv - new.cuda_graphs and new.cuda_graphs > 0
    assert eager.cuda_graphs == 0 and eager.available_kv == old.available_kv


def test_bad_serving_values_are_plan_errors():
    for kwargs in ({"gpu_memory_utilization": 1.5}, {"tp": 0}, {"max_model_len": 0}, {"version": "x"}):
        with pytest.raises(PlanError):
            VllmArgs(**kwargs)


def test_cli_engine_vllm_with_tp_prints_the_log_and_its_json():
    r = run(
        "bill",
        "meta-llama/Llama-3.1-70B-Instruct",
        "--gpu",
        "h100-sxm",
        "--inference",
        "--tp",
        "4",
        "--max-model-len",
        "32768",
        "--json",
    )
    assert r.exit_code == 0, r.output
    v = json.loads(r.stdout)["vllm"]
    assert v["tensor_parallel_size"] == 4 and v["starts"] is True
    assert v["kv_bytes_per_token"] == 2 * 80 * 2 * 128 * 2  # 8 KV heads / 4 ranks, 80 layers
    assert v["kv_cache_tokens"] == v["blocks"] * 16
    assert v["max_concurrency"] == round(v["blocks"] / (32768 // 16), 2)
    assert any(line.startswith("GPU KV cache size:") for line in v["log"])
    r = run(
        "bill", "meta-llama/Llama-3.1-8B", "--gpu", "24", "--inference", "--engine", "vllm", "--max-model-len", "131072"
    )
    assert r.exit_code == 0 and "does not start" in r.output and "longest that starts" in r.output


def test_serving_flags_need_inference():
    r = run("bill", "meta-llama/Llama-3.1-8B", "--gpu", "24", "--max-model-len", "4096")
    assert r.exit_code == 2 and "--inference" in r.output


def test_sliding_window_layers_are_grouped_as_vllms_hybrid_allocator_groups_them():
    # kv_cache_utils._get_kv_cache_groups_uniform_page_size: the group size is the smaller kind's count, or the
    # larger within 1.5× ("gpt-oss-20b + eagle, 12 sw + 13 full. We pad it to (13 sw, 13 full)")
    from memdoc.core.billing.vllm_startup import AttentionLayers, attention_layers

    assert AttentionLayers(full=13, sliding=12, window=128).group_size == 13
    gemma3 = attention_layers(resolve_model("google/gemma-3-27b-it"))
    # transformers 5.25's Gemma-3 default: every 6th of 62 layers is full → 10 full, 52 sliding of 1,024 tokens
    assert (gemma3.full, gemma3.sliding, gemma3.window, gemma3.group_size) == (10, 52, 1024, 10)
    assert (gemma3.full_groups, gemma3.sliding_groups) == (1, 6)  # 52 → 60 slots: "Add 8 padding layers"
    gemma2 = attention_layers(resolve_model("google/gemma-2-9b"))
    assert (gemma2.full, gemma2.sliding, gemma2.window) == (21, 21, 4096)
    # a sliding layer holds cdiv(min(window − 1 + max_num_batched_tokens, max_model_len), 16) + 1 blocks
    assert gemma3.sliding_blocks(131072, 8192) == -(-(1023 + 8192) // 16) + 1
    assert attention_layers(resolve_model("google/gemma-3-27b-it"), "0.9.0").sliding == 0  # before the hybrid manager
    assert attention_layers(resolve_model("meta-llama/Llama-3.1-8B")).sliding == 0


def test_hybrid_cache_reports_blocks_per_group_and_admits_more_requests():
    model, gpu = resolve_model("google/gemma-3-27b-it"), resolve_gpu("h100-sxm")
    new = vllm_startup(model, PLAN, gpu, VllmArgs(max_model_len=32768))
    old = vllm_startup(model, PLAN, gpu, VllmArgs(max_model_len=32768, version="0.9.0"))
    assert new.groups == 7 and new.kv_cache_tokens == new.blocks // 7 * 16
    # one request: 1 full group × 2,048 blocks + 6 sliding groups × 577 blocks, from one pool
    assert new.max_concurrency == pytest.approx(new.blocks / (2048 + 6 * (-(-(1023 + 8192) // 16) + 1)), abs=0.01)
    assert new.max_concurrency > 2 * old.max_concurrency  # the sliding layers no longer hold the whole context
