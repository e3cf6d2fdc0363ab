"""vLLM's start-up refusals in a log: the figures around the error, and the max_model_len they allow.

vLLM refuses to start when one request of `max_model_len` tokens does not fit the KV-cache memory left after the
weights, the profile run and the memory outside torch (`vllm/v1/core/kv_cache_utils.py:
check_enough_kv_cache_memory`; V0: `vllm/worker/worker.py: raise_if_cache_size_invalid`). Its messages:

- V0: "The model's max seq len (29000) is larger than the maximum number of tokens that can be stored in KV cache
  (23648)" — the cache holds 23,648 tokens (GPU blocks × 16), so `--max-model-len 23648` starts;
- V1: "To serve at least one request with the model's max seq len (40960), (5.62 GiB KV cache is needed, which is
  larger than the available KV cache memory (4.50 GiB). Based on the available memory, the estimated maximum model
  length is 32768." — the estimate is vLLM's own (`estimate_max_model_len`); without it, the available memory over
  the bytes per token, in blocks of 16;
- "No available memory for the cache blocks" (V0 and V1, after "# GPU blocks: 0" or a negative "Available KV cache
  memory: -0.21 GiB"): no block fits; no max_model_len starts at this utilization.
"""

from __future__ import annotations

import re
from dataclasses import replace

from memdoc.core.doctor.oom_event import OomEvent, size_to_bytes

BLOCK_TOKENS = 16
"""vLLM's default block size: the cache is whole blocks of 16 tokens."""

_ESTIMATE = re.compile(r"estimated\s+maximum\s+model\s+length\s+is\s+([\d,]+)")
_AVAILABLE = re.compile(
    r"(?:Available KV cache memory:\s*|the rest of the memory reserved for KV Cache is\s*|kv_cache_size=)"
    r"(-?[\d.]+)\s*(GiB|MiB|GB|MB)"
)


def allowed_max_model_len(event: OomEvent) -> int | None:
    """The longest max_model_len the event's figures allow (see the module docstring); None when they do not tell."""
    if event.variant == "max-seq-len":
        return event.kv_cache_tokens
    if event.variant == "no-cache-blocks":
        return 0
    if event.variant == "kv-needed" and event.kv_cache_needed and event.max_model_len:
        if event.max_model_len_allowed is not None:
            return event.max_model_len_allowed
        per_token = event.kv_cache_needed / event.max_model_len
        return int(max(0, event.kv_cache_available or 0) / per_token) // BLOCK_TOKENS * BLOCK_TOKENS
    return None


def with_log_figures(event: OomEvent, text: str) -> OomEvent:
    """The event with the figures its log states beside the error: vLLM's own estimate of the max_model_len after
    a V1 refusal, and the last available KV-cache memory printed before it (negative when the weights and the
    profile exceed the budget); then the max_model_len those figures allow."""
    estimate = _ESTIMATE.search(text, event.position, event.position + 2000)
    if estimate and event.variant == "kv-needed":
        event = replace(event, max_model_len_allowed=int(estimate.group(1).replace(",", "")))
    if event.kv_cache_available is None:
        before = list(_AVAILABLE.finditer(text, 0, event.position))
        if before:
            number, unit = before[-1].group(1), before[-1].group(2)
            sign = -1 if number.startswith("-") else 1
            event = replace(event, kv_cache_available=sign * size_to_bytes(number.lstrip("-"), unit))
    return replace(event, max_model_len_allowed=allowed_max_model_len(event))


__all__ = ["allowed_max_model_len", "with_log_figures"]
