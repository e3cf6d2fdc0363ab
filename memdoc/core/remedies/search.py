"""The plan search behind `memdoc plan`: the fastest plans that fit, over the knobs the user left free.

The space: method (full, LoRA, QLoRA), precision (bf16, amp-bf16), optimizer (fused and foreach
AdamW, 8-bit and paged 8-bit AdamW), checkpointing (none, selective, full; full with its layer inputs
offloaded to the host, offered only where the same plan without it does not fit), loss (HF, fused),
sharding over the GPUs (ZeRO-1/2/3, FSDP), offload (optimizer; weights too, which DeepSpeed
ZeRO-3 also runs on one GPU), and every micro-batch × accumulation split of the global batch; for post-training,
the knobs that change memory and not the objective (`search_post`: precomputed reference log-probs, the colocated
vLLM's fraction and sleep mode, the generation batch), the task itself never.
Knobs the user set (flags or recipe) stay fixed; so do those that change the model being trained
rather than how (LoRA rank and targets, sequence length) and those never faster or smaller than
the default (fp32, eager attention, other optimizers): pass them to have them kept.

"Fits" is the one fit rule (`verdict.fit_answer`, `Bill.comfortable`): the bill's simulated minimum
memory fits the card comfortably, i.e. with more headroom than its benchmarked error. A plan that offloads must also fit
the host RAM it is given (`host_ram_bytes`, per node: every GPU of a node offloads to the same RAM).
Time is `steptime.step_time`, with its uncertainty (`time_band`): plans are ranked by
`time_band.rank_seconds`, the modelled time of a calibrated plan and the upper end of the band of
any other. The search finds the best-ranked fitting plan of the space (plans within `TIE` count as
equally fast; a test checks it against brute force), and is fast by two monotonicities:
* peak memory grows with the micro-batch, and step time (at a fixed global batch) shrinks with
  it: for each combination of the other knobs, the largest fitting micro-batch (a binary search
  over the divisors) is its fastest plan, and its time at the largest micro-batch is a lower
  bound. Combinations are visited by that bound and the search stops once K plans beat the next
  bound;
* memory is monotone in each knob's order (`_MEMORY_RANK`): a combination that does not fit at
  micro-batch 1 rules out every combination that is at least as large in every knob, without
  billing them (a plan over the host RAM rules nothing else out: less offload needs less).

The list shows each plan once: plans within `TIE` in time and memory, and plans that differ by one
lever (`LEVERS`) saving under `NEAR_DUPLICATE` of the memory, are one plan; the better-ranked is kept
(within `TIE`, the one with fewer changes).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass

from memdoc.core.billing.bill import Bill, compute_bill
from memdoc.core.billing.bill_json import row_per_gpu_json
from memdoc.core.billing.parallel import check_parallel_model
from memdoc.core.billing.posttrain.steptime import task_step_time as step_time
from memdoc.core.billing.steptime import StepTime
from memdoc.core.billing.verdict import row_fit_json
from memdoc.core.model.gpu import GpuSpec
from memdoc.core.model.lora import fit_lora_targets
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.plan import (
    Checkpointing,
    CpImpl,
    Loss,
    Method,
    Offload,
    Optimizer,
    Precision,
    Shard,
    TrainingPlan,
)
from memdoc.core.model.plan_post import check_post_training_request
from memdoc.core.model.ranges import MAX_STEP_SEQUENCES
from memdoc.core.remedies.search_post import POST_MEMORY_RANK, plan_knobs, post_values, resolve
from memdoc.core.remedies.time_band import TimeBand, rank_seconds, time_band, time_json
from memdoc.errors import PlanError

_MEMORY_RANK: dict[str, dict] = {
    "method": {Method.FULL: 2, Method.LORA: 1, Method.QLORA: 0},
    "precision": {Precision.AMP_BF16: 1, Precision.BF16: 0},
    "optimizer": {Optimizer.ADAMW: 3, Optimizer.ADAMW_FUSED: 2, Optimizer.ADAMW_8BIT: 1, Optimizer.PAGED_ADAMW_8BIT: 0},
    "checkpointing": {
        Checkpointing.NONE: 3,
        Checkpointing.SELECTIVE: 2,
        Checkpointing.SAC_OP: 1,
        Checkpointing.FULL: 0,
    },
    "loss": {Loss.HF: 1, Loss.FUSED: 0},
    "shard": {Shard.NONE: 3, Shard.ZERO1: 2, Shard.ZERO2: 1, Shard.ZERO3: 0, Shard.FSDP: 0, Shard.FSDP2: 0},
    "offload": {Offload.NONE: 2, Offload.OPTIMIZER: 1, Offload.OPTIMIZER_PARAMS: 0},
    "activation_offload": {False: 1, True: 0},
    **POST_MEMORY_RANK,
}
"""Per knob, values ordered by the memory they need (larger rank: at least as much, all else equal)."""
KNOBS = tuple(_MEMORY_RANK)
LEVERS = (
    ("shard", "offload", "optimizer"),
    ("method",),
    ("precision",),
    ("checkpointing", "activation_offload"),
    ("loss",),
    ("vllm_memory", "vllm_sleep"),
    ("precompute_ref",),
    ("generation_batch",),
)
"""The knobs that move together as one lever (offloading the optimizer runs DeepSpeed's CPU Adam)."""
NEAR_DUPLICATE = 0.01
"""Plans that differ by one lever saving less than this fraction of the process total are one plan."""
TIE = 0.01
"""Plans whose ranking times differ by less than this fraction are equally fast."""
SEARCH_SPACE = math.prod(len(values) for values in _MEMORY_RANK.values())
"""Combinations of the knobs the search visits at most: the most plans `--top` can ask for."""


@dataclass(frozen=True)
class Candidate:
    """One plan the search found, with its bill and modelled time."""

    plan: TrainingPlan
    bill: Bill
    time: StepTime
    changes: tuple[tuple[str, object, object], ...]
    """(field, the user's value, this plan's value) for every field that differs."""
    band: TimeBand

    @property
    def rank_seconds(self) -> float:
        """What the list is ordered by (see `time_band.rank_seconds`)."""
        return rank_seconds(self.time, self.band)

    @property
    def host_bytes_per_node(self) -> int:
        return host_ram_needed(self.bill)

    def to_json(self) -> dict:
        answer = self.bill.fit
        return {
            "plan": self.plan.to_dict(),
            "per_gpu": row_per_gpu_json(self.bill.peak_allocated, self.bill.process_total, self.bill.min_memory_bytes),
            **row_fit_json(answer.fits, answer.fit),
            "headroom_bytes": self.bill.headroom_bytes,
            "host_bytes_per_node": self.host_bytes_per_node,
            "time": time_json(self.time, self.plan.world_size, self.band),
            "changes": [{"field": f, "from": _plain(a), "to": _plain(b)} for f, a, b in self.changes],
        }


def _plain(value):
    return value.value if hasattr(value, "value") else list(value) if isinstance(value, tuple) else value


def host_ram_needed(bill: Bill) -> int:
    """Host RAM one node needs for what its GPUs offload, as the engine holds it (`Bill.host_bytes_per_node`)."""
    return bill.host_bytes_per_node


def _values(knob: str, base: TrainingPlan, fixed: frozenset[str]) -> tuple:
    if knob in POST_MEMORY_RANK:
        return post_values(knob, base, fixed)
    if knob in fixed:
        return (getattr(base, knob),)
    if knob == "shard":
        return tuple(Shard) if base.world_size > 1 else (Shard.NONE, Shard.ZERO3)
    if knob == "checkpointing":  # torchtitan's op-level SAC: no HF trainer (no emitted config) runs it
        return tuple(v for v in _MEMORY_RANK[knob] if v is not Checkpointing.SAC_OP)
    return tuple(_MEMORY_RANK[knob])


def _dominates(larger: dict, smaller: dict) -> bool:
    """True when `larger` needs at least the memory of `smaller` in every knob."""
    for knob in KNOBS:
        a, b = larger[knob], smaller[knob]
        if a != b and _MEMORY_RANK[knob][a] <= _MEMORY_RANK[knob][b]:
            return False
    return True


def _divisors(n: int, cap: int) -> list[int]:
    """The divisors of `n` up to `cap`, ascending: trial division up to √n (√62,914,560 < 7,932 steps)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    large = [n // d for d in reversed(small) if n // d != d]
    return [d for d in small + large if d <= cap]


def micro_cap(model: ModelSpec, plan: TrainingPlan, gpu: GpuSpec) -> int:
    """The largest micro-batch that could fit `gpu` at all: the hidden states one layer takes in (micro-batch ×
    sequence × hidden size × 2 bytes, a 16-bit activation), which every plan keeps on the GPU even under full
    checkpointing with its inputs offloaded, fill the card. Caps the micro-batches the search bills, so the
    search's cost does not grow with the global batch."""
    return max(1, gpu.memory_bytes // (2 * plan.seq_len * model.hidden_size))


def search(
    model: ModelSpec,
    base: TrainingPlan,
    gpu: GpuSpec,
    *,
    fixed: frozenset[str] = frozenset(),
    global_batch: int | None = None,
    top: int = 5,
    host_ram_bytes: int | None = None,
) -> list[Candidate]:
    """The `top` best-ranked plans that fit `gpu` comfortably, best first (empty: nothing fits).

    `fixed`: plan fields the user set, kept as in `base`. `global_batch`: sequences per
    optimizer step over all GPUs (default: base's micro-batch × accumulation × GPUs).
    `host_ram_bytes`: host RAM per node that offloaded states may use (None: no limit).
    When nothing fits and `--cp`/`--tp` were left free, the long-context and large-layer rungs are searched
    next (`parallel_bases`): context parallelism first, then tensor parallelism, the smallest degree that
    finds plans; a plan that fits without them never pays their communication, and the search's time is
    unchanged there.
    """
    kwargs = {"fixed": fixed, "global_batch": global_batch, "top": top, "host_ram_bytes": host_ram_bytes}
    found = _search_space(model, base, gpu, **kwargs)
    if found:
        return found
    if global_batch is None:  # the user's global batch, whatever the data-parallel degree CP/TP leaves
        kwargs["global_batch"] = base.micro_batch * base.grad_accum * base.dp_size
    for parallel in parallel_bases(model, base, fixed):
        found = _search_space(model, parallel, gpu, **kwargs)
        if found:
            return [dataclasses.replace(c, changes=_changes(base, c.plan)) for c in found]
    return []


def parallel_bases(model: ModelSpec, base: TrainingPlan, fixed: frozenset[str]) -> list[TrainingPlan]:
    """The plans with CP (then TP) the search tries when nothing fits: CP over 2, 4, … GPUs of a node (Ulysses
    where the heads divide, else ring), then TP over 2, 4, … (heads, kv heads and MLP width divisible), each
    checked against the model (`parallel.check_parallel_model`)."""
    if base.world_size == 1 or base.cp > 1 or base.tp > 1:
        return []
    plans = []
    degrees = [d for d in _divisors(base.gpus_per_node, base.gpus_per_node) if d > 1]
    if "cp" not in fixed:
        for cp in degrees:
            impl = CpImpl.ULYSSES if model.num_heads % cp == 0 else CpImpl.RING
            plans.append(base.replace(cp=cp, cp_impl=base.cp_impl if "cp_impl" in fixed else impl))
    if "tp" not in fixed:
        plans.extend(base.replace(tp=tp) for tp in degrees)
    valid = []
    for plan in plans:
        try:
            check_parallel_model(model, plan)
        except PlanError:
            continue
        valid.append(plan)
    return valid


def _search_space(
    model: ModelSpec,
    base: TrainingPlan,
    gpu: GpuSpec,
    *,
    fixed: frozenset[str],
    global_batch: int | None,
    top: int,
    host_ram_bytes: int | None,
) -> list[Candidate]:
    """`search` over the space of the module docstring, `base`'s CP and TP kept."""
    if not gpu.supports_bf16:  # T4, V100: the search space's bf16 precisions cannot run; keep the card's fp16 AMP
        fixed = fixed | {"precision"}
    world = base.dp_size  # with CP/TP, the GPUs of one sequence share its micro-batch
    if global_batch is None:
        global_batch = base.micro_batch * base.grad_accum * world
    if global_batch < 1 or global_batch % world:
        raise PlanError(f"--global-batch {global_batch} must be a positive multiple of the {world} GPUs")
    if global_batch > MAX_STEP_SEQUENCES:
        raise PlanError(
            f"a global batch of {global_batch:,} sequences is beyond any real run (at most {MAX_STEP_SEQUENCES:,}: "
            "DeepSeek-V3's 15,360 × 4,096-token batch, the largest published step)"
        )
    per_gpu = global_batch // world
    micro_options = _micro_options(base, fixed, per_gpu, global_batch, micro_cap(model, base, gpu))
    failed: list[dict] = []
    found: list[Candidate] = []
    fitted: list[dict] = []
    for bound, knobs, plan in _combinations(model, base, gpu, fixed, micro_options[-1], per_gpu):
        # rank_seconds ≥ the time ≥ its bound: no later combination can rank above the top K
        if len(found) >= top and bound > found[top - 1].rank_seconds * (1 + TIE):
            break
        if any(_dominates(knobs, small) for small in failed):
            continue
        if knobs["activation_offload"] and {**knobs, "activation_offload": False} in fitted:
            continue  # offered only where the same plan without it does not fit (visited first: it is faster)
        best = _largest_fitting(model, plan, gpu, _valid_micros(model, plan, gpu, knobs, micro_options, per_gpu), knobs)
        if best is None:
            failed.append(knobs)
            continue
        plan, bill = best
        fitted.append(knobs)
        if host_ram_bytes is not None and host_ram_needed(bill) > host_ram_bytes:
            continue  # offloaded states are the same at every micro-batch
        time = step_time(model, plan, gpu)
        found = admit(found, Candidate(plan, bill, time, _changes(base, plan), time_band(plan, time)))
    return found[:top]


def admit(found: list[Candidate], candidate: Candidate) -> list[Candidate]:
    """`found` with `candidate` added, best-ranked first, each group of duplicates (`duplicates`) kept once."""
    for other in found:
        if duplicates(candidate, other) and _preferred(other, candidate):
            return found
    kept = [c for c in found if not duplicates(candidate, c)] + [candidate]
    return sorted(kept, key=lambda c: c.rank_seconds)


def _preferred(a: Candidate, b: Candidate) -> bool:
    """True when `a` is kept over its duplicate `b`: better-ranked, or within `TIE` and with no more changes."""
    if _same(a.rank_seconds, b.rank_seconds):
        return len(a.changes) <= len(b.changes)
    return a.rank_seconds < b.rank_seconds


def _micro_options(base: TrainingPlan, fixed: frozenset[str], per_gpu: int, global_batch: int, cap: int) -> list[int]:
    """The micro-batches that split `per_gpu` sequences into whole accumulation steps, as `fixed` allows, up to
    `cap` (`micro_cap`: no larger one fits) unless fixed."""
    if "micro_batch" in fixed:
        micro_options = [base.micro_batch] if per_gpu % base.micro_batch == 0 else []
    elif "grad_accum" in fixed:
        micro_options = [per_gpu // base.grad_accum] if per_gpu % base.grad_accum == 0 else []
    else:
        micro_options = _divisors(per_gpu, cap)
    if "micro_batch" in fixed and "grad_accum" in fixed:
        micro_options = [m for m in micro_options if per_gpu // m == base.grad_accum]
    if not micro_options:
        raise PlanError(
            f"--batch {base.micro_batch} × --accum {base.grad_accum} × {base.world_size} GPUs "
            f"does not make the global batch of {global_batch} sequences"
        )
    return micro_options


def _combinations(
    model: ModelSpec, base: TrainingPlan, gpu: GpuSpec, fixed: frozenset[str], largest_micro: int, per_gpu: int
) -> list[tuple[float, dict, TrainingPlan]]:
    """(lower bound on the step time, knob values, plan at the largest micro-batch) for every valid
    combination of the knobs, by bound."""
    combos = []
    for values in itertools.product(*(_values(k, base, fixed) for k in KNOBS)):
        knobs = dict(zip(KNOBS, values))
        if (
            knobs["offload"] is not Offload.NONE
            and knobs["optimizer"] is not Optimizer.ADAMW
            and "optimizer" not in fixed
        ):
            continue  # DeepSpeed's CPU Adam runs the step: the GPU optimizer choice is moot
        if knobs["activation_offload"] and knobs["checkpointing"] is not Checkpointing.FULL:
            continue  # it offloads the checkpointed layers' inputs (`plan_checks.check_requested_plan`)
        if (
            base.world_size == 1
            and knobs["shard"] is Shard.ZERO3
            and knobs["offload"] is not Offload.OPTIMIZER_PARAMS
            and "shard" not in fixed
        ):
            continue
        try:
            plan = base.replace(**plan_knobs(knobs), micro_batch=largest_micro, grad_accum=per_gpu // largest_micro)
            plan = resolve(plan, knobs, model, gpu)
        except PlanError:
            continue
        if "lora_targets" not in fixed:
            plan = fit_lora_targets(plan, model)
        combos.append((step_time(model, plan, gpu).seconds, knobs, plan))
    combos.sort(key=lambda c: c[0])
    return combos


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= TIE * max(a, b)


def duplicates(a: Candidate, b: Candidate) -> bool:
    """True when the list shows `a` and `b` as one plan: the same time and memory (within `TIE`; LoRA's
    optimizer choice, say, moves nothing measurable), or one lever apart (`LEVERS`) that saves under
    `NEAR_DUPLICATE` of the process total (optimizer offload saving 0.06 GiB of 23)."""
    if a is b:
        return False
    if _same(a.time.seconds, b.time.seconds) and _same(a.bill.process_total, b.bill.process_total):
        return True
    differ = {k for k in KNOBS if getattr(a.plan, k) != getattr(b.plan, k)}
    if sum(1 for lever in LEVERS if differ & set(lever)) != 1:
        return False
    low, high = sorted((a.bill.process_total, b.bill.process_total))  # billed already; the minimum needs a search
    return high - low < NEAR_DUPLICATE * high


def _at_micro(model, plan: TrainingPlan, gpu, knobs: dict, m: int, per_gpu: int) -> TrainingPlan:
    """The combination's plan at micro-batch `m`, its sized knobs resolved there (`search_post.resolve`)."""
    return resolve(plan.replace(micro_batch=m, grad_accum=per_gpu // m), knobs, model, gpu)


def _valid_micros(model, plan, gpu, knobs: dict, micro_options: list[int], per_gpu: int) -> list[int]:
    """The micro-batches at which the combination keeps TRL's rules (`check_post_training_request`: the generation
    batch a multiple of the global batch and of `num_generations`); all of them for supervised fine-tuning."""
    if plan.task.value == "sft":
        return micro_options
    valid = []
    for m in micro_options:
        try:
            check_post_training_request(_at_micro(model, plan, gpu, knobs, m, per_gpu))
        except PlanError:
            continue
        valid.append(m)
    return valid


def _largest_fitting(model, plan, gpu, micro_options, knobs) -> tuple[TrainingPlan, Bill] | None:
    """The plan at the largest micro-batch in `micro_options` that fits, with its bill (None: not even the smallest)."""
    if not micro_options:
        return None
    per_gpu = plan.micro_batch * plan.grad_accum

    def at(index: int) -> tuple[TrainingPlan, Bill]:
        p = _at_micro(model, plan, gpu, knobs, micro_options[index], per_gpu)
        return p, compute_bill(model, p, gpu)

    top = at(len(micro_options) - 1)
    if top[1].comfortable:
        return top
    low = at(0)
    if not low[1].comfortable:
        return None
    lo, hi = 0, len(micro_options) - 1  # lo fits, hi does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        candidate = at(mid)
        if candidate[1].comfortable:
            lo, low = mid, candidate
        else:
            hi = mid
    return low


def _changes(base: TrainingPlan, plan: TrainingPlan) -> tuple[tuple[str, object, object], ...]:
    before, after = base.to_dict(), plan.to_dict()
    changes = []
    for name, value in after.items():
        if value != before[name] and not (name.startswith("lora_") and not plan.is_peft):
            changes.append((name, getattr(base, name), getattr(plan, name)))
    return tuple(changes)
