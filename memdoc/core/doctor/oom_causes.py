"""What an OOM message's figures say, read the way an expert reads them: causes with evidence.

`read_causes(event, log_text)` turns the figures of one `OomEvent` (and a few settings the
surrounding log states) into ranked `Cause`s, each with the figures that show it and the fix.
They come before the symptom's generic ladder: when a cap or another process is the limit, a
smaller batch is not the answer. The rules, in rank order:

1. `memory-fraction-cap`: the message says "N allowed" (printed only under
   `torch.cuda.set_per_process_memory_fraction` / `per_process_memory_fraction`) and N is below
   `CAP_SHARE` of the card; or the log sets vLLM's `gpu_memory_utilization` below
   `CAP_SHARE` and the engine could not fit its KV cache.
2. `vllm-kv-cache`: vLLM refused to start because the KV cache for one max-length request does
   not fit in what `gpu_memory_utilization` leaves after weights and activations.
3. `request-larger-than-card`: one request larger than the whole card (a shape bug).
   `sysmem-fallback`: PyTorch holds more than the card's capacity: the driver spills into system
   RAM (Windows' "CUDA Sysmem Fallback Policy", unified memory) — slow, and it still ran out.
4. `other-processes`: "Process P has X memory in use" clauses (not this process seen under its
   host PID), or capacity − free − this process's usage ≥ `OTHER_MIN_BYTES` and
   ≥ `OTHER_MIN_SHARE` of the card (without that figure: capacity − free − reserved, which also
   holds this process's CUDA context, so the threshold is doubled).
5. `fragmentation`: reserved-but-unallocated R ≥ `FRAGMENTATION_MIN_SHARE` of the card, and
   R ≥ the request (or R + free ≥ the request with R ≥ half of it): idle cached bytes that could
   serve the request but lie in no block large enough; `expandable_segments:True` lets the
   allocator map them into one range (frees up to R).
6. `non-pytorch-memory`: this process uses ≥ `NON_PYTORCH_MIN_BYTES` more than PyTorch reserved
   (CUDA context and library workspaces are normally 0.3–1.5 GiB).
7. `free-but-refused`: the driver reported at least `REFUSED_MARGIN` × the request free (and
   ≥ `REFUSED_MIN_BYTES` more than it), with no cap printed: other processes racing for the card,
   or unified memory (integrated GPUs). Closer to the request, page granularity explains it.
8. `tensors-fill-the-card`: this process (its NVML figure when printed, else PyTorch's tensors)
   uses ≥ `FULL_SHARE` of the card (or of the cap): the plan needs less memory — the ladder below.

Each `Cause` names the symptoms.yaml prescriptions that address it (`Cause.prescriptions`) or
carries its own `fix`; `shrink_plan` marks "the plan needs less memory", the only cause the
plan-quantified ladder follows (`memdoc.core.doctor.diagnosis`).

Pure logic: no torch. Thresholds are module constants; each states why it is where it is.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from memdoc.core.doctor.logtext import normalise_log
from memdoc.core.doctor.oom_event import OomEvent
from memdoc.core.model.gpu import GpuSpec, generic_gpu, load_gpu_table
from memdoc.units import GiB, format_bytes

__all__ = ["Cause", "CauseReading", "card_from_capacity", "read_causes", "vllm_gpu_memory_utilization"]

CARD_MATCH_SHARE = 0.015
"""A table GPU is "the card" when its memory is within this share of the reported capacity
(drivers reserve a few hundred MiB differently across versions; ECC takes ~6% on some cards)."""
CAP_SHARE = 0.9
"""A cap (memory fraction, gpu_memory_utilization) below this share of the card is a cause: above
it, what is left is what the CUDA context and other libraries need anyway."""
OTHER_MIN_BYTES = 1 * GiB
"""Memory held outside this process below this is driver/ECC slack, not another job."""
OTHER_MIN_SHARE = 0.05
"""…and it must also be this share of the card."""
FRAGMENTATION_MIN_SHARE = 0.05
"""Reserved-but-unallocated below this share of the card is the allocator's normal rounding slack."""
NON_PYTORCH_MIN_BYTES = 2 * GiB
"""A CUDA context with cuBLAS/cuDNN handles takes 0.3–1.5 GiB; more is NCCL, CUDA graphs or a library's
own cudaMalloc."""
REFUSED_MARGIN = 2
REFUSED_MIN_BYTES = 256 * 1024**2
"""`free-but-refused` needs free ≥ 2 × the request and 256 MiB beyond it: closer, the driver's page
granularity and its own reservations explain the failure."""
FULL_SHARE = 0.8
"""Live tensors above this share of the card (or cap) fill it: the plan must shrink."""

FRAGMENTATION_PRESCRIPTIONS = ("midrun-expandable-segments", "midrun-empty-cache")
"""symptoms.yaml prescriptions for `fragmentation`: expandable segments remap idle pages (free), emptying
the cache between phases returns whole idle segments."""
VLLM_KV_PRESCRIPTIONS = ("infer-kv-quant", "infer-limit-context", "infer-limit-batch", "infer-prefix-caching")
"""symptoms.yaml prescriptions for `vllm-kv-cache`, in the seed's order for inference (KV quantisation, context
limit, batch limit, prefix caching): the KV cache vLLM must fit is sized by its dtype, max_model_len and the
concurrent sequences (vllm/v1/core/kv_cache_utils.py `check_enough_kv_cache_memory`). The cause itself leads
with the max_model_len the log's figures allow (`oom_vllm.allowed_max_model_len`)."""


@dataclass(frozen=True, kw_only=True)
class Cause:
    """One reason for the OOM, shown by the message's figures."""

    id: str
    """Kebab-case id (see the module docstring for the rules)."""
    title: str
    """What happened, in a few words."""
    evidence: str
    """The figures that show it, as a sentence."""
    fix: str
    """What to change."""
    frees_bytes: int | None = None
    """Bytes the fix makes available, where the figures tell (None otherwise)."""
    prescriptions: tuple[str, ...] = ()
    """Ids of the symptoms.yaml prescriptions that address this cause, in the order to try them; empty
    when the cause's own `fix` is the only one (a cap, another process, a shape bug)."""
    fix_cost: str = "none"
    """The step-time cost of the cause's own `fix` (the time column of its row when it has no prescriptions)."""
    shrink_plan: bool = False
    """True when the cause is "the plan needs less memory": the plan-quantified ladder follows it."""


@dataclass(frozen=True, kw_only=True)
class CauseReading:
    """Causes in rank order, and what the figures could not tell."""

    causes: tuple[Cause, ...]
    unknowns: tuple[str, ...] = ()


_UTILISATION = re.compile(r"(?:vllm_)?gpu[_-]memory[_-]utili[sz]ation[\"']?\s*[=:]?\s*([01]?\.\d+|1(?:\.0+)?)\b", re.I)


def vllm_gpu_memory_utilization(log_text: str) -> float | None:
    """The last `gpu_memory_utilization` / `--gpu-memory-utilization` value the log states, if any."""
    values = [float(m.group(1)) for m in _UTILISATION.finditer(normalise_log(log_text or ""))]
    values = [v for v in values if 0 < v <= 1]
    return values[-1] if values else None


def _share(part: int, whole: int) -> str:
    return f"{part / whole:.0%}" if whole else "?"


def _cap(event: OomEvent, util: float | None) -> Cause | None:
    T = event.total
    if event.allowed is not None and T and event.allowed < CAP_SHARE * T:
        free = f", while the driver had {format_bytes(event.free)} free" if event.free is not None else ""
        gain = None if event.free is None else min(event.free, int(CAP_SHARE * T) - event.allowed)
        return Cause(
            id="memory-fraction-cap",
            title="the process is capped far below the card",
            evidence=f"{format_bytes(event.allowed)} allowed of the {format_bytes(T)} card "
            f"({_share(event.allowed, T)}){free}: torch.cuda.set_per_process_memory_fraction (or "
            "PYTORCH_CUDA_ALLOC_CONF=per_process_memory_fraction) limits this process",
            fix="raise or remove the cap (torch.cuda.set_per_process_memory_fraction(0.95) or drop the call; "
            "under vLLM/TRL raise gpu_memory_utilization / vllm_gpu_memory_utilization); a cap is for "
            "sharing the card, so check the other job's share first",
            frees_bytes=max(0, gain) if gain is not None else None,
        )
    if event.format == "vllm-kv-cache" and util is not None and util < CAP_SHARE:
        return Cause(
            id="memory-fraction-cap",
            title="vLLM was given too small a share of the card",
            evidence=f"gpu_memory_utilization={util:g}: vLLM budgets {util:.0%} of the card for weights, "
            "activations and KV cache, and nothing was left for the cache",
            fix="raise gpu_memory_utilization (0.85–0.95 on a card nothing else uses); when sharing the card "
            "with training (TRL GRPO colocate), lower max_model_len or max_num_seqs instead",
        )
    return None


def _vllm(event: OomEvent, util: float | None) -> Cause | None:
    if event.format != "vllm-kv-cache":
        return None
    if event.variant == "max-seq-len":
        evidence = (
            f"the KV cache holds {event.kv_cache_tokens:,} tokens but max_model_len is "
            f"{event.max_model_len:,}: one full-length request does not fit"
        )
    elif event.variant == "kv-needed":
        evidence = (
            f"one request of max_model_len {event.max_model_len:,} tokens needs "
            f"{format_bytes(event.kv_cache_needed)} of KV cache, {format_bytes(event.kv_cache_available)} is available"
        )
    else:
        evidence = (
            "after loading the weights and profiling one forward pass, no memory was left for KV-cache "
            'blocks ("# GPU blocks: 0")'
        )
    if event.kv_cache_available is not None and event.kv_cache_available <= 0:
        evidence += f"; the log's available KV-cache memory is {format_bytes(event.kv_cache_available)}"
    if util is not None:
        evidence += f" (gpu_memory_utilization={util:g})"
    allowed = event.max_model_len_allowed
    if allowed:
        lead = f"--max-model-len {allowed} starts (the log's own figures allow {allowed:,} tokens); else "
    elif allowed == 0:
        lead = "no max_model_len starts at this gpu_memory_utilization: free memory (a smaller or quantised model, "
        lead += "tensor parallelism, --enforce-eager, fewer max_num_batched_tokens / max_num_seqs) or raise it; then "
    else:
        lead = ""
    return Cause(
        id="vllm-kv-cache",
        title="vLLM could not fit the KV cache",
        evidence=evidence,
        fix=lead + "quantise the KV cache (kv_cache_dtype=fp8), lower max_model_len or max_num_seqs, share prefixes "
        "(enable_prefix_caching); raise gpu_memory_utilization only if nothing else uses the card",
        prescriptions=VLLM_KV_PRESCRIPTIONS,
    )


SAME_PROCESS_SHARE = 0.01
"""A listed process whose usage is within this share of the card of "this process has X memory in use" is this
process seen under its host PID (containers)."""


def _is_this_process(event: OomEvent, used: int) -> bool:
    """Is a "Process P has X memory in use" clause this process under another PID? With this process's own
    figure: X equals it (within `SAME_PROCESS_SHARE` of the card); without: X ≥ what PyTorch reserved."""
    mine, T = event.this_process_in_use, event.total
    if mine and T:
        return abs(used - mine) <= SAME_PROCESS_SHARE * T
    return event.reserved is not None and used >= event.reserved


def _others(event: OomEvent, unknowns: list[str]) -> Cause | None:
    T, F = event.total, event.free
    reserved = event.reserved
    listed = []
    for pid, used in event.other_processes:
        if _is_this_process(event, used):
            unknowns.append(
                f"process {pid} holds {format_bytes(used)}: probably this process seen under its host PID "
                "(containers); if it is another job, free the GPU first"
            )
        else:
            listed.append((pid, used))
    if event.this_process_in_use == 0 and (event.allocated_by_pytorch or 0) > 0:
        unknowns.append(
            "the per-process figure says 0 bytes while PyTorch holds memory: NVML cannot see this process "
            "(containers), so other processes' usage is unknown"
        )
    if listed:
        held = sum(u for _, u in listed)
        names = ", ".join(f"process {pid} holds {format_bytes(u)}" for pid, u in listed)
        return Cause(
            id="other-processes",
            title="other processes hold memory on this GPU",
            evidence=f"{names} ({_share(held, T) if T else '?'} of the card)",
            fix="free the GPU (nvidia-smi: stale notebooks/kernels, a previous run, a second job) or move to an "
            "idle one (CUDA_VISIBLE_DEVICES)",
            frees_bytes=held,
        )
    if T is None or F is None:
        return None
    if event.this_process_in_use:
        outside = T - F - event.this_process_in_use
        floor = max(OTHER_MIN_BYTES, OTHER_MIN_SHARE * T)
        how = (
            f"capacity {format_bytes(T)} − free {format_bytes(F)} − this process "
            f"{format_bytes(event.this_process_in_use)}"
        )
    elif reserved is not None:
        outside = T - F - reserved
        floor = 2 * max(OTHER_MIN_BYTES, OTHER_MIN_SHARE * T)
        how = (
            f"capacity {format_bytes(T)} − free {format_bytes(F)} − reserved by PyTorch {format_bytes(reserved)}, "
            "which also counts this process's CUDA context"
        )
    else:
        return None
    if outside < floor:
        return None
    return Cause(
        id="other-processes",
        title="memory on this GPU is held outside this process",
        evidence=f"{format_bytes(outside)} ({_share(outside, T)} of the card) is used by something else: {how}",
        fix="find it with nvidia-smi (another job, a stale notebook kernel, a second process of the same run on "
        "this GPU) and free the card or pick an idle one (CUDA_VISIBLE_DEVICES)",
        frees_bytes=outside,
    )


def _fragmentation(event: OomEvent, unknowns: list[str]) -> Cause | None:
    """Idle cached bytes R that could have served the request A: R ≥ A alone, or R + free F ≥ A with
    R ≥ half of A. With expandable segments (c10/cuda/CUDACachingAllocator.cpp `ExpandableSegment`,
    torch 2.x) idle pages are unmapped and remapped into any virtual range, so R and F add up; without
    them R is split into blocks inside segments still in use, which `release_cached_blocks` cannot
    free."""
    A, T, R, F = event.requested, event.total, event.unused_reserved, event.free
    if A is None:
        return None
    if R is None:
        unknowns.append("reserved-but-unallocated memory (the message does not give it): fragmentation not assessed")
        return None
    base = T if T is not None else (event.allocated_by_pytorch or 0) + R
    alone = R >= A
    together = F is not None and R + F >= A and R >= A / 2
    if base <= 0 or not (alone or together) or R < FRAGMENTATION_MIN_SHARE * base:
        return None
    if alone:
        how = f"more than the {format_bytes(A)} requested"
    else:
        how = (
            f"which with the {format_bytes(F)} free makes {format_bytes(R + F)}, more than the {format_bytes(A)} "
            "requested"
        )
    return Cause(
        id="fragmentation",
        title="the free memory is fragmented",
        evidence=f"{format_bytes(R)} was reserved by PyTorch but unallocated, {how}, and {_share(R, base)} of "
        f"{'the card' if T is not None else 'reserved memory'}; yet no cached block was large enough",
        fix="set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (one growable segment per stream: idle pages "
        "are reused for any size); keep tensor shapes steady (pad to a few bucket lengths)",
        frees_bytes=R,
        prescriptions=FRAGMENTATION_PRESCRIPTIONS,
    )


def _non_pytorch(event: OomEvent) -> Cause | None:
    extra = event.non_pytorch
    if extra is None or extra < NON_PYTORCH_MIN_BYTES:
        return None
    return Cause(
        id="non-pytorch-memory",
        title="this process holds much memory outside PyTorch's allocator",
        evidence=f"this process uses {format_bytes(event.this_process_in_use)} but PyTorch reserved "
        f"{format_bytes(event.reserved)}: {format_bytes(extra)} is CUDA context, NCCL buffers, CUDA graphs or a "
        "library's own allocations (bitsandbytes, Triton, TensorRT, a second CUDA context)",
        fix="look for libraries that allocate on their own (NCCL_BUFFSIZE, fewer captured CUDA graphs, paged "
        "optimizers' unified memory); a CUDA context alone is ≤ 1.5 GiB",
        frees_bytes=None,
        fix_cost="depends on the library",
    )


def _too_large(event: OomEvent) -> Cause | None:
    A, T = event.requested, event.total
    if A is None or T is None or A <= T:
        return None
    return Cause(
        id="request-larger-than-card",
        title="one allocation is larger than the whole card",
        evidence=f"the request ({format_bytes(A)}) is larger than the card ({format_bytes(T)})",
        fix="no memory setting fits it: look for a shape bug, an unbounded sequence length or a broadcast that "
        "materialises a huge tensor",
        fix_cost="none (a bug to fix)",
    )


def _sysmem(event: OomEvent) -> Cause | None:
    M, T = event.allocated_by_pytorch, event.total
    if M is None or not T or M <= T:
        return None
    return Cause(
        id="sysmem-fallback",
        title="PyTorch holds more than the card",
        evidence=f"{format_bytes(M)} allocated by PyTorch on a {format_bytes(T)} card: the driver has been spilling "
        "GPU memory into system RAM (Windows' CUDA Sysmem Fallback Policy, or unified memory)",
        fix="the run needs far less memory than it uses (the prescriptions below); spilling makes each step many "
        "times slower, so set the fallback policy to 'Prefer No Sysmem Fallback' to fail fast while tuning",
        shrink_plan=True,
    )


def _free_but_refused(event: OomEvent) -> Cause | None:
    A, F = event.requested, event.free
    if A is None or F is None or F < REFUSED_MARGIN * A or F - A < REFUSED_MIN_BYTES or event.allowed is not None:
        return None
    return Cause(
        id="free-but-refused",
        title="the driver reported enough free memory",
        evidence=f"{format_bytes(F)} free, more than the {format_bytes(A)} requested, and no cap printed",
        fix="another process allocated in between (check nvidia-smi while it runs), or the GPU shares system "
        "memory (integrated/unified-memory GPUs report free memory the allocator cannot get)",
    )


def _full(event: OomEvent) -> Cause | None:
    M, P = event.allocated_by_pytorch, event.this_process_in_use
    limit = event.allowed or event.total
    used = P if P and not event.allowed else M
    if used is None or not limit or used < FULL_SHARE * limit or (M is not None and M > limit):
        return None
    of = "the allowed" if event.allowed else "the card's"
    what = (
        f"this process uses {format_bytes(P)} ({format_bytes(M)} in PyTorch tensors)"
        if used is P
        else f"{format_bytes(M)} allocated by PyTorch"
    )
    return Cause(
        id="tensors-fill-the-card",
        title="the live tensors fill the card",
        evidence=f"{what}, {_share(used, limit)} of {of} {format_bytes(limit)}",
        fix="the plan needs less memory: the prescriptions below, cheapest first",
        shrink_plan=True,
    )


def card_from_capacity(total: int | None) -> tuple[GpuSpec | None, tuple[str, ...]]:
    """The GPU the message's "total capacity" describes: a generic GPU of exactly that memory (what
    the process could use), and the names of table GPUs of that size (within `CARD_MATCH_SHARE`)."""
    if not total or total <= 0:
        return None, ()
    names = tuple(g.name for g in load_gpu_table() if abs(g.memory_bytes - total) <= CARD_MATCH_SHARE * total)
    gpu = generic_gpu(total / GiB)
    label = f"{format_bytes(total)} GPU from the log" + (f" ({' / '.join(names[:3])})" if names else "")
    return dataclasses.replace(gpu, name=label, memory_bytes=total), names


def read_causes(event: OomEvent | None, log_text: str = "") -> CauseReading:
    """The causes `event`'s figures show, in rank order (see the module docstring). Never raises."""
    if event is None:
        return CauseReading(causes=())
    unknowns: list[str] = []
    try:
        util = vllm_gpu_memory_utilization(log_text)
        found = [
            _cap(event, util),
            _vllm(event, util),
            _too_large(event),
            _sysmem(event),
            _others(event, unknowns),
            _fragmentation(event, unknowns),
            _non_pytorch(event),
            _free_but_refused(event),
            _full(event),
        ]
        causes = tuple(c for c in found if c is not None)
    except Exception:  # pragma: no cover - the doctor never raises on a parsed OOM
        causes = ()
    return CauseReading(causes=causes, unknowns=tuple(unknowns))
