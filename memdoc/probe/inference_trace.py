"""Trace a generation prefill of the real transformers model under fake tensors (no GPU, no weights).

The model is built as for a training trace (`probe.build.build_model`, bf16/fp16/fp32 from the
plan, SDPA or eager attention), switched to eval mode, and fed `batch` sequences of `context`
tokens under `torch.inference_mode()` into a `DynamicCache` — all at once, or `chunk` tokens at a
time as `generate(prefill_chunk_size=chunk)` does — computing the logits of the last position
only (`logits_to_keep=1`, as `generate` does). memdoc's MemTracker reports the peak of live
tensor bytes; the cache and weights are read off the objects.
"""

from __future__ import annotations

from dataclasses import dataclass

from memdoc.core.model.plan import TrainingPlan
from memdoc.errors import ConfigError
from memdoc.probe.tracer import MAX_TRACED_LAYERS, layer_count, layer_period


@dataclass(frozen=True)
class InferenceTrace:
    peak: int
    """Peak bytes of live tensors during the prefill (≈ torch.cuda.max_memory_allocated)."""
    weights: int
    kv_cache: int
    """The cache after the prefill."""

    @property
    def activations(self) -> int:
        """What the peak holds beyond weights and the full cache."""
        return self.peak - self.weights - self.kv_cache

    def to_json(self) -> dict:
        return {
            "weights": self.weights,
            "kv_cache": self.kv_cache,
            "activations": self.activations,
            "peak_allocated": self.peak,
        }


def trace_prefill(
    config: dict, plan: TrainingPlan, *, chunk: int | None = None, vocab_size: int, max_layers: int = MAX_TRACED_LAYERS
) -> InferenceTrace:
    """Peak of a prefill of `plan.micro_batch` × `plan.seq_len` tokens (see the module docstring).

    Beyond `max_layers` decoder layers (`tracer.MAX_TRACED_LAYERS`), the model is traced at 2, 3 and 4 layer
    periods (`tracer.layer_period`) and the peak, weights and cache are extrapolated along the line through the
    first two, once the third lies on it (weights and cache grow by the same bytes per period, a layer's
    transients are the same at every depth), as the training trace does (`tracer._trace_extrapolated`): the
    cost stays flat in the layer count. Layers that do not repeat are refused beyond `max_layers`."""
    n = layer_count(config)
    if n <= max_layers:
        return _trace(config, plan, chunk, vocab_size, None)
    period = layer_period(config)
    if period is None or 4 * period > max_layers:
        raise ConfigError(
            f"diagnose --inference cannot trace {n:,} layers that do not repeat ({max_layers} at most); "
            "memdoc bill --inference estimates any layer count"
        )
    ka, kb, kc = 2 * period, 3 * period, 4 * period
    a, b, c = (_trace(config, plan, chunk, vocab_size, k) for k in (ka, kb, kc))
    if _line(a, b, ka, kb, kc) != c:
        raise ConfigError(
            f"diagnose --inference cannot trace {n:,} layers: short traces of {ka}, {kb} and {kc} layers do not "
            f"grow linearly ({max_layers} layers at most otherwise); memdoc bill --inference estimates any count"
        )
    return _line(a, b, ka, kb, n)


def _line(a: InferenceTrace, b: InferenceTrace, ka: int, kb: int, n: int) -> InferenceTrace:
    """The trace at `n` layers on the line through `a` (at `ka` layers) and `b` (at `kb`)."""

    def at(x: int, y: int) -> int:
        return y + (y - x) * (n - kb) // (kb - ka)

    return InferenceTrace(
        peak=at(a.peak, b.peak), weights=at(a.weights, b.weights), kv_cache=at(a.kv_cache, b.kv_cache)
    )


def _trace(config: dict, plan: TrainingPlan, chunk: int | None, vocab_size: int, layers: int | None) -> InferenceTrace:
    """One prefill trace of the model with `layers` decoder layers (None: as configured)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from transformers import DynamicCache

    from memdoc.probe.build import build_model
    from memdoc.probe.memtrack import PhaseMemTracker, masks_as_in_eager_execution

    with FakeTensorMode(), masks_as_in_eager_execution():
        model = build_model(config, plan, layers).eval()
        ids = torch.randint(0, vocab_size, (plan.micro_batch, plan.seq_len))
        tracker = PhaseMemTracker()
        tracker.track_external(model, ids)
        with tracker, torch.inference_mode():
            cache = DynamicCache(config=model.config)
            for piece in torch.split(ids, chunk or plan.seq_len, dim=-1):
                model(piece, cache=cache, use_cache=True, logits_to_keep=1)
                tracker.reset_mod_stats()  # MemTracker refuses a second forward otherwise
        weights = sum(p.untyped_storage().nbytes() for p in model.parameters())
        kv = sum(
            t.untyped_storage().nbytes()
            for layer in cache.layers
            for t in (layer.keys, layer.values)
            if t is not None and t.dim()
        )
        return InferenceTrace(peak=tracker.peak_bytes, weights=weights, kv_cache=kv)
