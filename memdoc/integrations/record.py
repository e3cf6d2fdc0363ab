"""What the Trainer callback records during a run, and the JSON report it writes.

Plain data and arithmetic on it (no torch): the step log (memory at each step start, the batch
shape), the largest batch seen, the measurement of the first steady-state step next to its bill,
findings, and an out-of-memory error with its diagnosis and prescriptions.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from memdoc.core.billing.bill import Bill, bill_json
from memdoc.core.billing.vocabulary import LINE_ITEMS
from memdoc.core.doctor.findings import Finding
from memdoc.core.doctor.growth import memory_growth

MAX_STEP_RECORDS = 1024
"""The step log keeps at most this many entries: when full, every other one is dropped and only
every 2nd (then 4th, …) step is recorded from then on, so a long run keeps an even sample."""


def batch_key(shape: tuple[int, int]) -> tuple[int, int]:
    """Order of batch shapes: tokens (batch × sequence), then sequence length."""
    return shape[0] * shape[1], shape[1]


def billed_json(bill: Bill) -> dict:
    """The report's `billed`: peak_allocated, peak_phase, peak_reserved, process_total and the items."""
    per_gpu = bill_json(bill)["per_gpu"]
    return {
        "peak_allocated": per_gpu["peak_allocated"],
        "peak_phase": bill.peak_phase,
        "peak_reserved": per_gpu["peak_reserved"],
        "process_total": per_gpu["process_total"],
        "items": {k: per_gpu[k] for k in LINE_ITEMS},
        "notes": list(bill.notes),
    }


@dataclass
class RunRecord:
    """The run so far, as the report shows it."""

    device: str
    memory_source: str
    """'cuda-allocated' (torch.cuda.memory_allocated at each step start) or 'cpu-rss' (resident set)."""
    status: str = "running"
    """'running', 'finished' or 'oom'."""
    model: str | None = None
    plan: dict | None = None
    detected: dict | None = None
    measured: dict | None = None
    billed: dict | None = None
    post: dict | None = None
    """Inside a TRL post-training trainer: the measured step's phases (`trl_phases.post_report`), billed by phase."""
    headroom_bytes: int | None = None
    steps: list[dict] = field(default_factory=list)
    stride: int = 1
    largest_batch: dict | None = None
    findings: list[Finding] = field(default_factory=list)
    oom: dict | None = None
    notes: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    # ---- the step log
    def log_step(self, step: int, start_bytes: int | None, batch: tuple[int, int] | None) -> Finding | None:
        """Record one optimizer step; returns a new `memory-growth` finding when it first appears."""
        if batch is not None and (
            self.largest_batch is None or batch_key(batch) > batch_key(tuple(self.largest_batch["shape"]))
        ):
            self.largest_batch = {"shape": list(batch), "step": step}
        if step % self.stride:
            return None
        self.steps.append({"step": step, "start_bytes": start_bytes, "batch": list(batch) if batch else None})
        if len(self.steps) > MAX_STEP_RECORDS:
            self.stride *= 2
            self.steps = [s for s in self.steps if s["step"] % self.stride == 0]
        if any(f.id == "memory-growth" for f in self.findings):
            return None
        starts = [(s["step"], s["start_bytes"]) for s in self.steps if s["step"] >= 2 and s["start_bytes"] is not None]
        finding = memory_growth(starts)
        if finding is not None:
            self.findings.append(finding)
        return finding

    def max_seq_before(self, step: int) -> int | None:
        """Longest sequence of the batches recorded before `step`."""
        seqs = [s["batch"][1] for s in self.steps if s["step"] < step and s["batch"]]
        return max(seqs, default=None)

    # ---- the report
    def to_json(self) -> dict:
        return {
            "status": self.status,
            "device": self.device,
            "model": self.model,
            "plan": self.plan,
            "detected": self.detected,
            "measured": self.measured,
            "billed": self.billed,
            "post_training": self.post,
            "headroom_bytes": self.headroom_bytes,
            "largest_batch": self.largest_batch,
            "memory_source": self.memory_source,
            "steps": list(self.steps),
            "findings": [f.to_json() for f in self.findings],
            "oom": self.oom,
            "notes": list(self.notes),
        }

    def write(self, path: Path) -> None:
        """Write the report atomically (a reader never sees half a file)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, path)


def oom_record(
    message: str,
    traceback_text: str,
    *,
    step: int,
    where: str,
    batch: tuple[int, int] | None,
    longest_before: int | None,
    first_step: bool,
    bill: Bill | None = None,
) -> dict:
    """The report's `oom`: the doctor's diagnosis (`memdoc.core.doctor.diagnosis.diagnose_oom`, the
    pipeline `memdoc prescribe --log` runs) of the message and traceback, with the run's facts a log
    lacks (`RunContext`: an OOM in the first step is startup-oom, a failing batch longer than every
    earlier one long-sample-oom) and, given the failing batch's `bill`, its prescriptions quantified."""
    from memdoc.core.doctor.diagnosis import PlanContext, RunContext, diagnose_oom

    first_line = message.strip().splitlines()[0] if message.strip() else ""
    text = traceback_text if first_line and first_line in traceback_text else f"{traceback_text}\n{message}"
    run = RunContext(step=step, first_step=first_step, batch=batch, longest_before=longest_before)
    plan = None if bill is None else PlanContext(model=bill.model, plan=bill.plan, gpu=bill.gpu)
    d = diagnose_oom(text, plan=plan, run=run)
    figures = None
    if d.event is not None:
        figures = {k: v for k, v in dataclasses.asdict(d.event).items() if k not in ("raw", "position")}
    data = d.to_json()
    return {
        "message": first_line or "out of memory",
        "step": step,
        "where": where,
        "batch": list(batch) if batch else None,
        "figures": figures,
        "symptom": d.symptom.id,
        "kind": d.kind,
        "phase": d.phase,
        "causes": data["causes"],
        "culprit": data["culprit"],
        "reasons": list(d.reasons),
        "unknowns": list(d.unknowns),
        "prescribe": f"memdoc prescribe --symptom {d.symptom.id}",
        "prescriptions": data["prescriptions"],
        "set_apart": data["set_apart"],
    }
