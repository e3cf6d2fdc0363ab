"""Label a TRL trainer's work by phase, from the trainer's own methods and callbacks (TRL 1.16, transformers 5.24).

The order of one optimizer step (`transformers/trainer.py` `Trainer._inner_training_loop`): `on_step_begin`,
`training_step` (GRPO: `_prepare_inputs` generates and scores first; then `compute_loss`, then
`accelerator.backward`), gradient clipping, `on_pre_optimizer_step`, `optimizer.step`, `model.zero_grad`,
`on_step_end`. The labels:

* `generation`: from the call of the policy's `generate` (GRPO `_generate_single_turn`,
  `unwrapped_model.generate`) to the next label (the scoring after it keeps this label);
* `reference`: a top-level forward of the policy or reference model under `torch.no_grad` outside `generate`:
  DPO's reference forward (`DPOTrainer._compute_loss`, after the policy forward, `self.ref_model(...)` or
  `self.model(...)` under `use_adapter`), GRPO's reference and old-policy log-probs
  (`_generate_and_score_completions` → `_get_per_token_logps_and_entropies`); the label before it resumes after;
* `forward`: from `compute_loss` (policy forward and loss);
* `backward`: from `accelerator.backward` (gradient clipping after it keeps this label);
* `optimizer`: from `on_pre_optimizer_step` to `on_step_end` (`optimizer.step`, `zero_grad`).
"""

from __future__ import annotations

import gc

import torch
from transformers import TrainerCallback

from benchmarks.posttrain.tracker import LiveBytes


class PhaseProbe(TrainerCallback):
    """Measure optimizer step `step` (1-based) of `trainer`; after training, `self.done` is its `LiveBytes`."""

    def __init__(self, trainer, step: int) -> None:
        self.trainer, self.step = trainer, step
        self.live: LiveBytes | None = None
        self.done: LiveBytes | None = None
        self.in_generation = False
        self.stack: list[str] = []
        self.inputs: dict[str, list[int]] = {}
        self.grad_ids: set[int] = set()
        self._wrap(trainer)

    def label(self, phase: str) -> str | None:
        return self.live.set_phase(phase) if self.live is not None else None

    def _wrap(self, trainer) -> None:
        compute_loss, backward, generate = trainer.compute_loss, trainer.accelerator.backward, trainer.model.generate

        def compute_loss_labelled(model, inputs, *args, **kwargs):
            self.label("forward")
            if self.live is not None:
                self.inputs.update({k: list(v.shape) for k, v in inputs.items() if isinstance(v, torch.Tensor)})
            return compute_loss(model, inputs, *args, **kwargs)

        def backward_labelled(*args, **kwargs):
            self.label("backward")
            return backward(*args, **kwargs)

        def generate_labelled(*args, **kwargs):
            self.label("generation")
            self.in_generation = True
            try:
                out = generate(*args, **kwargs)
            finally:
                self.in_generation = False
            if self.live is not None:
                self.inputs["generated"] = list(out.shape)
            return out

        trainer.compute_loss, trainer.accelerator.backward = compute_loss_labelled, backward_labelled
        trainer.model.generate = generate_labelled
        for model in (trainer.model, getattr(trainer, "ref_model", None)):
            if model is not None:
                model.register_forward_pre_hook(self._pre_forward)
                model.register_forward_hook(self._post_forward)

    def _pre_forward(self, module, args) -> None:
        if not torch.is_grad_enabled() and not self.in_generation and self.live is not None:
            self.stack.append(self.label("reference"))

    def _post_forward(self, module, args, output) -> None:
        if self.stack and not torch.is_grad_enabled() and not self.in_generation:
            self.label(self.stack.pop())

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step + 1 == self.step:
            gc.collect()
            self.live = LiveBytes()
            self.live.__enter__()
            self.live.scan()

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        if self.live is not None:
            grads = (p.grad for p in self.trainer.model.parameters() if p.grad is not None)
            self.grad_ids = {self.live.key_of(g) for g in grads}
            self.label("optimizer")

    def on_step_end(self, args, state, control, **kwargs):
        if self.live is not None:
            self.live.__exit__(None, None, None)
            self.done, self.live = self.live, None
