"""The dataset's lengths against the plan: which samples fit, and what to do about those that do not.

Pure arithmetic on token counts (tokenizing is `memdoc.resolve.dataset`). One sample's memory is
set by its length, so the longest samples decide whether a run survives (the long-sample OOM):

- `length_stats`: samples, max, p99, p50 of the token counts. Percentiles are nearest-rank: the
  p-th is the ⌈p/100 · n⌉-th smallest count, a length that occurs in the data.
- `dataset_fit`: the longest sequence that fits the plan on the GPU comfortably, by the one fit rule
  (`maximum.maximum`: more headroom than the bill's error band; multiples of 128 tokens, at the plan's
  micro-batch), capped by the user's `--seq` (their max_length) when given and by the model's context;
  the longest that fits at all (a close call past the comfortable one); how many samples are longer
  than the comfortable one; and the prescriptions that apply, with the numbers filled in:
  * ``long-cap-length`` — some samples are longer than what fits: cap max_length / cutoff_len /
    sequence_len there (those samples are truncated or must be dropped);
  * ``per-length-micro-batch`` — the longest sample does not fit at the plan's micro-batch but
    does alone (micro-batch 1): batch by a token budget (rows of what fits alone) instead of a
    sample count;
  * ``long-group-by-length`` — with micro-batch > 1 and a median under half the maximum, random
    batches pad short samples to the longest one in the batch: group similar lengths;
  * ``packing`` — the median sample is under half the length that fits: pack samples into rows of
    that length (no padding, every step the same, known size).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from memdoc.core.model.gpu import GpuSpec
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.plan import TrainingPlan
from memdoc.core.remedies.maximum import max_fitting, maximum
from memdoc.core.trainers.axolotl.keys import KEYS as AXOLOTL
from memdoc.core.trainers.hf.keys import KEYS as HF
from memdoc.core.trainers.registry import how
from memdoc.core.trainers.trl.keys import KEYS as TRL


@dataclass(frozen=True, kw_only=True)
class LengthStats:
    """Token counts of a dataset's samples."""

    samples: int
    max_tokens: int
    p99_tokens: int
    p50_tokens: int


def percentile(sorted_counts: list[int], p: float) -> int:
    """Nearest-rank percentile of an ascending list (the ⌈p/100 · n⌉-th smallest)."""
    rank = max(1, math.ceil(p / 100 * len(sorted_counts)))
    return sorted_counts[rank - 1]


def length_stats(counts: list[int]) -> LengthStats:
    ordered = sorted(counts)
    if not ordered:
        return LengthStats(samples=0, max_tokens=0, p99_tokens=0, p50_tokens=0)
    return LengthStats(
        samples=len(ordered),
        max_tokens=ordered[-1],
        p99_tokens=percentile(ordered, 99),
        p50_tokens=percentile(ordered, 50),
    )


@dataclass(frozen=True, kw_only=True)
class DatasetFit:
    """The lengths of a dataset against one plan."""

    stats: LengthStats
    max_seq_that_fits: int | None
    """Longest sequence that fits comfortably at the plan's micro-batch (capped by --seq and the context); None:
    none does."""
    over: int
    """Samples longer than `max_seq_that_fits` (all of them when nothing fits)."""
    max_seq_alone: int | None = None
    """Longest sequence that fits comfortably at micro-batch 1 (same cap), when the plan's micro-batch is larger."""
    max_seq_fits_at_all: int | None = None
    """Longest sequence that fits at all at the plan's micro-batch (same cap): past `max_seq_that_fits`, a close
    call; None when not even 128 tokens does."""
    prescriptions: list[dict] = field(default_factory=list)
    """{"id", "action", "how"} in the order to try them."""

    def to_json(self) -> dict:
        s = self.stats
        return {
            "samples": s.samples,
            "max_tokens": s.max_tokens,
            "p99_tokens": s.p99_tokens,
            "p50_tokens": s.p50_tokens,
            "max_seq_that_fits": self.max_seq_that_fits,
            "over": self.over,
            "max_seq_alone": self.max_seq_alone,
            "max_seq_fits_at_all": self.max_seq_fits_at_all,
            "prescriptions": list(self.prescriptions),
        }


def packed_rows(counts: list[int], seq: int) -> dict:
    """The samples packed into rows of `seq` tokens (each sample cut at `seq`, as TRL's "bfd" packing truncates
    overflow): `documents_per_row` (seq ÷ the mean sample), `document_tokens` (the length-weighted mean Σd²/Σd,
    which sets a packed row's attention: `TrainingPlan.document_tokens`), and `real_token_share_unpacked` (the share
    of a billed row's tokens that are real when each row holds one sample padded to `seq`)."""
    cut = [min(c, seq) for c in counts if c > 0]
    if not cut:
        return {"documents_per_row": 0.0, "document_tokens": None, "real_token_share_unpacked": 0.0}
    total = sum(cut)
    return {
        "documents_per_row": seq * len(cut) / total,
        "document_tokens": max(1, round(sum(c * c for c in cut) / total)),
        "real_token_share_unpacked": total / (seq * len(cut)),
    }


def _capped(value: int | None, cap: int | None) -> int | None:
    return value if value is None or cap is None else min(value, cap)


def dataset_fit(
    counts: list[int], model: ModelSpec, plan: TrainingPlan, gpu: GpuSpec, *, seq_cap: int | None
) -> DatasetFit:
    """Fit the token `counts` to `plan` on `gpu`; `seq_cap` is the user's --seq (None: only the context caps)."""
    stats = length_stats(counts)
    cap = min(c for c in (seq_cap, model.max_positions) if c) if (seq_cap or model.max_positions) else None
    longest = maximum(model, plan, gpu, "seq")
    fits = _capped(longest.comfortable, cap)
    alone = None
    if plan.micro_batch > 1:
        alone = _capped(max_fitting(model, plan.replace(micro_batch=1), gpu, "seq"), cap)
    over = sum(1 for c in counts if fits is None or c > fits)
    rx = [
        *_cap_length(stats, fits, over),
        *_per_length_micro_batch(stats, fits, alone, plan.micro_batch),
        *_group_by_length(stats, plan.micro_batch),
        *_packing(stats, fits),
    ]
    return DatasetFit(
        stats=stats,
        max_seq_that_fits=fits,
        over=over,
        max_seq_alone=alone,
        max_seq_fits_at_all=_capped(longest.fits, cap),
        prescriptions=rx,
    )


def _cap_length(stats: LengthStats, fits: int | None, over: int) -> list[dict]:
    """``long-cap-length`` when some samples are longer than what fits."""
    if fits is None or not over:
        return []
    share = over / stats.samples
    return [
        {
            "id": "long-cap-length",
            "action": f"Cap the length at {fits} tokens: {over} of {stats.samples} samples ({share:.1%}) are longer "
            "and will be truncated (or filter them out).",
            "how": how(seq_len=fits),
        }
    ]


def _per_length_micro_batch(stats: LengthStats, fits: int | None, alone: int | None, micro_batch: int) -> list[dict]:
    """``per-length-micro-batch`` when the longest sample fits alone but not at the plan's micro-batch."""
    if fits is None or alone is None or stats.max_tokens <= fits or alone <= fits:
        return []
    return [
        {
            "id": "per-length-micro-batch",
            "action": f"Batch by tokens instead of samples: one row of up to {alone} tokens fits (micro-batch 1), so "
            f"fill rows to that budget — the longest samples alone, short ones together — instead of "
            f"{micro_batch} samples of any length.",
            "how": {
                "trl": {TRL["packing"]: True, TRL["padding_free"]: True, HF["micro_batch"]: 1, TRL["seq_len"]: alone},
                "axolotl": {AXOLOTL["packing"]: True, AXOLOTL["micro_batch"]: 1, AXOLOTL["seq_len"]: alone},
            },
        }
    ]


def _group_by_length(stats: LengthStats, micro_batch: int) -> list[dict]:
    """``long-group-by-length`` when batches of several samples are mostly padding."""
    if micro_batch <= 1 or stats.p50_tokens * 2 >= stats.max_tokens:
        return []
    return [
        {
            "id": "long-group-by-length",
            "action": f"Group samples of similar length: the median sample ({stats.p50_tokens} tokens) is "
            "under half the "
            f"longest ({stats.max_tokens}), so random batches are mostly padding.",
            "how": {fmt: {HF["sampling"]: "group_by_length"} for fmt in ("hf", "trl")},
        }
    ]


def _packing(stats: LengthStats, fits: int | None) -> list[dict]:
    """``packing`` when the median sample is at most half the length that fits."""
    if fits is None or stats.p50_tokens * 2 > fits:
        return []
    return [
        {
            "id": "packing",
            "action": f"Pack samples into rows of {fits} tokens: the median sample is {stats.p50_tokens} tokens, so "
            "packing removes padding and every step has the same, fitting size.",
            "how": how(packing=True, seq_len=fits),
        }
    ]
