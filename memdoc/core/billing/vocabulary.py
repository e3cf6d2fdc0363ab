"""The words a bill and a measurement share: the phases of a step and the line items of memory.

One source for the bill (`memdoc.core.billing.bill`), measurements
(`memdoc.core.billing.measurement`), the tracer, the script runner and the renderer.
"""

PHASES = ("forward", "backward", "optimizer")
"""The phases of one training step, in order; memory peaks in one of them."""

STEP_PHASES = ("generation", "reference", "forward", "backward", "optimizer")
"""Every phase a step may have, in order: the post-training tasks (`plan.task`) add `generation` (online tasks
sample their completions) and `reference` (the frozen reference's, or the old policy's, log-probabilities under
`no_grad`) before the policy's forward; supervised fine-tuning has `PHASES` only."""

SCORING_AFTER_FORWARD = ("forward", "reference", "backward", "optimizer")
"""DPO's and KTO's order: the reference forward runs after the policy's forward (TRL 1.16 `_compute_loss`)."""

LINE_ITEMS = ("weights", "gradients", "optimizer", "activations", "other")
"""The line items of per-GPU memory, in bill order."""

TIMELINE_CATEGORIES = ("weights", "gradients", "optimizer", "activations+other")
"""The categories of a memory timeline (a CUDA allocator trace tells model states from the rest only)."""

__all__ = ["LINE_ITEMS", "PHASES", "SCORING_AFTER_FORWARD", "STEP_PHASES", "TIMELINE_CATEGORIES"]
