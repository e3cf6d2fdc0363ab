"""Prescriptions the log shows are already in effect: set apart, never ranked.

`already_done(log_text, event)` maps a log to {prescription id: what in the log shows it}. A
setting counts when the log states it as set (a traceback line `from_pretrained(…,
torch_dtype=torch.bfloat16)`, a printed `TrainingArguments(… gradient_checkpointing=True …)`,
`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` outside PyTorch's own advice sentence) or the
engine always does it: vLLM runs every forward under `torch.inference_mode()` (vLLM
`vllm/worker/model_runner.py` and `vllm/v1/worker/gpu_model_runner.py`: `execute_model` is
decorated `@torch.inference_mode()`), and a traceback through DeepSpeed's
`runtime/zero/stage3.py` is already ZeRO-3. A fix for one engine does not apply to a traceback through the
other: the ZeRO-3 save setting under FSDP, FSDP's state-dict type under DeepSpeed (`_ENGINE_ONLY`).

Pure: regular expressions over text.
"""

from __future__ import annotations

import re

from memdoc.core.doctor.logtext import normalise_log
from memdoc.core.doctor.oom_event import OomEvent

__all__ = ["already_done"]

_ADVICE = re.compile(r"try\s+setting\s+PYTORCH_\w*ALLOC_CONF\s*=\s*expandable_segments\s*:\s*True", re.I)
"""c10/cuda/CUDACachingAllocator.cpp's OOM message advises the setting: that is not the setting."""

_SEEN: tuple[tuple[tuple[str, ...], re.Pattern[str], str], ...] = (
    (
        ("startup-load-bf16",),
        re.compile(r"\b(?:torch_)?dtype\s*=\s*torch\.bfloat16|[\"'](?:torch_)?dtype[\"']\s*:\s*[\"']bfloat16"),
        "the log shows the weights loaded in bf16 (dtype=torch.bfloat16)",
    ),
    (
        ("midrun-expandable-segments",),
        re.compile(r"expandable_segments\s*:\s*True", re.I),
        "the log shows PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True already set",
    ),
    (
        ("midrun-checkpointing", "long-checkpointing"),
        re.compile(r"\b(?:gradient|activation)_checkpointing\s*[=:]\s*True\b", re.I),
        "the log shows activation (gradient) checkpointing already on",
    ),
    (
        ("midrun-chunked-cross-entropy", "long-chunked-loss", "ckptns-chunked-loss"),
        re.compile(r"\buse_liger_kernel\s*[=:]\s*True\b", re.I),
        "the log shows use_liger_kernel=True (fused linear cross-entropy)",
    ),
    (
        ("startup-paged-8bit-adam", "midrun-paged-8bit-adam"),
        re.compile(r"\boptim\s*[=:]\s*(?:OptimizerNames\.)?['\"]?paged_adamw_8bit", re.I),
        "the log shows optim=paged_adamw_8bit",
    ),
    (
        ("startup-shard-zero3", "ckptns-shard"),
        re.compile(r"runtime/zero/stage3\.py|DeepSpeedZeroOptimizer_Stage3|\"stage\"\s*:\s*3\b"),
        "the traceback runs through DeepSpeed ZeRO-3 (deepspeed/runtime/zero/stage3.py): already sharded",
    ),
)

_DEEPSPEED = re.compile(r"/deepspeed/|\bdeepspeed\.runtime\b|DeepSpeedEngine")
_FSDP = re.compile(
    r"/torch/distributed/fsdp/|FullyShardedDataParallel|\bfully_shard\b|/accelerate/utils/fsdp_utils\.py"
)
_ENGINE_ONLY: tuple[tuple[str, re.Pattern[str], re.Pattern[str], str], ...] = (
    ("save-zero3-sharded", _FSDP, _DEEPSPEED, "the traceback is FSDP's, not DeepSpeed's: a ZeRO-3 setting"),
    ("save-fsdp-sharded", _DEEPSPEED, _FSDP, "the traceback is DeepSpeed's, not FSDP's: an FSDP setting"),
)
"""(prescription id, the engine the traceback shows, the engine the fix is for, why it does not apply)."""

_VLLM = re.compile(r"/vllm/|\bvllm\.(?:engine|v1|worker|entrypoints)\b")


def already_done(log_text: str | None, event: OomEvent | None = None) -> dict[str, str]:
    """{prescription id: the evidence} for each prescription the log shows is already in effect."""
    text = _ADVICE.sub(" ", normalise_log(log_text or ""))
    done: dict[str, str] = {}
    for ids, pattern, evidence in _SEEN:
        if pattern.search(text):
            done |= dict.fromkeys(ids, evidence)
    for pid, shown, needed, evidence in _ENGINE_ONLY:
        if shown.search(text) and not needed.search(text):
            done[pid] = f"does not apply: {evidence}"
    if (event is not None and event.format == "vllm-kv-cache") or _VLLM.search(text):
        done["infer-no-grad"] = (
            "vLLM always runs the model under torch.inference_mode() (vllm/v1/worker/gpu_model_runner.py "
            "GPUModelRunner.execute_model)"
        )
    return done
