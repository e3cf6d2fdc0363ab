"""The documented --json shape of a bill (`bill.Bill`), apart from the bill so that it stays within its size,
and the cut of its `per_gpu` byte table that a row of a list carries (`row_per_gpu_json`)."""

from __future__ import annotations

from memdoc.core.billing.verdict import fit_json
from memdoc.core.billing.vocabulary import LINE_ITEMS, STEP_PHASES
from memdoc.core.model.gpu import gpu_json
from memdoc.core.model.model_spec import model_json


def bill_json(bill) -> dict:
    """The documented --json shape of a bill (bytes; per_gpu at the peak phase)."""
    peak = bill.peak
    return {
        "model": model_json(bill.model, bill.states.trainable_params),
        "gpu": gpu_json(bill.gpu, bill.plan.world_size),
        "plan": bill.plan.to_dict(),
        "per_gpu": {
            **{k: getattr(peak, k) for k in LINE_ITEMS},
            "peak_allocated": bill.peak_allocated,
            "peak_reserved": bill.peak_reserved,
            "process_total": bill.process_total,
            "fragmentation_bytes": bill.fragmentation_bytes,
            "overhead_bytes": bill.overhead_bytes,
            "min_memory_bytes": bill.min_memory_bytes,
        },
        "phases": {name: bill.phases[name].to_dict() for name in bill.phase_names},
        "phase_names": list(bill.phase_names),
        "engine": bill.engine,
        "buffers": dict(bill.buffers),
        "host_bytes": bill.host_bytes,
        "host_bytes_per_node": bill.host_bytes_per_node,
        "host": {"device": bill.plan.offload_to.value, **bill.host} if bill.host else None,
        "nvme": dict(bill.nvme) or None,
        "peak_phase": bill.peak_phase,
        **fit_json(bill.fits, bill.headroom_bytes, bill.fit),
        "notes": list(bill.notes),
    }


def row_per_gpu_json(peak_allocated: int, process_total: int, min_memory_bytes: int | None = None) -> dict:
    """`per_gpu` of a row (a ladder rung, a searched plan, a hardware option): the bill's byte table cut to
    the figures a list compares (same names as `bill_json`'s `per_gpu`)."""
    out = {"peak_allocated": peak_allocated, "process_total": process_total}
    return out | ({} if min_memory_bytes is None else {"min_memory_bytes": min_memory_bytes})


def billed_phases(bill) -> dict[str, int | None]:
    """The bill's total of every step phase (`vocabulary.STEP_PHASES`); None for a phase the bill has not."""
    return {p: (bill.phases[p].total if p in bill.phases else None) for p in STEP_PHASES}


def with_bill(post: dict, bill) -> dict:
    """A post-training run's phases (`memdoc.probe.script.trl_phases.post_report`) with each phase's billed
    bytes next to the measured ones: `bill.phases` by the STEP_PHASES names, None for a phase the bill lacks
    (or without a bill)."""
    phases = getattr(bill, "phases", None) or {}
    billed = {p: (int(phases[p].total) if p in phases else None) for p in STEP_PHASES}
    return post | {"billed": billed}


__all__ = ["billed_phases", "bill_json", "row_per_gpu_json", "with_bill"]
