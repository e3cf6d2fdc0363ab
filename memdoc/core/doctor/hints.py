"""The figures a symptom text states, computed from the user's bill and plan (`symptoms.HINTS`).

A symptom text says `{name|generic words}`; with a plan, `hint_values` gives each name its value
from the same bill and plan the rest of the output uses, so the text cannot contradict the bill:

- `model_states_per_param`: (weights + gradients + optimizer states) / parameters, from the bill's
  `ModelStates` (unsharded), e.g. "8.0 bytes per parameter on this plan (bf16, adamw)".
- `optimizer_per_param`: optimizer states / trainable parameters.
- `micro_batch_half`, `grad_accum_keep`: the micro-batch halved and the accumulation that keeps
  micro-batch × accumulation (the effective batch per GPU) unchanged, the same arithmetic as the
  lever `{micro_batch: half}` (`memdoc.core.doctor.quantify.apply_lever`).
- `micro_batch_double`, `grad_accum_double`: the same for doubling.
- `max_length`: the data's p99 token length when `--dataset` measured it; no value otherwise
  (the plan's own `seq_len` is what overflowed, so it is no cap).
- `batch_half`, `context_half`: the inference levers `{micro_batch: half}`, `{seq_len: half}`.

Pure: no I/O, no torch.
"""

from __future__ import annotations

from memdoc.core.billing.bill import Bill
from memdoc.core.model.plan import TrainingPlan

__all__ = ["hint_values"]


def hint_values(plan: TrainingPlan | None, bill: Bill | None = None, *, max_length: int | None = None) -> dict:
    """The values of `symptoms.HINTS` this plan and bill determine (names they do not determine are absent)."""
    values: dict[str, str] = {}
    if max_length is not None:
        values["max_length"] = str(max_length)
    if plan is None:
        return values
    mb, ga = plan.micro_batch, plan.grad_accum
    if mb > 1:
        half = max(1, mb // 2)
        values |= {"micro_batch_half": str(half), "grad_accum_keep": str(ga * mb // half)}
        values["batch_half"] = str(half)
    if ga % 2 == 0:
        values |= {"micro_batch_double": str(mb * 2), "grad_accum_double": str(ga // 2)}
    if plan.seq_len > 1:
        values["context_half"] = str(plan.seq_len // 2)
    if bill is not None:
        states = bill.states
        params = bill.model.params.total
        what = f"{plan.precision.value}, {plan.optimizer.value}, {plan.method.value}"
        if params:
            per = (states.weights + states.gradients + states.optimizer) / params
            values["model_states_per_param"] = f"{per:.1f} bytes per parameter on this plan ({what})"
        if states.trainable_params:
            values["optimizer_per_param"] = (
                f"{states.optimizer / states.trainable_params:.1f} bytes per trainable parameter on this plan ({what})"
            )
    return values
