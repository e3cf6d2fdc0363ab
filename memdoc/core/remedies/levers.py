"""Levers: the plan changes a prescription names, and their place on the cost ladder.

A lever is a mapping of plan field to value (`{checkpointing: full}`, `{micro_batch: half}`, …).
`LEVERS` is the vocabulary the symptom knowledge base may use; `PLAN_LEVERS` the part that are
`TrainingPlan` fields, which `doctor.quantify` applies to the user's plan and bills. Both the plan
levers and their ranks (`LADDER_RANK`) are derived from the ladder's rungs (`rungs.RUNGS`): a lever
value is ranked where the ladder takes it,

    micro-batch (accumulation), fused loss, fused AdamW → checkpointing → bf16 → LoRA/QLoRA
    → 8-bit optimizer → optimizer offload → ZeRO-3/FSDP → weight offload

and a value two rungs share (bf16: from fp32 at ①, from AMP at ③) at the costlier of them, since a
prescription does not know the plan it will be applied to.
"""

from __future__ import annotations

from typing import Any

from memdoc.core.model.plan import (
    Allocator,
    Attention,
    Checkpointing,
    Loss,
    Method,
    Offload,
    Optimizer,
    Precision,
    Shard,
)
from memdoc.core.remedies.rungs import RUNGS, Rung

_RELATIVE = {"micro_batch": ("half", "double", "1"), "seq_len": ("cap", "half")}
_ENUMS = {
    "checkpointing": Checkpointing,
    "precision": Precision,
    "attention": Attention,
    "loss": Loss,
    "method": Method,
    "optimizer": Optimizer,
    "offload": Offload,
    "shard": Shard,
    "allocator": Allocator,
}
"""The plan fields a lever may name with all their values, in the knowledge base's order."""


def plan_levers(rungs: tuple[Rung, ...]) -> dict[str, tuple[Any, ...]]:
    """Every plan field a rung sets, and the enum fields and relative micro-batch and length a prescription
    may change, with the values a lever may give each: all of an enum's, else those the rungs carry."""
    names = dict.fromkeys((*_RELATIVE, *_ENUMS, *(name for rung in rungs for name in rung.lever)))
    out = {}
    for name in names:
        if name in _RELATIVE:
            out[name] = _RELATIVE[name]
        elif name in _ENUMS:
            out[name] = tuple(m.value for m in _ENUMS[name])
        else:
            out[name] = tuple(dict.fromkeys(v for rung in rungs for v in rung.lever.get(name, ())))
    return out


PLAN_LEVERS: dict[str, tuple[Any, ...]] = plan_levers(RUNGS)
"""Levers that are `TrainingPlan` fields: every rung's, plus sequence length and attention. micro_batch
'half' keeps the effective batch (accumulation doubles); seq_len 'cap' means "to the data's p99 length"
(the caller supplies the number)."""

INFERENCE_LEVERS: dict[str, tuple[Any, ...]] = {
    "kv_cache": ("fp8", "int4"),
    "weights": ("int8", "nf4"),
    "prefill_chunk": (2048,),
}
"""Levers of the inference plan (`core/billing/inference.py`), next to micro_batch and seq_len
(batch and context there); prescribe quantifies them against the inference bill."""

LEVERS: dict[str, tuple[Any, ...]] = {
    **PLAN_LEVERS,
    **INFERENCE_LEVERS,
    "optimizer_in_backward": (True,),
}
"""All lever keys and values. `optimizer_in_backward` is not a `TrainingPlan` field yet: the bill may ignore
it until it models it."""


def ladder_ranks(rungs: tuple[Rung, ...]) -> dict[tuple[str, Any], int]:
    """(plan field, value) -> the rank of the rung that carries it in its lever or its undo; the
    costlier rank where two rungs carry it (a prescription does not know the plan it meets)."""
    ranks: dict[tuple[str, Any], int] = {}
    for rung in rungs:
        if rung.rank is None:
            continue
        for name, values in (*rung.lever.items(), *rung.undo.items()):
            for value in values:
                ranks[(name, value)] = max(ranks.get((name, value), rung.rank), rung.rank)
    return ranks


LADDER_RANK: dict[tuple[str, Any], int] = ladder_ranks(RUNGS)
"""Position of a lever value on the cost ladder (1 = cheapest), from the rungs that carry it. Levers
not listed are off the ladder."""


def ladder_rank(lever: dict[str, Any] | None) -> int | None:
    """The highest ladder rank among a lever's changes, or None when none of them is on the ladder."""
    if not lever:
        return None
    ranks = [LADDER_RANK[(k, v)] for k, v in lever.items() if (k, v) in LADDER_RANK]
    return max(ranks) if ranks else None
