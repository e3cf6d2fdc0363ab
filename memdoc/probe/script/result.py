"""What one run of the user's script measured."""

from __future__ import annotations

from dataclasses import dataclass, field

from memdoc.core.billing.measurement import Measurement
from memdoc.core.doctor.findings import Finding, RunFacts


@dataclass
class ScriptResult:
    """Everything measured while the script ran."""

    script: str
    stop_reason: str
    """'steps' (stopped after N steps), 'finished' (ran to its end), 'exit' (sys.exit or os._exit),
    'timeout', 'interrupted' (KeyboardInterrupt), 'terminated' (SIGTERM), 'oom' (torch.OutOfMemoryError) or
    'error' (another exception)."""
    steps: int
    measured: dict
    """weights, gradients, optimizer, activations, other, peak_allocated (+ peak_reserved on CUDA)."""
    peak_phase: str | None
    phases: dict
    states: dict
    """Exact model-state bytes at the end: weights, gradients, optimizer (+ trainable)."""
    measurement: Measurement | None = None
    """The training phases itemised (the same type the tracer returns); None when no forward pass was seen.
    `measured`, `peak_phase` and `phases` are its figures as plain data, plus the script-only ones."""
    exit_code: int = 0
    script_exit_code: int | None = None
    traceback: str | None = None
    oom: dict | None = None
    findings: list[Finding] = field(default_factory=list)
    facts: RunFacts | None = None
    hf: dict | None = None
    """{"model_id", "config", "plan": TrainingPlan, "detected": {...}} when an HF model was found."""
    post: dict | None = None
    """A TRL post-training trainer's run (`memdoc.probe.script.trl_phases.post_report`): trainer, task, knobs,
    the peak of every phase of its step (generation and reference included), each generation round's peak."""
    cuda: dict | None = None
    cuda_summary: str | None = None
    snapshot: dict | None = None
    categories: dict = field(default_factory=dict)
    """CUDA block address → category (weights/gradients/optimizer), for the snapshot timeline."""
    cpu_timeline: list = field(default_factory=list)
    models: list[str] = field(default_factory=list)
    optimizers: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0

    def to_json(self) -> dict:
        data = {
            "mode": "script",
            "script": self.script,
            "measured": dict(self.measured),
            "peak_phase": self.peak_phase,
            "phases": self.phases,
            "states": dict(self.states),
            "stopped_after_steps": self.steps,
            "stop_reason": self.stop_reason,
            "oom": self.oom,
            "exit_code": self.exit_code,
            "findings": [f.to_json() for f in self.findings],
            "models": list(self.models),
            "optimizers": list(self.optimizers),
            "notes": list(self.notes),
        }
        if self.post is not None:
            data["post_training"] = dict(self.post)
        if self.cuda is not None:
            data["cuda"] = dict(self.cuda)
        return data
