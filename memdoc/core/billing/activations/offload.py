"""Activation offloading: the checkpointed layers' inputs kept in pinned host memory instead of the GPU.

The mechanism billed is transformers 5.24's (`modeling_utils.py` `PreTrainedModel._activation_checkpointing_enable`
with `offload=True`): each checkpointed decoder layer runs `checkpoint(layer, hidden_states, …)` inside
`torch.autograd.graph.save_on_cpu(pin_memory=True)`. Non-reentrant checkpointing saves the layer's positional
inputs for the recompute (`torch/utils/checkpoint.py` `_NoopSaveInputs`), and `save_on_cpu`'s pack hook copies
each into a new pinned host tensor (`torch/autograd/graph.py` `save_on_cpu.pack_to_cpu`): the GPU input dies
when the next layer is done with it. The tensors the layer saves inside the checkpoint are the checkpoint's own
holders, recomputed in backward, never offloaded; the rotary `cos`/`sin` are keyword arguments, held once by the
model, not per layer. In backward the unpack hook copies the input back (`tensor.to(device)`), one layer at a
time: the GPU holds that copy next to the layer's recompute. Axolotl's `activation_offloading: hidden_states`
(non-reentrant) passes the same switch to transformers (`axolotl/core/builders/base.py`
`_configure_gradient_checkpointing`, 0.19); torchtune's `OffloadActivations` moves the same tensors on a side
stream. Layers that `--checkpoint-every N` leaves unchecked keep their activations on the GPU (transformers
only wraps the checkpointed layers' calls).

Under peft, layer 0's input stays on the GPU as well: `activation_checkpointing_enable` calls
`enable_input_require_grads`, whose hook makes the frozen embedding's output a leaf that requires a gradient, and
the graph's `AccumulateGrad` node holds that leaf (the host still gets its copy). A trainable embedding's output
is no leaf and is freed (fake-tensor traces of Llama-3.2-1B, LoRA and full).

Both copies are issued on the compute stream (`non_blocking` only frees the host thread), so they are billed
as exposed time over the card's host link (`steptime.step_time`).
"""

from __future__ import annotations

from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.plan import Checkpointing, TrainingPlan

OFFLOAD_NOTE = (
    "activation offload: the checkpointed layers' inputs live in pinned host memory (the host column); one "
    "layer's comes back to the GPU for its recompute, and both copies take the host link's time"
)


def offloads(plan: TrainingPlan) -> bool:
    """Does the plan keep its checkpointed layers' inputs on the host (`--activation-offload`, full checkpointing)?"""
    return plan.activation_offload and plan.checkpointing is Checkpointing.FULL


def checkpointed_layers(model: ModelSpec, plan: TrainingPlan) -> int:
    """Decoder layers checkpointed under full checkpointing: 0, N, 2N, … of L (transformers'
    `_set_gradient_checkpointing`: `layer_index % every_n_layers == 0`), so ⌈L / N⌉."""
    return -(-model.num_layers // plan.checkpoint_every)


def offloaded_bytes(model: ModelSpec, plan: TrainingPlan, residual: int) -> int:
    """Pinned host bytes one micro-batch's forward leaves behind: one layer input (`residual`, tokens × hidden ×
    the stream's width) per checkpointed layer; 0 without offloading."""
    return residual * checkpointed_layers(model, plan) if offloads(plan) else 0


__all__ = ["OFFLOAD_NOTE", "checkpointed_layers", "offloaded_bytes", "offloads"]
