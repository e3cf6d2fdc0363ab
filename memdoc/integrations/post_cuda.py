"""The CUDA allocator's peak of each post-training phase (generation, reference) inside `MemdocCallback`'s measured
step: the phases come from TRL's trainer methods (`memdoc.probe.script.trl_phases`), the bytes from the peak
counters, reset when a phase begins (`torch.cuda.reset_peak_memory_stats`) and read when it ends; the step's own
peaks (allocated and reserved) are carried across the resets so the step's figures stay whole."""

from __future__ import annotations

from memdoc.core.billing.vocabulary import STEP_PHASES


class CudaPhases:
    """`Session.post_listener` on a GPU: {phase: peak allocated} and each generation round's peak."""

    def __init__(self, device):
        import torch

        self.torch = torch
        self.device = device
        self.peaks: dict[str, int] = {}
        self.rounds: list[dict] = []
        self.carry_allocated = 0
        self.carry_reserved = 0
        self._start = 0
        self._step = 0

    def enter(self, phase: str, step: int) -> None:
        cuda = self.torch.cuda
        self.carry_allocated = max(self.carry_allocated, int(cuda.max_memory_allocated(self.device)))
        self.carry_reserved = max(self.carry_reserved, int(cuda.max_memory_reserved(self.device)))
        self._start, self._step = int(cuda.memory_allocated(self.device)), step
        cuda.reset_peak_memory_stats(self.device)

    def leave(self, phase: str) -> None:
        peak = int(self.torch.cuda.max_memory_allocated(self.device))
        self.peaks[phase] = max(self.peaks.get(phase, 0), peak)
        self.carry_allocated = max(self.carry_allocated, peak)
        if phase == "generation":
            self.rounds.append({"step": self._step, "start_allocated": self._start, "peak_allocated": peak})

    def step_peaks(self) -> tuple[int, int]:
        """(peak allocated, peak reserved) of the whole step: the counters now and what the resets carried."""
        cuda = self.torch.cuda
        return (
            max(self.carry_allocated, int(cuda.max_memory_allocated(self.device))),
            max(self.carry_reserved, int(cuda.max_memory_reserved(self.device))),
        )

    def report(self, trainer, step: int) -> dict:
        """`trl_phases.post_report`'s shape from the allocator: the post-training phases' peaks (no line items) and
        the step's as `step` (the forward, backward and optimizer phases are not split on a GPU)."""
        from memdoc.probe.script.trl_phases import knobs_of, task_of

        phases = {p: {"peak_allocated": self.peaks[p], "step": step} for p in STEP_PHASES if p in self.peaks}
        allocated, _ = self.step_peaks()
        return {
            "trainer": type(trainer).__name__,
            "task": task_of(trainer),
            "knobs": knobs_of(trainer),
            "phases": phases,
            "step_peak_allocated": allocated,
            "peak_phase": max(phases, key=lambda p: phases[p]["peak_allocated"], default=None),
            "generation_rounds": [dict(r, step=step) for r in self.rounds],
        }
