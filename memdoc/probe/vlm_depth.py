"""A VLM's step traced at short depths of both stacks — language model and vision tower — and extrapolated to both.

A text model's step is traced at 2p, 3p and 4p decoder layers and extrapolated linearly (`probe/tracer.py`); a VLM
also runs its vision tower, whose blocks cost as much tracing time as the language model's layers (Qwen2.5-VL's 32
windowed-attention blocks run hundreds of small attention calls). Every line item of a step is linear in each
depth separately (each block's saved tensors and weights add), so four traces fix it: (k0, v1), (k1, v1), (k0,
v2) give the per-layer and per-block slopes, and (k2, v2) checks the sum; when the check disagrees the caller
traces the whole tower instead.

The tower's record says how its blocks repeat (`Tower.period`): with period 1 (SigLIP, Idefics3, Pixtral: identical
blocks) or with Qwen2.5-VL's full-attention blocks (`fullatt_block_indexes`, every 8th: period 8, the indexes cut
with the depth, `modeling_qwen2_5_vl.py` `Qwen2_5_VisionTransformerPretrainedModel.forward`, transformers 5.24).
Towers with other per-block roles (Qwen3-VL's DeepStack taps, Llama-3.2-Vision's global layers) are traced whole.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

from memdoc.core.billing.vocabulary import LINE_ITEMS
from memdoc.core.model.plan import TrainingPlan
from memdoc.core.model.vision.registry import tower_of

TOLERANCE = 1e-3
"""Relative disagreement of the check trace that sends the caller to a whole-tower trace (the tracer's own)."""


def tower_depth(config: dict) -> int:
    """The vision tower's blocks (its record's count of `vision_config`)."""
    return tower_of(config).count(config.get("vision_config") or {}).layers


def tower_period(config: dict) -> int | None:
    """Blocks after which the tower repeats; None when its blocks have other roles (traced whole)."""
    return tower_of(config).period(config.get("vision_config") or {}, tower_depth(config))


def with_tower_depth(config: dict, blocks: int) -> dict:
    """A copy of the VLM config with its tower cut to `blocks` blocks (Qwen2.5-VL's full-attention indexes cut too)."""
    out = copy.deepcopy(config)
    tower_of(config).cut(out.setdefault("vision_config", {}), blocks)
    return out


def _total(items: dict) -> int:
    return sum(items[k] for k in LINE_ITEMS)


def _plane(f00: dict, f10: dict, f01: dict, dk: tuple[int, int], dv: tuple[int, int]) -> dict:
    """Per phase and item: f00 + the layer slope × dk[0] / dk[1] + the block slope × dv[0] / dv[1]."""
    out = {}
    for phase in set(f00) & set(f10) & set(f01):
        a, b, c = f00[phase], f10[phase], f01[phase]
        out[phase] = {k: a[k] + (b[k] - a[k]) * dk[0] // dk[1] + (c[k] - a[k]) * dv[0] // dv[1] for k in a}
    return out


def _agrees(pred: dict, actual: dict) -> bool:
    if set(pred) != set(actual):
        return False
    for phase in pred:
        scale = TOLERANCE * max(_total(actual[phase]), 1)
        if abs(_total(pred[phase]) - _total(actual[phase])) > scale:
            return False
        if any(abs(pred[phase][k] - actual[phase][k]) > scale for k in LINE_ITEMS):
            return False
    return True


def trace_both_depths(
    config: dict, plan: TrainingPlan, ks: tuple[int, ...], n_layers: int, once: Callable, notes: list[str]
) -> tuple[dict, dict] | None:
    """(phases, module activations) of the whole VLM from four short traces (`ks[0..2]` layers; one and two tower
    periods), or None when the tower does not repeat, is too short to gain, or the check trace disagrees."""
    period, depth = tower_period(config), tower_depth(config)
    if period is None or depth < 3 * period:
        return None
    v1, v2 = period, 2 * period
    short = {v: with_tower_depth(config, v) for v in (v1, v2)}
    f00, _, more = once(short[v1], plan, ks[0])
    f10, _, _ = once(short[v1], plan, ks[1])
    f01, _, _ = once(short[v2], plan, ks[0])
    f22, acts, _ = once(short[v2], plan, ks[2])
    dk = ks[1] - ks[0]
    if not _agrees(_plane(f00, f10, f01, (ks[2] - ks[0], dk), (1, 1)), f22):
        return None
    notes += more
    notes.append(
        f"traced {ks[0]}/{ks[1]}/{ks[2]} of {n_layers} layers with {v1}/{v2} of {depth} vision blocks; "
        "extrapolated linearly in both to the whole model"
    )
    return _plane(f00, f10, f01, (n_layers - ks[0], dk), (depth - v1, v2 - v1)), acts


__all__ = ["tower_depth", "tower_period", "trace_both_depths", "with_tower_depth"]
