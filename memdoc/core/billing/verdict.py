"""The verdict with its uncertainty, and what the "other" line of a bill holds.

The bill's verdict compares the process total (≈ nvidia-smi) with the GPU's memory. That total
is an estimate, and its error is benchmarked: `benchmarks/RESULTS.md` compares the bill with
published measurements of real runs (rows P7–P14: the reserved memory of Llama-2/3 LoRA and QLoRA
runs). Seven of those eight rows are within ±9.7% (P7 +4.7%, P8 −9.7%, P9 −7.2%, P10 −1.5%,
P11 +5.7%, P13 +4.9%, P14 −3.6%); the eighth, P12 (−43%), is allocator fragmentation the bill
does not model. So a plan whose headroom (or overshoot) is within `VERDICT_ERROR` of its
process total is a close call: the bill cannot tell fit from OOM there, and says so.
"""

from __future__ import annotations

from dataclasses import dataclass

VERDICT_ERROR = 0.10
"""Relative error of the billed process total against published measurements (benchmarks/RESULTS.md,
rows P7–P14 except the fragmentation outlier P12: |error| ≤ 9.7%)."""
VERDICT_ERROR_SOURCE = "benchmarks/RESULTS.md, published runs P7–P14"


@dataclass(frozen=True)
class Verdict:
    """Fits or not, and whether the answer is inside the bill's benchmarked error."""

    fits: bool
    margin_bytes: int
    """Headroom (positive) or overshoot (negative) per GPU."""
    error_bytes: int
    """The bill's benchmarked error at this process total (VERDICT_ERROR × process total)."""

    @property
    def close_call(self) -> bool:
        return abs(self.margin_bytes) <= self.error_bytes

    def to_json(self) -> dict:
        return {"fits": self.fits, "margin_bytes": self.margin_bytes, "error_bytes": self.error_bytes,
                "close_call": self.close_call, "error_source": VERDICT_ERROR_SOURCE}


def verdict(process_total: int, gpu_memory: int) -> Verdict:
    """The verdict of a per-GPU process total on a GPU with `gpu_memory` bytes."""
    margin = gpu_memory - process_total
    return Verdict(fits=margin >= 0, margin_bytes=margin, error_bytes=round(VERDICT_ERROR * process_total))


def other_explained(bill) -> str | None:
    """What the "other" line holds at the bill's peak phase, in words (None when it is empty)."""
    phase = bill.peak_phase
    other = bill.phases[phase].other
    if other <= 0:
        return None
    if phase == "optimizer":
        temp = bill.states.optimizer_step_temp
        what = {
            "adamw": "foreach AdamW builds one buffer the size of its states' group (sqrt of exp_avg_sq) "
                     "during the step; --optimizer adamw-fused does not",
            "lion": "Lion's foreach step builds one update buffer the size of the parameters",
            "adafactor": "Adafactor's step builds one buffer the size of the largest parameter",
        }.get(bill.plan.optimizer.value, "the optimizer step's temporaries")
        return f"other at the optimizer step: temporaries inside optimizer.step() — {what}" + (
            "" if temp == other else "; plus all-gather buffers of sharded weights")
    acts = bill.acts
    if phase == "forward":
        parts = [("the loss's fp32 logits (upcast and log-softmax)", acts.loss_forward_peak),
                 ("16-bit weight copies made by autocast", acts.weight_copies)]
        named = [label for label, n in parts if n > 0]
        if other > sum(n for _, n in parts):
            named.append("all-gather buffers of sharded weights")
        return "other in forward: transients — " + ", ".join(named)
    return ("other in backward: transients — the fp32 gradient of the logits, one layer's gradient buffers "
            "(and its recomputed activations with checkpointing) or the embedding's gradient, whichever peaks"
            + ("; autocast weight copies" if acts.weight_copies else ""))
