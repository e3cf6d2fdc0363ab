"""The generation of an online post-training step (GRPO, RLOO) under fake tensors: what `generate` allocates.

TRL 1.16's `GRPOTrainer._generate` (and `RLOOTrainer`'s) runs `unwrapped_model.generate(**generate_inputs)` under
`torch.no_grad()` on the whole per-process generation batch at once (`trl/trainer/grpo_trainer.py`, the
transformers branch). A sampled `generate` is data-dependent (sampling, end-of-sequence tests), so it cannot run on
fake tensors; what it allocates can. transformers 5.24's `GenerationMixin._sample` runs one prefill of the prompt
into a `DynamicCache`, keeping the logits of the last position only (`logits_to_keep=1`, upcast to fp32 for the
logits processors), then one decode step per further token. Generating C tokens takes the prefill (token 1) and
C − 1 decode steps (tokens 2..C); the last token is never fed back, so the cache ends at prompt + C − 1 tokens.
Each decode step's `DynamicLayer.update` concatenates one token onto a layer's keys and values (`torch.cat`: the
old and the new tensor coexist for a moment), so the peak is at the last decode step. This module traces:

1. the prefill of `rows` × prompt tokens (`logits_to_keep=1`, the fp32 copy of the last logits);
2. the cache grown to prompt + C − 2 tokens by concatenation (what steps 2..C − 1 leave; their transients are those
   of the last step, smaller cache);
3. the last decode step (one token per row), whose cache update brings it to prompt + C − 1.

The model runs in eval mode (so transformers keeps the cache under gradient checkpointing, as TRL's
`unwrap_model_for_generation` disables checkpointing for generation). Rows are all full length: every completion
reaches `max_completion_length`, no padding (the worst case the memory must hold).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, Optional

Phase = Optional[Callable[[str], contextlib.AbstractContextManager]]
"""The tracker's phase tagging (`PhaseMemTracker.phase`), or None."""


@dataclass(frozen=True)
class GenerationShape:
    """What one process generates at once."""

    rows: int
    """Completions generated together on this GPU (the per-process generation batch)."""
    prompt: int
    """Prompt tokens per row (`plan.seq_len` for the online tasks)."""
    completion: int
    """Completion tokens per row (`max_completion_length`)."""

    @property
    def cached_tokens(self) -> int:
        """Tokens per row in the cache when the last token is sampled: the prompt and all completion tokens but the
        last, which is never fed back (`GenerationMixin._sample`)."""
        return self.prompt + self.completion - 1


def generation_shape(plan) -> GenerationShape:
    """The per-process generation batch of an online plan: TRL's `generation_batch_size` (default: per-device
    batch × processes × `steps_per_generation`, which defaults to the accumulation steps; `grpo_config.py`
    `GRPOConfig.__post_init__`) divided over the data-parallel processes."""
    dp = plan.dp_size
    rows = plan.generation_batch // dp if plan.generation_batch else plan.micro_batch * plan.grad_accum
    return GenerationShape(rows=rows, prompt=plan.seq_len, completion=plan.completion_len)


def kv_cache_bytes(cache) -> int:
    """Bytes of the keys and values a `DynamicCache` holds."""
    return sum(
        t.untyped_storage().nbytes()
        for layer in cache.layers
        for t in (getattr(layer, "keys", None), getattr(layer, "values", None))
        if t is not None and t.dim()
    )


def _grow(cache, tokens: int) -> None:
    """Append `tokens` positions to every layer of `cache` by concatenation, as `DynamicLayer.update` does one token
    per decode step (a sliding-window layer keeps its window, `DynamicSlidingWindowLayer`)."""
    import torch

    for layer in cache.layers:
        keys, values = layer.keys, layer.values
        add = tokens
        window = getattr(layer, "sliding_window", None)
        if window:
            add = max(0, min(keys.shape[-2] + tokens, window - 1) - keys.shape[-2])
        if add <= 0:
            continue
        shape = (*keys.shape[:-2], add, keys.shape[-1])
        layer.keys = torch.cat([keys, keys.new_zeros(shape)], dim=-2)
        del keys
        layer.values = torch.cat([values, values.new_zeros(shape)], dim=-2)
        del values


def trace_generation(
    model, shape: GenerationShape, vocab: int, reset: Callable[[], None] = lambda: None, phase: Phase = None
) -> int:
    """Run the allocations of `model.generate` for `shape` (see the module docstring); returns the cache's bytes at
    the end. Call inside FakeTensorMode; `reset()` runs before each forward after the first (MemTracker refuses a
    second forward of a module otherwise); `phase(name)` tags the prefill `generation:prefill` and the decode step
    `generation`: their peaks grow at different rates with depth (transients vs the cache), so a tracer that
    extrapolates from short models extrapolates each and keeps the larger (`tracer._merge_subphases`)."""
    import torch
    from transformers import DynamicCache

    phase = phase or (lambda name: contextlib.nullcontext())

    training = model.training
    model.eval()
    try:
        with torch.no_grad():
            with phase("generation:prefill"):
                cache = DynamicCache(config=model.config)
                ids = torch.randint(0, vocab, (shape.rows, shape.prompt))
                out = model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
                logits = out.logits[:, -1, :].to(copy=True, dtype=torch.float32)
                del out
            with phase("generation"):
                if shape.completion >= 2:
                    _grow(cache, shape.completion - 2)
                    nxt = torch.randint(0, vocab, (shape.rows, 1))
                    reset()
                    out = model(input_ids=nxt, past_key_values=cache, use_cache=True, logits_to_keep=1)
                    logits = out.logits[:, -1, :].to(copy=True, dtype=torch.float32)
                    del out
                del logits
            size = kv_cache_bytes(cache)
            del cache
    finally:
        model.train(training)
    return size


__all__ = ["GenerationShape", "generation_shape", "kv_cache_bytes", "trace_generation"]
