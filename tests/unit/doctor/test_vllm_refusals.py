"""vLLM's start-up refusals (tests/fixtures/oom-logs/vllm-*.log, each quoting a published log): the max_model_len
the log's own figures allow, read by `prescribe --log`."""

import json

import pytest
from conftest import FIXTURES, invoke

from memdoc.core.doctor.diagnosis import diagnose_oom
from memdoc.core.doctor.oom import parse_oom_log as parse_oom

LOGS = FIXTURES / "oom-logs"
GiB = 1024**3


def body(name: str) -> str:
    return (LOGS / f"{name}.log").read_text(encoding="utf-8").partition("\n\n")[2]


@pytest.mark.parametrize(
    ("name", "allowed"),
    [
        ("vllm-kv-cache", 44560),  # "... stored in KV cache (44560)"
        ("vllm-max-seq-len-v0", 23648),  # vllm#10517: 1,478 blocks × 16
        ("vllm-kv-needed-v1", 5632),  # tpu-inference#223: "the estimated maximum model length is 5632"
        ("vllm-no-cache-blocks-v1", 0),  # vllm#27508: no block fits
    ],
)
def test_the_refusal_answers_with_the_max_model_len_its_figures_allow(name, allowed):
    d = diagnose_oom(body(name))
    assert d.event.max_model_len_allowed == allowed
    if allowed:
        assert d.causes[0].fix.startswith(f"--max-model-len {allowed} starts")
    else:
        assert d.causes[0].fix.startswith("no max_model_len starts")


def test_the_v0_log_s_own_kv_cache_size_is_read_beside_the_error():
    event = diagnose_oom(body("vllm-max-seq-len-v0")).event
    assert event.kv_cache_available == round(2.89 * GiB)  # "kv_cache_size=2.89GiB"
    assert event.kv_cache_available // (16 * 131072) * 16 == pytest.approx(23648, rel=0.01)  # its 1,478 blocks


def test_negative_available_memory_and_zero_blocks_are_refusals():
    # vLLM V1 logs "Available KV cache memory: %.2f GiB" (gpu_worker.py) before check_enough_kv_cache_memory
    # raises; V0 logs "# GPU blocks: %d" before raise_if_cache_size_invalid
    v1 = (
        "INFO [gpu_worker.py:276] Available KV cache memory: -0.21 GiB\n"
        "ValueError: No available memory for the cache blocks."
    )
    event = parse_oom(v1)[0]
    assert event.variant == "no-cache-blocks" and event.kv_cache_available == -round(0.21 * GiB)
    assert "available KV-cache memory is -215.04 MiB" in diagnose_oom(v1).causes[0].evidence  # -0.21 GiB
    v0 = "INFO 11-18 18:07:40 gpu_executor.py:122] # GPU blocks: 0, # CPU blocks: 21845"
    assert parse_oom(v0)[0].variant == "no-cache-blocks"


def test_prescribe_log_json_carries_the_allowed_max_model_len(tmp_path):
    path = tmp_path / "serve.log"
    path.write_text(body("vllm-kv-needed-v1"), encoding="utf-8")
    r = invoke("prescribe", "--log", str(path), "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["diagnosis"]["causes"][0]["fix"].startswith("--max-model-len 5632 starts")
    assert [p["id"] for p in data["prescriptions"]][:2] == ["infer-kv-quant", "infer-limit-context"]
