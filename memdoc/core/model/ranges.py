"""The range of every number a plan or a flag takes, and where each bound comes from.

A bound is what exists (the largest cluster, the longest context, the largest published step) or what
the arithmetic can hold, never a round number for its own sake. `TrainingPlan.__post_init__` checks the
plan's fields against `PLAN_BOUNDS`; commands declare their own flags' ranges from the constants here
(Typer's `min=`/`max=`), so a value out of range is one line that states the range.
"""

from __future__ import annotations

from dataclasses import dataclass

from memdoc.errors import PlanError

INT32_MAX = 2**31 - 1
"""The int32 range: the largest count every trainer config reader and memdoc's recipes accept."""

MAX_WORLD = 200_000
"""GPUs in one job at most: xAI's Colossus, 200,000 H100/H200 on one network (xAI, Grok 3 release, February
2025), the largest training cluster published. Bounds --gpus × --nodes and --nodes."""

MAX_GPUS_PER_NODE = 72
"""GPUs per node (one GPU link) at most: NVIDIA GB200 NVL72, 72 GPUs in one NVLink domain, the largest
shipping scale-up domain (HGX and MI300X boards have 8)."""

MAX_SEQ = 10_485_760
"""Tokens per sequence at most: Llama 4 Scout's `max_position_embeddings` (its config.json, April 2025), the
longest context of a released model (10 × 2²⁰)."""

MAX_STEP_SEQUENCES = 62_914_560
"""Sequences per optimizer step at most (micro-batch, accumulation, global batch, evaluation batch): the
largest published batch in tokens, DeepSeek-V3's 15,360 sequences × 4,096 tokens (DeepSeek-V3 Technical
Report, §4.2), which is how many sequences a step would hold were each one token long."""

MAX_HIDDEN = 25_600
"""A LoRA rank is below the hidden size (`plan_checks.check_plan_against_model`); the widest published
decoder is Megatron-LM's 1T-parameter configuration, hidden size 25,600 (Narayanan et al. 2021, Table 1)."""

MAX_BUCKET_ELEMENTS = 2 * 10**12
"""DeepSpeed bucket and threshold sizes (elements) at most: the parameters of the largest announced model,
Llama 4 Behemoth's ~2T (Meta, April 2025); a bucket that large already holds every parameter."""

MAX_TOKENS = 1e15
"""Tokens to train (`plan --tokens`) at most: 25 × Llama 4's 40T-token pretraining (the most tokens a
published run used); beyond it the time reads in centuries on any card."""

MAX_HOST_RAM_GIB = 49_152.0
"""Host RAM per node (GiB) at most: 48 TiB, HPE Superdome Flex's largest configuration (32 sockets), the
largest single-system memory sold."""


@dataclass(frozen=True)
class Bound:
    """The largest value of one plan field and why."""

    high: int
    why: str


_STEP = "DeepSeek-V3's 15,360 × 4,096-token batch, the largest published step"
_INT32 = "the int32 range trainer configs hold"

PLAN_BOUNDS: dict[str, Bound] = {
    "micro_batch": Bound(MAX_STEP_SEQUENCES, _STEP),
    "grad_accum": Bound(MAX_STEP_SEQUENCES, _STEP),
    "seq_len": Bound(MAX_SEQ, "Llama 4 Scout's context, the longest of a released model"),
    "gpus_per_node": Bound(MAX_GPUS_PER_NODE, "GB200 NVL72, the largest NVLink domain; more GPUs: use --nodes"),
    "nodes": Bound(MAX_WORLD, "xAI's Colossus, the largest published training cluster"),
    "lora_rank": Bound(MAX_HIDDEN, "below the hidden size; the widest published model has 25,600"),
    "lora_alpha": Bound(INT32_MAX, _INT32),
    "checkpoint_every": Bound(INT32_MAX, _INT32),
    "eval_samples": Bound(INT32_MAX, _INT32),
    "eval_batch": Bound(MAX_STEP_SEQUENCES, _STEP),
    "eval_accumulation_steps": Bound(INT32_MAX, _INT32),
    "reduce_bucket_size": Bound(MAX_BUCKET_ELEMENTS, "Llama 4 Behemoth's ~2T parameters, the largest model"),
    "allgather_bucket_size": Bound(MAX_BUCKET_ELEMENTS, "Llama 4 Behemoth's ~2T parameters, the largest model"),
    "stage3_prefetch_bucket_size": Bound(MAX_BUCKET_ELEMENTS, "Llama 4 Behemoth's ~2T parameters"),
    "stage3_param_persistence_threshold": Bound(MAX_BUCKET_ELEMENTS, "Llama 4 Behemoth's ~2T parameters"),
    "stage3_max_live_parameters": Bound(MAX_BUCKET_ELEMENTS, "Llama 4 Behemoth's ~2T parameters"),
    "sub_group_size": Bound(MAX_BUCKET_ELEMENTS, "Llama 4 Behemoth's ~2T parameters"),
    "cp": Bound(MAX_WORLD, "a sequence split over every GPU of xAI's Colossus, the largest published cluster"),
    "tp": Bound(MAX_GPUS_PER_NODE, "tensor parallelism stays in one NVLink domain: GB200 NVL72, the largest"),
    "tiled_mlp": Bound(MAX_SEQ, "one token per shard of Llama 4 Scout's context, the longest of a released model"),
    "document_tokens": Bound(MAX_SEQ, "a document within Llama 4 Scout's context, the longest of a released model"),
    "num_generations": Bound(MAX_STEP_SEQUENCES, _STEP),
    "completion_len": Bound(MAX_SEQ, "Llama 4 Scout's context, the longest of a released model"),
    "generation_batch": Bound(MAX_STEP_SEQUENCES, _STEP),
    "prompt_len": Bound(MAX_SEQ, "Llama 4 Scout's context, the longest of a released model"),
    "num_iterations": Bound(INT32_MAX, _INT32),
    "images_per_sample": Bound(MAX_SEQ, "one token per image fills Llama 4 Scout's context, the longest"),
    "video_frames": Bound(MAX_SEQ, "one token per frame fills Llama 4 Scout's context, the longest"),
    "max_pixels": Bound(INT32_MAX, _INT32),
    "min_pixels": Bound(INT32_MAX, _INT32),
}
"""Plan field -> its largest value (the smallest is 1, or 0 where the field says so)."""


def check_bound(flag: str, name: str, value: int) -> None:
    """Refuse `value` of plan field `name` (shown as `flag`) above its `PLAN_BOUNDS` entry, in one line."""
    bound = PLAN_BOUNDS[name]
    if value > bound.high:
        raise PlanError(f"{flag} {_short(value)} is beyond any real run (at most {bound.high:,}: {bound.why})")


def check_world(gpus_per_node: int, nodes: int) -> None:
    """Refuse more GPUs in all than `MAX_WORLD`."""
    if gpus_per_node * nodes > MAX_WORLD:
        raise PlanError(
            f"--gpus {gpus_per_node} × --nodes {nodes} = {gpus_per_node * nodes:,} GPUs is beyond any real run "
            f"(at most {MAX_WORLD:,} in all: xAI's Colossus, the largest published training cluster)"
        )


def _short(value: int) -> str:
    """`value` as digits, or its digit count when it has more than 30 (an error line stays one short line)."""
    text = str(value) if value.bit_length() < 4000 else None
    if text is not None and len(text) <= 30:
        return text
    return f"of {len(text) if text else int(value.bit_length() * 0.30103) + 1} digits"
