"""transformers' `optim` names (`OptimizerNames`, transformers/training_args.py, 5.24) -> memdoc's optimizer,
or the reason memdoc does not bill it: the one optimizer table of every reader. TRL and HF files (`optim`),
LLaMA-Factory (`optim`, handed to `Seq2SeqTrainingArguments`) and Axolotl (`optimizer`, handed to
`TrainingArguments` unless it is one of Axolotl's own) all take these names. `BILLED` is the inverse of
the `optim` row of `memdoc.core.trainers.hf.keys`.

Which class each name builds: transformers/trainer_optimizer.py (`_OPTIMIZER_HANDLERS`, called by
trainer.py `get_optimizer_cls_and_kwargs`). The bitsandbytes names all go through
`_get_bitsandbytes_optimizer`: `optim_bits = 8 if "8bit" in name else 32`, `is_paged = "paged" in name`
(so `rmsprop_bnb` is 32-bit). State sizes from bitsandbytes/optim/optimizer.py (bitsandbytes main,
2026): `Optimizer2State.init_state` (AdamW) and `Optimizer1State.init_state` (Lion, RMSprop) allocate
`state1` (and `state2`) as `torch.float32` for `optim_bits=32`, whatever the weights' dtype, and update
each tensor with one fused kernel (`F.optimizer_update_32bit`, no temporaries); `get_state_buffer` puts
the states of a paged optimizer (tensors ≥ 1e5 elements) in CUDA unified memory (`F.get_paged`,
cudaMallocManaged), which the driver moves to the host only under memory pressure.
"""

from __future__ import annotations

from dataclasses import fields

from memdoc.core.model.plan import TrainingPlan
from memdoc.core.trainers.hf.keys import KEYS
from memdoc.core.trainers.reading import ConfigReading, SourceDoc
from memdoc.core.trainers.values import fail, get_str
from memdoc.errors import did_you_mean, quoted

BILLED = KEYS.row("optimizer").reading()
"""Names memdoc bills, and as what."""

_PAGED = "paged states leave the GPU only under memory pressure"
_FP32_STATES = "they stay fp32 under pure bf16/fp16 weights, twice the bill's 16-bit states"
_RMSPROP_BNB = "one fp32 state (the squared-gradient average), as SGD with momentum keeps one; " + _FP32_STATES

BILLED_AS = {
    "paged_adamw_32bit": (
        "adamw-fused",
        "the same fp32 exp_avg and exp_avg_sq (8 bytes per trainable weight), one fused kernel; "
        + _PAGED
        + "; "
        + _FP32_STATES,
    ),
    "paged_lion_32bit": ("lion", "lion_32bit's one fp32 state; " + _PAGED),
    "rmsprop_bnb": ("sgd", _RMSPROP_BNB),
    "rmsprop_bnb_32bit": ("sgd", _RMSPROP_BNB),
}
"""Names memdoc does not bill exactly but whose states it knows: name -> (memdoc optimizer, why), recorded
as a not-billed note saying what the bill uses."""

_EIGHT_BIT = "8-bit states of another optimizer; memdoc bills 8-bit states for AdamW only (adamw_bnb_8bit)"
_NOT_CUDA = "runs on another accelerator (XLA/NPU); memdoc bills CUDA GPUs"
_LOW_MEMORY = "a low-memory optimizer whose states memdoc does not model"
_GALORE = "GaLore projects gradients to low rank (states of rank r): not modelled"
_GALORE_LAYERWISE = "layer-wise GaLore (one layer's gradients at a time): not modelled"

NOT_BILLED = {
    "adamw_torch_xla": _NOT_CUDA,
    "adamw_torch_npu_fused": _NOT_CUDA,
    "adamw_anyprecision": "torchdistx AnyPrecisionAdamW (states in a chosen dtype, Kahan buffer): not modelled",
    "adamw_torch_4bit": "torchao 4-bit AdamW states: not modelled (memdoc bills bitsandbytes 8-bit states)",
    "adamw_torch_8bit": "torchao 8-bit AdamW states: not modelled (memdoc bills bitsandbytes 8-bit states)",
    "ademamix": "bitsandbytes AdEMAMix keeps 3 fp32 states (two first moments and a second): not modelled",
    "adagrad": "Adagrad keeps 1 state (the sum of squares) and a foreach sqrt temporary: not modelled",
    "ademamix_8bit": _EIGHT_BIT,
    "lion_8bit": _EIGHT_BIT,
    "paged_ademamix_32bit": "paged AdEMAMix (3 fp32 states): not modelled",
    "paged_ademamix_8bit": _EIGHT_BIT,
    "paged_lion_8bit": _EIGHT_BIT,
    "rmsprop": "torch RMSprop keeps 1 state (+ momentum, + the mean gradient when centered) and foreach "
    "temporaries: not modelled",
    "rmsprop_bnb_8bit": _EIGHT_BIT,
    "galore_adamw": _GALORE,
    "galore_adamw_8bit": _GALORE,
    "galore_adafactor": _GALORE,
    "galore_adamw_layerwise": _GALORE_LAYERWISE,
    "galore_adamw_8bit_layerwise": _GALORE_LAYERWISE,
    "galore_adafactor_layerwise": _GALORE_LAYERWISE,
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

ALL_NAMES = tuple(BILLED) + tuple(BILLED_AS) + tuple(NOT_BILLED)

FALLBACK = next(f.default for f in fields(TrainingPlan) if f.name == "optimizer").value
"""What the bill uses for an optimizer it does not bill: `TrainingPlan`'s default (adamw-fused)."""


def _fallback(what: str) -> str:
    return f"{what}; billed as {FALLBACK} instead (memdoc's default; --optimizer to choose another)"


def sgd_momentum(doc: SourceDoc, args_key: str = KEYS["optim_args"]) -> bool:
    """Does `optim_args` give SGD a momentum (`momentum=0.9` text, or a mapping)? transformers' `sgd` has
    none otherwise (trainer_optimizer.py `_get_sgd`; torch.optim.SGD's default momentum is 0: no state)."""
    args = doc.data.get(args_key)
    if isinstance(args, dict):
        pairs = {str(k): str(v) for k, v in args.items()}
    elif isinstance(args, str):
        pairs = dict(p.split("=", 1) for p in args.replace(" ", "").split(",") if "=" in p)
    else:
        return False
    try:
        return float(pairs.get("momentum", "0")) > 0
    except ValueError:
        return False


def read_optimizer(
    reading: ConfigReading, doc: SourceDoc, key: str, default: str | None = None, *, strict: bool = False
) -> None:
    """The optimizer `key` names (a transformers `optim` name) -> `optimizer`: billed, billed as a memdoc
    optimizer with the same states (with a note), or not billed (with the reason and the fallback).

    Absent: `default` (the trainer's own default name, set without a key read) or nothing. A name
    transformers does not know is an error when `strict` (TrainingArguments' parser refuses it), else
    not billed (Axolotl's own optimizers, axolotl/utils/schemas/enums.py `CustomSupportedOptimizers`)."""
    name = get_str(doc, key)
    if name is None:
        if default is not None:
            reading.plan["optimizer"] = BILLED[default]
        return
    name = name.strip().lower()
    if name in BILLED:
        reading.set(doc, key, "optimizer", BILLED[name])
        if name == "sgd" and not sgd_momentum(doc):
            reading.skip(
                doc, key, "sgd without momentum keeps no state; billed as SGD with momentum (one state per weight)"
            )
    elif name in BILLED_AS:
        billed, why = BILLED_AS[name]
        reading.set(doc, key, "optimizer", billed)
        reading.skip(doc, key, f"{name} is billed as {billed}: {why}")
    elif name in NOT_BILLED:
        reading.skip(doc, key, _fallback(f"{name}: {NOT_BILLED[name]}"))
    elif strict:
        raise fail(doc, key, f"{quoted(name)} is not an optimizer transformers knows{did_you_mean(name, ALL_NAMES)}")
    else:
        reading.skip(doc, key, _fallback(f"{name}: not a transformers optimizer name, so not one memdoc bills"))
