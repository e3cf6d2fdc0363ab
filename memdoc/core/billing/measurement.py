"""What one measured (traced or real) training step used: the same line items as the bill.

`Measurement` is produced by `memdoc.probe.tracer.trace_training_step` (mode "traced"), by a real
CUDA run ("cuda") or by running the user's script ("script"). Pure Python: no torch import here, so
the analytic side can compare against measurements without loading torch.

Line items (integer bytes, per GPU):

- ``weights``: parameters and buffers (for QLoRA: packed 4-bit storage plus quantisation constants).
- ``gradients``: parameter gradients.
- ``optimizer``: persistent optimizer states (not the step's temporaries).
- ``activations``: tensors produced in forward (and recomputed under checkpointing) still alive.
- ``other``: temporaries (activation gradients in backward, optimizer-step temporaries such as
  foreach AdamW's param-sized scratch), inputs, anything else.

``peak_allocated`` is the sum of the line items at the peak instant, comparable to
``torch.cuda.max_memory_allocated()``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from memdoc.core.billing.vocabulary import LINE_ITEMS, PHASES, STEP_PHASES

MODES = ("traced", "cuda", "script")


def _items_total(items: dict) -> int:
    return sum(int(items.get(k, 0)) for k in LINE_ITEMS)


@dataclass(frozen=True, kw_only=True)
class Measurement:
    """Memory of one steady-state training step, itemised at the peak, per phase and per module."""

    weights: int
    gradients: int
    optimizer: int
    activations: int
    other: int
    peak_allocated: int
    peak_phase: str
    """The phase in which `peak_allocated` happens: 'forward', 'backward' or 'optimizer', and for a post-training
    step also 'generation' or 'reference' (`vocabulary.STEP_PHASES`)."""
    phases: dict[str, dict[str, int]] = field(default_factory=dict)
    """phase -> {weights, gradients, optimizer, activations, other, peak_allocated} at that phase's own peak."""
    modules: list[tuple[str, int]] = field(default_factory=list)
    """Top modules by activation bytes kept after their forward (per instance; `layers.*` = each layer)."""
    mode: str = "traced"
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.peak_phase not in STEP_PHASES:
            raise ValueError(f"peak_phase must be one of {STEP_PHASES}, got {self.peak_phase!r}")

    @property
    def line_items(self) -> dict[str, int]:
        """The five line items at the peak, in bill order."""
        return {k: getattr(self, k) for k in LINE_ITEMS}

    @classmethod
    def from_phases(
        cls,
        phases: dict[str, dict[str, int]],
        *,
        modules: list[tuple[str, int]] | None = None,
        mode: str = "traced",
        notes: list[str] | None = None,
    ) -> Measurement:
        """Build from per-phase line items (phases of `STEP_PHASES`, in step order); the peak is the phase with the
        largest total, the earlier one on a tie."""
        clean: dict[str, dict[str, int]] = {}
        for phase in STEP_PHASES:
            if phase not in phases:
                continue
            items = {k: int(phases[phase].get(k, 0)) for k in LINE_ITEMS}
            items["peak_allocated"] = _items_total(items)
            clean[phase] = items
        if not clean:
            raise ValueError("no phase recorded")
        peak_phase = max(clean, key=lambda p: (clean[p]["peak_allocated"], -STEP_PHASES.index(p)))
        top = clean[peak_phase]
        return cls(
            **{k: top[k] for k in LINE_ITEMS},
            peak_allocated=top["peak_allocated"],
            peak_phase=peak_phase,
            phases=clean,
            modules=list(modules or []),
            mode=mode,
            notes=list(notes or []),
        )

    def to_json(self) -> dict:
        """Plain data for --json (all sizes in bytes)."""
        return {
            "mode": self.mode,
            "measured": {**self.line_items, "peak_allocated": self.peak_allocated},
            "peak_phase": self.peak_phase,
            "phases": {p: dict(v) for p, v in self.phases.items()},
            "modules": [{"module": name, "activation_bytes": int(b)} for name, b in self.modules],
            "notes": list(self.notes),
        }


__all__ = ["LINE_ITEMS", "MODES", "PHASES", "STEP_PHASES", "Measurement"]
