"""Lint rules for a measured training run: what the seeds warn about, as findings with a prescription.

Pure Python (no torch): `lint(facts)` reads a `RunFacts` — plain data collected by
`memdoc.probe.script` while the user's script ran (or built by hand in tests) — and returns
`Finding`s, most important first. Each finding names the `memdoc prescribe --symptom …` that
treats it.

Rules (ids are stable, used by --json and tests):

- ``ckpt-not-active``: modules have gradient checkpointing switched on (HF sets
  ``gradient_checkpointing=True`` on each decoder layer) but none of them, or not all, ran under
  ``torch.utils.checkpoint`` during the measured forward passes — e.g. the model is in eval mode,
  or grad was disabled. Names the modules that were not wrapped.
- ``ckpt-reentrant``: checkpointing ran with ``use_reentrant=True`` (the legacy implementation:
  no nested checkpoints, inputs must require grad, breaks with frozen embeddings under LoRA).
- ``amp-off``: trainable weights are fp32 and no autocast was active in forward.
- ``optimizer-dominates``: optimizer states are at least as large as the largest activations of any phase
  and ≥ 30% of the peak — checkpointing would not help; shrink the states.
- ``foreach-temporaries``: the peak is in the optimizer step and its temporaries (foreach AdamW
  keeps parameter-sized scratch lists) are ≥ 25% of the trainable weights.
- ``dataloader-workers-0``: a DataLoader iterated with ``num_workers=0`` (data loading in the
  training process: on a GPU, the GPU waits for it).
- ``memory-growth``: (``diagnose --steps N``, N ≥ 3) the tensors that outlive a whole step (allocated
  before the step's first forward, alive at its end; model states and setup excluded) grow by
  ≥ ``GROWTH_MIN_BYTES`` every step; names the lines of the script that allocated the surviving tensors
  (a list of logits, an accumulated metric tensor). A line whose allocations are freed within the step
  is never named, however large they are.
- ``graph-kept``: surviving tensors with a ``grad_fn`` (``losses.append(loss)``, ``total = total + loss``)
  keep a graph that gains nodes every step; names the line that stores them and the saved activations
  the kept graphs still hold per step (none when backward has already freed them: then the growth is
  the graph's nodes, in host memory). The fix is ``loss.item()`` or ``loss.detach()``.
- ``fragmentation``: (CUDA) reserved − allocated is ≥ 20% of reserved, or the allocator retried
  (``num_alloc_retries`` > 0), while ``expandable_segments`` is not set in
  ``PYTORCH_CUDA_ALLOC_CONF``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

FRAGMENTATION_RATIO = 0.20
"""(reserved − allocated) / reserved at the peak above which the cache is called fragmented."""
OPTIMIZER_SHARE = 0.30
"""Optimizer states ≥ this share of the peak (and ≥ activations) ⇒ 'optimizer-dominates'."""
FOREACH_SHARE = 0.25
"""Optimizer-step temporaries ≥ this share of the trainable weights ⇒ 'foreach-temporaries'."""

GROWTH_MIN_BYTES = 1024
"""Smallest per-step growth reported (a kept scalar per step is 4–8 B: a counter, not the creep that OOMs)."""
GROWTH_SITE_SHARE = 0.05
"""A script line is named when its tensors grow by ≥ this share of the total growth per step."""

GROWTH_SITES = 4
"""Lines named by one leak finding at most."""

_SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


@dataclass(frozen=True)
class Finding:
    id: str
    severity: str
    """'error', 'warning' or 'info'."""
    message: str
    symptom: str
    """The `memdoc prescribe --symptom` entry that treats it."""
    modules: tuple[str, ...] = ()
    detail: str = ""
    figures: dict = field(default_factory=dict, compare=False, hash=False)
    """Measured numbers behind the message (e.g. ``per_step_bytes``), in --json; empty for most rules."""

    @property
    def prescribe(self) -> str:
        return f"memdoc prescribe --symptom {self.symptom}"

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "severity": self.severity,
            "message": self.message,
            "detail": self.detail,
            "modules": list(self.modules),
            "prescribe": self.prescribe,
        } | ({"figures": dict(self.figures)} if self.figures else {})


@dataclass
class RunFacts:
    """What was observed while the script ran (plain data; every field optional)."""

    measured: dict = field(default_factory=dict)
    """Line items at the peak: weights, gradients, optimizer, activations, other, peak_allocated."""
    max_activations: int = 0
    """Largest activation bytes seen at any phase's peak (the optimizer step has none)."""
    peak_phase: str | None = None
    trainable_bytes: int = 0
    trainable_dtypes: list[str] = field(default_factory=list)
    """dtype names of trainable parameters ('float32', 'bfloat16', …)."""
    autocast: bool = False
    """Whether autocast was enabled during any root forward."""
    forward_seen: bool = False
    ckpt_requested: list[str] = field(default_factory=list)
    """Modules with gradient checkpointing switched on."""
    ckpt_wrapped: list[str] = field(default_factory=list)
    """Modules that ran under torch.utils.checkpoint in a training forward."""
    ckpt_reentrant_calls: int = 0
    ckpt_calls: int = 0
    ckpt_not_training: list[str] = field(default_factory=list)
    """Requested modules that were in eval mode when called."""
    optimizers: list[dict] = field(default_factory=list)
    """{"class": "AdamW", "foreach": bool | None, "fused": bool | None}."""
    steps: int = 0
    """Optimizer steps completed."""
    uses_cuda: bool = False
    dataloader_workers: list[int] = field(default_factory=list)
    cuda: dict | None = None
    """{"allocated_peak", "reserved_peak", "inactive_split", "num_alloc_retries", "num_ooms", "alloc_conf"}."""
    survivors: list[dict] = field(default_factory=list)
    """At the end of each step from the second on: {"sites": {line: bytes}, "graphs": {line: {"tensors",
    "tensor_bytes", "nodes", "saved_bytes"}}} of what outlived the whole step (`memdoc.probe.script.survivors`);
    lines are 'train.py:42' (the allocating line), '?' outside the script."""
    stored_at: dict[str, str] = field(default_factory=dict)
    """Allocating line of a graph-keeping tensor → the line that stores it across steps."""


def _fmt(n: int) -> str:
    from memdoc.units import format_bytes

    return format_bytes(n)


def _short(names: list[str], limit: int = 6) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _ckpt_not_active(f: RunFacts) -> Finding | None:
    """``ckpt-not-active``: modules asked for checkpointing that did not run under it."""
    requested = list(f.ckpt_requested)
    wrapped = set(f.ckpt_wrapped)
    missing = [name for name in requested if name not in wrapped]
    if not (requested and f.forward_seen and missing):
        return None
    why = ""
    if f.ckpt_not_training:
        why = (
            f" — {_short(f.ckpt_not_training)} ran in eval mode (HF checkpoints only when "
            "module.training); call model.train()"
        )
    elif not f.ckpt_calls:
        why = " — no torch.utils.checkpoint call happened in forward (grad disabled, or the forward ignores the flag)"
    return Finding(
        id="ckpt-not-active",
        severity="error",
        message=f"gradient checkpointing is switched on for {len(requested)} module(s) but "
        f"{len(missing)} ran without it{why}",
        symptom="ckpt-no-savings",
        modules=tuple(missing),
        detail="wrapped: " + (_short(sorted(wrapped)) if wrapped else "none"),
    )


def _ckpt_reentrant(f: RunFacts) -> Finding | None:
    """``ckpt-reentrant``: checkpointing ran with use_reentrant=True."""
    if not f.ckpt_reentrant_calls:
        return None
    return Finding(
        id="ckpt-reentrant",
        severity="warning",
        message=f"checkpointing uses use_reentrant=True ({f.ckpt_reentrant_calls} call(s)): pass "
        "gradient_checkpointing_kwargs={'use_reentrant': False}",
        symptom="custom-op-error",
        detail="the reentrant implementation needs inputs that require grad (breaks with frozen "
        "embeddings under LoRA) and cannot nest",
    )


def _amp_off(f: RunFacts) -> Finding | None:
    """``amp-off``: fp32 trainable weights and no autocast in forward."""
    if not (f.forward_seen and f.trainable_dtypes and not f.autocast):
        return None
    if not all(d == "float32" for d in f.trainable_dtypes):
        return None
    return Finding(
        id="amp-off",
        severity="warning",
        message="trainable weights are fp32 and no autocast ran in forward: activations are fp32 (2× "
        "bf16) and tensor cores idle",
        symptom="slow-but-fits",
        detail="use bf16 mixed precision (TrainingArguments(bf16=True), or torch.autocast('cuda', "
        "torch.bfloat16)) or load the model in bf16",
    )


def _optimizer_dominates(f: RunFacts) -> Finding | None:
    """``optimizer-dominates``: states ≥ the largest activations and ≥ OPTIMIZER_SHARE of the peak."""
    m = f.measured or {}
    peak = int(m.get("peak_allocated", 0) or 0)
    opt = int(m.get("optimizer", 0) or 0)
    acts = max(int(m.get("activations", 0) or 0), f.max_activations)
    if not (peak and opt and opt >= acts and opt >= OPTIMIZER_SHARE * peak):
        return None
    return Finding(
        id="optimizer-dominates",
        severity="warning",
        message=f"optimizer states ({_fmt(opt)}, {opt / peak:.0%} of the peak) outweigh activations ({_fmt(acts)}): "
        "checkpointing would not help; shrink the states (8-bit/paged AdamW, LoRA, ZeRO/FSDP, optimizer offload)",
        symptom="ckpt-no-savings",
    )


def _foreach_temporaries(f: RunFacts) -> Finding | None:
    """``foreach-temporaries``: an optimizer-step peak with foreach temporaries ≥ FOREACH_SHARE of the weights."""
    other = int((f.measured or {}).get("other", 0) or 0)
    # foreach is explicit, or torch's default for CUDA tensors (foreach=None means "default")
    foreach = any(
        o.get("foreach") or (o.get("foreach") is None and not o.get("fused") and f.uses_cuda) for o in f.optimizers
    )
    if not (foreach and f.steps and f.peak_phase == "optimizer" and f.trainable_bytes):
        return None
    if other < FOREACH_SHARE * f.trainable_bytes:
        return None
    return Finding(
        id="foreach-temporaries",
        severity="warning",
        message=f"the peak is in the optimizer step, with {_fmt(other)} of step temporaries "
        f"({other / f.trainable_bytes:.0%} of the trainable weights); foreach AdamW keeps parameter-sized "
        "scratch lists: use fused=True (optim='adamw_torch_fused')",
        symptom="startup-oom",
    )


def _dataloader_workers_0(f: RunFacts) -> Finding | None:
    """``dataloader-workers-0``: a DataLoader without worker processes."""
    if not any(w == 0 for w in f.dataloader_workers):
        return None
    return Finding(
        id="dataloader-workers-0",
        severity="info",
        message="a DataLoader runs with num_workers=0: batches are prepared in the training process "
        "while the GPU waits "
        "(set num_workers / dataloader_num_workers ≥ 2, pin_memory=True)",
        symptom="slow-but-fits",
    )


def _fragmentation(f: RunFacts) -> Finding | None:
    """``fragmentation``: (CUDA) a fragmented or retrying cache without expandable segments."""
    cuda = f.cuda or {}
    reserved = int(cuda.get("reserved_peak", 0) or 0)
    allocated = int(cuda.get("allocated_peak", 0) or 0)
    retries = int(cuda.get("num_alloc_retries", 0) or 0)
    conf = str(cuda.get("alloc_conf") or "")
    expandable = "expandable_segments:true" in conf.replace(" ", "").lower()
    fragmented = (reserved and (reserved - allocated) >= FRAGMENTATION_RATIO * reserved) or retries > 0
    if not (cuda and fragmented and not expandable):
        return None
    return Finding(
        id="fragmentation",
        severity="warning",
        message=f"the caching allocator is fragmented: reserved {_fmt(reserved)} vs allocated {_fmt(allocated)}, "
        f"{_fmt(int(cuda.get('inactive_split', 0) or 0))} in inactive split blocks, {retries} alloc retries; "
        "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
        symptom="mid-run-oom",
    )


def lint(f: RunFacts) -> list[Finding]:
    """All findings for one run, errors first."""
    out = [finding for rule in _RULES if (finding := rule(f)) is not None]
    out.sort(key=lambda x: _SEVERITY_ORDER.get(x.severity, 3))
    return out


def _series(samples: list[dict], part: str, site: str, key: str | None = None) -> list[int]:
    """One line's figure at each step end (0 where the line had nothing surviving)."""
    out = []
    for s in samples:
        v = s.get(part, {}).get(site, 0)
        out.append(int((v.get(key, 0) if isinstance(v, dict) else v) or 0))
    return out


def _per_step(series: list[int]) -> int:
    return (series[-1] - series[0]) // max(len(series) - 1, 1)


def _rising(series: list[int], least: int = 1) -> bool:
    """Every step adds at least `least`."""
    return len(series) >= 2 and all(b - a >= least for a, b in itertools.pairwise(series))


def _growth(f: RunFacts) -> Finding | None:
    """``memory-growth``: the bytes that outlive each step grow every step; the lines that allocated them."""
    samples = f.survivors
    totals = [sum(s.get("sites", {}).values()) for s in samples]
    if not _rising(totals, GROWTH_MIN_BYTES):
        return None
    per_step = _per_step(totals)
    growth = {}
    for site in samples[-1].get("sites", {}):
        grew = _per_step(_series(samples, "sites", site))
        if site != "?" and grew > 0 and grew >= GROWTH_SITE_SHARE * per_step:
            growth[site] = grew
    ranked = sorted(growth, key=lambda s: -growth[s])[:GROWTH_SITES]
    sites = [f"{s} (+{_fmt(growth[s])}/step)" for s in ranked]
    where = ("; the tensors that survive each step were allocated at " + ", ".join(sites)) if sites else ""
    return Finding(
        id="memory-growth",
        severity="error",
        message=f"allocated memory grows by {_fmt(per_step)} per step "
        f"({' → '.join(_fmt(b) for b in totals)} alive at the end of steps 2–{len(totals) + 1}){where}",
        symptom="mid-run-oom",
        modules=tuple(ranked),
        detail="keep Python numbers, not tensors: loss.item() in running sums and lists, evaluation under "
        "torch.no_grad(), metrics computed in the step (or .detach().cpu()) instead of keeping logits",
        figures={"kind": "tensors", "per_step_bytes": per_step, "sites": {s: growth[s] for s in ranked}},
    )


def _graph_kept(f: RunFacts) -> Finding | None:
    """``graph-kept``: tensors with a grad_fn kept across steps; their graphs gain nodes every step."""
    samples = f.survivors
    rows = []
    for site in samples[-1].get("graphs", {}) if samples else ():
        nodes = _series(samples, "graphs", site, "nodes")
        if site == "?" or not _rising(nodes):
            continue
        saved = max(0, _per_step(_series(samples, "graphs", site, "saved_bytes")))
        kept = max(0, _per_step(_series(samples, "graphs", site, "tensor_bytes")))
        rows.append((f.stored_at.get(site, site), site, saved, kept, _per_step(nodes)))
    if not rows:
        return None
    rows.sort(key=lambda r: (-r[2], -r[4]))
    store, alloc, saved, kept, nodes = rows[0]
    found = alloc in f.stored_at
    if not found:  # no line of the script was found to store it as is
        subject = f"the tensors allocated at {alloc}, kept across steps, keep the autograd graph of every step"
    else:
        made = "" if store == alloc else f" (the tensor from {alloc})"
        subject = f"{store} keeps the autograd graph of every step{made}"
    if saved >= GROWTH_MIN_BYTES:
        held = f"{_fmt(saved)}/step of saved activations ({nodes} graph nodes/step)"
    else:
        tensors = f"{_fmt(kept)}/step of kept tensors and " if kept else ""
        held = (
            f"{nodes} graph nodes/step; backward already freed their saved activations, so what grows is "
            f"{tensors}the nodes in host memory"
        )
    others = [r[0] for r in rows[1:GROWTH_SITES]]
    return Finding(
        id="graph-kept",
        severity="error" if saved >= GROWTH_MIN_BYTES else "warning",
        message=f"{subject}: {held}" + (f"; also {', '.join(others)}" if others else ""),
        symptom="mid-run-oom",
        modules=tuple(r[0] for r in rows[:GROWTH_SITES]),
        detail="store a Python number (loss.item()) or a tensor without its graph (loss.detach()); "
        "compute evaluation losses under torch.no_grad()",
        figures={
            "kind": "graph",
            "stored_at": store if found else None,
            "allocated_at": alloc,
            "saved_bytes_per_step": saved,
            "tensor_bytes_per_step": kept,
            "nodes_per_step": nodes,
        },
    )


_RULES = (
    _ckpt_not_active,
    _ckpt_reentrant,
    _amp_off,
    _optimizer_dominates,
    _foreach_temporaries,
    _dataloader_workers_0,
    _graph_kept,
    _growth,
    _fragmentation,
)
"""Every rule, in the order findings of one severity are listed."""

__all__ = ["Finding", "RunFacts", "lint"]
