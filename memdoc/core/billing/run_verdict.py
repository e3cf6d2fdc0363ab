"""One verdict for the whole run (issue 35): every part of the run on the GPU (load, step, evaluation, save, rank 0's
worst) and the host RAM of rank 0's node, against the card and the host's RAM.

The GPU side is the one fit rule (`verdict.fit_answer`) on the part whose minimum memory is largest on rank 0
(`RunBill.peak_part(rank0=True)`); when that is the step, it is the step's own verdict. The host side is judged only
against a known limit: `--host-ram`, or this machine's RAM when the GPUs are this machine's (the caller decides:
`resolve.host.host_limit`). The run fits when both do; the part that decides is named.
"""

from __future__ import annotations

from dataclasses import dataclass

from memdoc.core.billing.run_phases import RunBill
from memdoc.core.billing.verdict import Fit, FitAnswer


@dataclass(frozen=True)
class RunVerdict:
    """The whole run's fit: the GPU's deciding part, and the host RAM per node against its limit (when known)."""

    gpu_part: str
    """The part of the run whose minimum memory is largest on rank 0 (`load`, `step`, `eval`, `save`)."""
    gpu: FitAnswer | None
    """That part's fit on the card (None without a GPU)."""
    host_part: str
    """The part whose host bytes on rank 0's node are largest."""
    host_bytes: int
    """Host RAM that part needs on rank 0's node."""
    host_limit: int | None
    """The host RAM per node it is judged against; None: not judged (unknown, or the GPUs are elsewhere)."""
    host_source: str
    """Where `host_limit` comes from, in words."""

    @property
    def host_fits(self) -> bool | None:
        return None if self.host_limit is None else self.host_bytes <= self.host_limit

    @property
    def fits(self) -> bool | None:
        """Runs at all: False when the GPU's deciding part or the host does not fit; None when neither is judged."""
        answers = [a for a in (None if self.gpu is None else self.gpu.fits, self.host_fits) if a is not None]
        return None if not answers else all(answers)

    @property
    def decided_by(self) -> str | None:
        """What turns the verdict: 'host' when the host RAM does not fit, else the GPU's deciding part."""
        if self.host_fits is False:
            return "host"
        return None if self.gpu is None else self.gpu_part

    @property
    def fit(self) -> str | None:
        """The whole run's fit word (`verdict.Fit`): the GPU's deciding part's, or `no` when the host decides."""
        if self.host_fits is False:
            return Fit.NO.value
        return None if self.gpu is None else self.gpu.fit.value

    def to_json(self) -> dict:
        return {
            "fits": self.fits,
            "fit": self.fit,
            "decided_by": self.decided_by,
            "gpu_part": self.gpu_part,
            "gpu_min_memory_bytes": None if self.gpu is None else self.gpu.min_memory_bytes,
            "host_part": self.host_part,
            "host_bytes_per_node": self.host_bytes,
            "host_limit_bytes": self.host_limit,
            "host_source": self.host_source,
            "host_fits": self.host_fits,
        }


def run_verdict(run: RunBill, host_limit: int | None = None, host_source: str = "not judged") -> RunVerdict:
    """The whole run's verdict: the GPU part that needs the most on rank 0, and the host's peak part against
    `host_limit` (None: the host is shown, not judged)."""
    part = run.peak_part(rank0=True)
    host_part = run.host_peak_part
    return RunVerdict(
        gpu_part=part,
        gpu=run.fit(part, rank0=True),
        host_part=host_part,
        host_bytes=run.parts[host_part].host_per_node(run.gpus_per_node),
        host_limit=host_limit,
        host_source=host_source,
    )


__all__ = ["RunVerdict", "run_verdict"]
