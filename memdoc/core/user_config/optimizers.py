"""transformers' `optim` names (`OptimizerNames`, transformers/training_args.py, 5.24) -> memdoc's optimizer,
or the reason memdoc does not bill it. The `optim` key of every HF-Trainer-based config (TRL, HF,
LLaMA-Factory, Axolotl) takes these names; the inverse of `memdoc.core.emit.base.HF_OPTIMIZERS`."""

from __future__ import annotations

from memdoc.core.model.stack import Stack

BILLED = {
    "adamw_torch": "adamw-foreach",
    "adamw_torch_fused": "adamw-fused",
    "adamw_bnb_8bit": "adamw-8bit",
    "adamw_8bit": "adamw-8bit",
    "paged_adamw_8bit": "paged-adamw-8bit",
    "sgd": "sgd",
    "adafactor": "adafactor",
    "lion_32bit": "lion",
}
"""Names memdoc bills, and as what."""

_EIGHT_BIT = "8-bit states of another optimizer; memdoc bills 8-bit states for AdamW only (adamw_bnb_8bit)"
_NOT_CUDA = "runs on another accelerator (XLA/NPU); memdoc bills CUDA GPUs"
_LOW_MEMORY = "a low-memory optimizer whose states memdoc does not model"

NOT_BILLED = {
    "adamw_torch_xla": _NOT_CUDA,
    "adamw_torch_npu_fused": _NOT_CUDA,
    "adamw_anyprecision": "torchdistx AnyPrecisionAdamW (states in a chosen dtype): not modelled",
    "adamw_torch_4bit": "torchao 4-bit AdamW states: not modelled (memdoc bills bitsandbytes 8-bit states)",
    "adamw_torch_8bit": "torchao 8-bit AdamW states: not modelled (memdoc bills bitsandbytes 8-bit states)",
    "ademamix": "AdEMAMix keeps 3 states (two first moments and a second): not modelled",
    "adagrad": "Adagrad keeps 1 state (the sum of squares): not modelled",
    "ademamix_8bit": _EIGHT_BIT,
    "lion_8bit": _EIGHT_BIT,
    "paged_adamw_32bit": "paged 32-bit AdamW (states in unified memory): memdoc bills paged states for 8-bit AdamW only",
    "paged_ademamix_32bit": "paged AdEMAMix: not modelled",
    "paged_ademamix_8bit": _EIGHT_BIT,
    "paged_lion_32bit": "paged Lion (states in unified memory): not modelled",
    "paged_lion_8bit": _EIGHT_BIT,
    "rmsprop": "RMSprop keeps 1 state (+ momentum when set): not modelled",
    "rmsprop_bnb": _EIGHT_BIT,
    "rmsprop_bnb_8bit": _EIGHT_BIT,
    "rmsprop_bnb_32bit": "bitsandbytes 32-bit RMSprop: not modelled",
    "galore_adamw": "GaLore projects gradients to low rank (states of rank r): not modelled",
    "galore_adamw_8bit": "GaLore projects gradients to low rank (states of rank r): not modelled",
    "galore_adafactor": "GaLore projects gradients to low rank (states of rank r): not modelled",
    "galore_adamw_layerwise": "layer-wise GaLore (one layer's gradients at a time): not modelled",
    "galore_adamw_8bit_layerwise": "layer-wise GaLore (one layer's gradients at a time): not modelled",
    "galore_adafactor_layerwise": "layer-wise GaLore (one layer's gradients at a time): not modelled",
    "lomo": "LOMO fuses the update into backward (no whole gradients kept): " + _LOW_MEMORY,
    "adalomo": "AdaLomo fuses the update into backward (no whole gradients kept): " + _LOW_MEMORY,
    "grokadamw": "GrokAdamW keeps extra gradient EMAs: not modelled",
    "schedule_free_radam": "schedule-free RAdam keeps its own states (z, v): not modelled",
    "schedule_free_adamw": "schedule-free AdamW keeps its own states (z, v): not modelled",
    "schedule_free_sgd": "schedule-free SGD keeps its own state (z): not modelled",
    "apollo_adamw": "APOLLO keeps low-rank scaled states: not modelled",
    "apollo_adamw_layerwise": "layer-wise APOLLO: not modelled",
    "stable_adamw": "optimi StableAdamW: not modelled",
}
"""Every other `OptimizerNames` value of transformers 5.24, with the reason it is not billed."""

ALL_NAMES = tuple(BILLED) + tuple(NOT_BILLED)

FUSED_DEFAULT_SINCE = {"transformers": "4.54", "torch": "2.8"}
"""transformers' default `optim` is `adamw_torch_fused` when torch ≥ 2.8 (huggingface/transformers#37358,
merged 2025-07, first released in 4.54; `default_optim` in transformers/training_args.py), `adamw_torch`
before."""


def default_optimizer(stack: Stack) -> str | None:
    """memdoc's optimizer for a config without `optim`, from the stack: adamw-foreach where the stack's
    transformers or torch predates the fused default; None (memdoc's own default, adamw-fused) otherwise."""
    for package, since in FUSED_DEFAULT_SINCE.items():
        if stack.version(package) is not None and not stack.at_least(package, since):
            return "adamw-foreach"
    return None
