"""Naming the tensor of "Tried to allocate X": one test per tensor kind on catalog models.

Expected sizes are computed here from the shapes (batch × seq × vocab × 4 and so on), printed the
way c10 prints the allocator's segment (`format_size`, 2 decimals), and fed back through a real
OOM message and `memdoc prescribe`.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from memdoc.cli import app
from memdoc.core.doctor.culprit import allocation_bytes, find_culprit

runner = CliRunner()
MiB, GiB = 1024**2, 1024**3


def _segment(n: int) -> int:
    """c10 get_allocation_size(round_size(n)), written from CUDACachingAllocator.cpp."""
    n = ((n + 511) // 512) * 512
    if n <= MiB:
        return 2 * MiB
    if n < 10 * MiB:
        return 20 * MiB
    return ((n + 2 * MiB - 1) // (2 * MiB)) * (2 * MiB)


def _format_size(n: int) -> str:
    """c10::format_size."""
    if n <= 1024:
        return f"{n} bytes"
    if n <= MiB:
        return f"{n / 1024:.2f} KiB"
    if n <= GiB:
        return f"{n / MiB:.2f} MiB"
    return f"{n / GiB:.2f} GiB"


def _oom(tensor_bytes: int, frames: str = "") -> str:
    return frames + (
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {_format_size(_segment(tensor_bytes))}. GPU 0 "
        "has a total capacity of 79.19 GiB of which 1.00 GiB is free. Of the allocated memory 75.00 GiB is allocated "
        "by PyTorch, and 1.00 GiB is reserved by PyTorch but unallocated."
    )


def _culprit(text: str, *args: str) -> dict:
    result = runner.invoke(app, ["prescribe", "--log", "-", "--json", *args], input=text)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


FRAME = 'Traceback (most recent call last):\n  File "/x/{path}", line 5, in {func}\n    {code}\n'


def test_allocation_rounding_rules():
    assert allocation_bytes(1) == 2 * MiB and allocation_bytes(MiB) == 2 * MiB
    assert allocation_bytes(MiB + 1) == 20 * MiB and allocation_bytes(10 * MiB - 512) == 20 * MiB
    assert allocation_bytes(10 * MiB) == 10 * MiB and allocation_bytes(10 * MiB + 1) == 12 * MiB


def test_fp32_logits():
    # Llama-3.1-8B, micro-batch 2 × 4096 tokens × 128,256 vocab × 4 B (the loss upcast)
    n = 2 * 4096 * 128256 * 4
    out = _culprit(_oom(n), "meta-llama/Llama-3.1-8B", "--method", "lora", "--batch", "2", "--seq", "4096")
    c = out["oom"]["culprit"]
    assert (c["item"], c["shape"], c["bytes"]) == ("logits", [2, 4096, 128256], n)
    first = out["prescriptions"][0]
    assert first["shrinks_culprit"] and first["why"] in ("logits", "activations")
    assert any(
        p["id"].endswith("chunked-loss") or p["id"].endswith("chunked-cross-entropy")
        for p in out["prescriptions"]
        if p["shrinks_culprit"]
    )


def test_eager_attention_scores():
    # Llama-2-7B eager: 1 × 32 heads × 4096² fp32 scores = 2 GiB
    n = 1 * 32 * 4096 * 4096 * 4
    out = _culprit(
        _oom(n), "meta-llama/Llama-2-7b-hf", "--attention", "eager", "--batch", "1", "--seq", "4096", "--method", "lora"
    )
    c = out["oom"]["culprit"]
    assert (c["item"], c["shape"], c["note"]) == ("activations", [1, 32, 4096, 4096], None)
    assert "attention scores" in c["name"]


def test_attention_scores_under_an_sdpa_plan_say_eager_ran():
    n = 1 * 32 * 4096 * 4096 * 4
    out = _culprit(_oom(n), "meta-llama/Llama-2-7b-hf", "--batch", "1", "--seq", "4096", "--method", "lora")
    c = out["oom"]["culprit"]
    assert c["shape"] == [1, 32, 4096, 4096] and "eager" in c["note"]
    assert out["prescriptions"][0]["id"] == "long-flash-attention"  # putting attention back on SDPA/flash comes first


def test_mlp_intermediate():
    # Qwen2.5-7B (intermediate 18,944), bf16, 4 × 4096 tokens: one gate/up/act output = 592 MiB
    n = 4 * 4096 * 18944 * 2
    out = _culprit(_oom(n), "Qwen/Qwen2.5-7B", "--method", "lora", "--batch", "4", "--seq", "4096")
    c = out["oom"]["culprit"]
    assert (c["item"], c["shape"], c["bytes"]) == ("activations", [4, 4096, 18944], n)


def test_foreach_optimizer_temporary():
    # Full fine-tuning of Llama-3.1-8B in pure bf16 with foreach AdamW: the embedding-shaped
    # temporary (128,256 × 4,096 × 2 B) at the optimizer step
    n = 128256 * 4096 * 2
    frames = FRAME.format(
        path="torch/optim/adamw.py",
        func="_multi_tensor_adamw",
        code="exp_avg_sq_sqrt = torch._foreach_sqrt(device_exp_avg_sqs)",
    )
    out = _culprit(_oom(n, frames), "meta-llama/Llama-3.1-8B", "--method", "full", "--optimizer", "adamw")
    c = out["oom"]["culprit"]
    assert (c["item"], c["shape"]) == ("optimizer", [128256, 4096]) and "foreach" in c["name"]
    assert out["diagnosis"]["phase"] == "optimizer"


def test_embedding_gradient():
    # Mistral-7B full fine-tuning in fp32: embedding gradient 32,000 × 4,096 × 4 B = 500 MiB, in backward
    n = 32000 * 4096 * 4
    frames = FRAME.format(
        path="torch/autograd/graph.py",
        func="_engine_run_backward",
        code="return Variable._execution_engine.run_backward(",
    )
    out = _culprit(_oom(n, frames), "mistralai/Mistral-7B-v0.1", "--method", "full", "--precision", "fp32")
    c = out["oom"]["culprit"]
    assert (c["item"], c["shape"], c["name"]) == ("gradients", [32000, 4096], "embed_tokens gradient")


def test_kv_cache_layer():
    # generation with Llama-3.1-8B: one layer's K cache, 8 sequences × 8 KV heads × 8192 × 128 × 2 B = 128 MiB
    n = 8 * 8 * 8192 * 128 * 2
    frames = FRAME.format(
        path="transformers/generation/utils.py", func="_sample", code="outputs = self(**model_inputs)"
    )
    out = _culprit(_oom(n, frames), "meta-llama/Llama-3.1-8B", "--batch", "8", "--seq", "8192")
    assert out["symptom"] == "inference-oom"
    c = out["oom"]["culprit"]
    assert (c["item"], c["shape"]) == ("kv_cache", [8, 8, 8192, 128])


def test_no_match_is_null():
    out = _culprit(_oom(777 * MiB), "meta-llama/Llama-3.1-8B", "--method", "lora", "--batch", "1", "--seq", "1024")
    assert out["oom"]["culprit"] is None


@pytest.mark.parametrize("printed", [2 * MiB, 20 * MiB])
def test_small_segments_name_nothing(printed):
    assert find_culprit(printed, []) is None


@pytest.mark.parametrize("method", ["full", "lora"])
def test_every_catalog_model_lists_its_tensors(method):
    from memdoc.core.doctor.culprit import plan_tensors
    from memdoc.core.model.plan import parse_plan
    from memdoc.resolve.models import catalog_ids, resolve_model

    for model_id in catalog_ids():
        model = resolve_model(model_id)
        plan = parse_plan(method=method, micro_batch=2, seq_len=512, lora_targets=model.default_lora_targets)
        for inference in (False, True):
            tensors = plan_tensors(model, plan, inference=inference)
            assert tensors and all(t.bytes > 0 and len(t.shape) >= 2 for t in tensors), model_id
            logits = [t for t in tensors if t.item == "logits" and t.phase == "loss"]
            if not inference:
                assert logits[0].bytes == 4 * 2 * 512 * model.vocab_size
