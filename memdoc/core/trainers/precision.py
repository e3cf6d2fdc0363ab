"""A trainer config's precision: the dtype the weights are loaded in (`dtype`/`torch_dtype`, TRL's
ModelConfig; default "float32", trl/trainer/model_config.py) and the autocast flags `bf16`/`fp16`
(TrainingArguments; TRL defaults `bf16` to `not fp16`, trl/trainer/base_config.py).

The inverse of `memdoc.core.trainers.base.load_dtype` + `trainer_amp_flags`:

* full fine-tune: loaded 16-bit + the same autocast (or none) = pure bf16/fp16; loaded float32 +
  autocast = amp-bf16/amp-fp16; float32 without autocast = fp32;
* LoRA/QLoRA: a frozen 16-bit base + autocast runs as memdoc's amp-* (adapters fp32, their matmuls
  autocast: `emit.base.precision_note`); a 16-bit base without autocast = pure bf16/fp16.

That last step, from the weights' dtype and the autocast to memdoc's precision, is the same for every
trainer: `trained_precision`. How a trainer's flags give the weights' dtype differs, and stays in its
reader (Axolotl's `bf16: auto` and `bfloat16`, LLaMA-Factory's fp32 upcast of trainable weights).
"""

from __future__ import annotations

from memdoc.core.trainers.hf.keys import KEYS as HF
from memdoc.core.trainers.reading import ConfigReading, KeyRead, SourceDoc
from memdoc.core.trainers.trl.keys import KEYS as TRL
from memdoc.core.trainers.values import fail, get_bool, get_choice

DTYPES = ("auto", "bfloat16", "float16", "float32", "bf16", "fp16", "fp32", "half", "float")
_SHORT = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "float": "float32"}
_BITS16 = {"bfloat16": "bf16", "float16": "fp16"}


def read_precision(doc: SourceDoc, reading: ConfigReading, *, trl: bool) -> None:
    """Set `precision` from the load dtype and the autocast flags (see the module docstring)."""
    bf16, fp16 = get_bool(doc, HF["bf16"]), get_bool(doc, HF["fp16"])
    if bf16 and fp16:
        raise fail(doc, "fp16", "bf16 and fp16 are both true; a run autocasts to one of them")
    if trl and bf16 is None:
        bf16 = not fp16  # trl/trainer/base_config.py __post_init__
    amp = "bf16" if bf16 else "fp16" if fp16 else None
    amp_key = "bf16" if bf16 else "fp16"
    dtype_key = next(
        (k for k in (TRL["precision"], *TRL.row("precision").read_also) if doc.data.get(k) is not None), None
    )
    load = get_choice(doc, dtype_key, DTYPES) if dtype_key else ("float32" if trl else None)
    load = _SHORT.get(load, load)
    where = dtype_key or amp_key
    if load is None:
        if amp:
            reading.skip(
                doc,
                amp_key,
                f"{amp_key}: true turns on {amp} autocast; the weights' dtype is your script's "
                "from_pretrained(dtype=…), "
                f"which TrainingArguments does not say: pass --precision {amp} (loaded in 16 bit) or "
                f"amp-{amp} (float32)",
            )
        return
    if load == "auto":
        reading.skip(doc, dtype_key, "auto: the checkpoint's dtype, which memdoc takes as bf16 (--precision to say)")
        load = "bfloat16"
    precision = _precision(doc, reading, load, amp, where)
    if precision:
        reading.set(doc, where if dtype_key else "dtype (default)", "precision", precision)
        if amp and dtype_key:
            reading.read.append(KeyRead(doc.path, amp_key, "precision"))


def trained_precision(weights: str, amp: str | None, *, peft: bool) -> str:
    """memdoc's precision for trainable-or-base weights stored in `weights` ("fp32", "bf16", "fp16") and run
    under `amp` autocast ("bf16", "fp16" or None): fp32 weights are amp-{amp} (fp32 master weights), or
    fp32 without autocast; 16-bit weights without autocast are pure bf16/fp16; a LoRA/QLoRA base (`peft`:
    frozen 16-bit, adapters fp32) under autocast is amp-{weights}; a full fine-tune of 16-bit weights under
    autocast trains them as they are (pure, no fp32 master copy). The inverse of
    `memdoc.core.trainers.base.load_dtype` + `trainer_amp_flags`."""
    if weights == "fp32":
        return f"amp-{amp}" if amp else "fp32"
    if amp is None or not peft:
        return weights
    return f"amp-{weights}"


def _precision(doc: SourceDoc, reading: ConfigReading, load: str, amp: str | None, where: str) -> str | None:
    peft = reading.plan.get("method") in ("lora", "qlora")
    if load == "float32":
        if peft and amp:
            reading.skip(
                doc,
                where,
                "float32: the frozen base is loaded in fp32 (TRL's default dtype); memdoc bills a LoRA base in the "
                f"compute dtype ({amp}): set dtype: {'bfloat16' if amp == 'bf16' else 'float16'} to match the bill",
            )
        return trained_precision("fp32", amp, peft=peft)
    bits = _BITS16[load]
    if amp is not None and amp != bits:
        raise fail(doc, where, f"weights loaded in {load} with {amp} autocast: load in {amp} or float32")
    if amp == "fp16" and not peft:
        raise fail(
            doc,
            where,
            "float16 weights with fp16: true: the HF Trainer's loss scaler refuses fp16 gradients; load in float32 "
            "(amp-fp16) or turn fp16 off (pure fp16)",
        )
    return trained_precision(bits, amp, peft=peft)
