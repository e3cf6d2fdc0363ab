"""A LLaMA-Factory YAML (`llamafactory-cli train config.yaml`) -> the plan it runs: the inverse of
`memdoc.core.trainers.llamafactory.write`.

Keys, types and defaults come from llamafactory/hparams/: `model_args.py` (model_name_or_path,
quantization_bit/method/type, double_quantization, flash_attn (default auto),
disable_gradient_checkpointing (default false: LLaMA-Factory checkpoints), use_reentrant_gc,
enable_liger_kernel), `finetuning_args.py` (stage, finetuning_type (default lora), lora_rank (8),
lora_alpha (2 × rank), lora_dropout (0.0), lora_target (all), pure_bf16), `data_args.py` (cutoff_len
(2048), packing, neat_packing) and `training_args.py` (transformers' TrainingArguments: bf16, fp16, optim,
per_device_train_batch_size (8), gradient_accumulation_steps (1), deepspeed, fsdp, fsdp_config). How they
combine: llamafactory/hparams/parser.py (`get_train_args`) and llamafactory/model/adapter.py (trainable
parameters upcast to fp32 unless pure_bf16).
"""

from __future__ import annotations

from memdoc.core.model.plan import ALL_LINEAR
from memdoc.core.model.stack import Stack
from memdoc.core.trainers.deepspeed.read import read_deepspeed_key
from memdoc.core.trainers.fsdp import fsdp_words, read_fsdp
from memdoc.core.trainers.hf.defaults import hf_default_optim
from memdoc.core.trainers.hf.keys import KEYS as HF
from memdoc.core.trainers.hf.optimizers import read_optimizer
from memdoc.core.trainers.llamafactory.keys import DETECTING, KEYS
from memdoc.core.trainers.llamafactory.post_read import read_llamafactory_rl
from memdoc.core.trainers.precision import trained_precision
from memdoc.core.trainers.reading import ConfigReading, KeyRead, SourceDoc
from memdoc.core.trainers.values import get_bool, get_float, get_int, get_mapping, get_str, skip_set_keys
from memdoc.errors import quoted

DEFAULTS = {f: KEYS.row(f).default for f in ("lora_rank", "lora_dropout", "seq_len")} | {
    f: HF.row(f).default for f in ("micro_batch", "grad_accum")
}
"""finetuning_args.py lora_rank 8, lora_dropout 0.0; data_args.py cutoff_len 2048; transformers'
TrainingArguments per_device_train_batch_size 8, gradient_accumulation_steps 1."""

NOT_BILLED = {
    "additional_target": "fully trained extra modules (weights, gradients, optimizer states) are not billed",
    "use_dora": "DoRA's magnitude vectors and its extra weight-norm activations are not billed",
    "pissa_init": "PiSSA's initialisation (an SVD of each adapted weight) is not billed",
    "use_llama_pro": "LLaMA Pro's expanded blocks are not billed",
    "use_galore": "GaLore's projected optimizer states are not billed",
    "use_apollo": "APOLLO's optimizer states are not billed",
    "use_badam": "BAdam's block-wise optimizer is not billed",
    "use_adam_mini": "Adam-mini's optimizer states are not billed",
    "use_muon": "Muon's optimizer states are not billed",
    "use_unsloth": "Unsloth's kernels are not billed",
    "use_unsloth_gc": "Unsloth's checkpointing (layer inputs offloaded to the CPU) is billed on the GPU",
    "shift_attn": "LongLoRA's shifted short attention is not billed",
    "upcast_layernorm": "fp32 copies of the norm weights are not billed",
    "upcast_lmhead_output": "the LM head's fp32 output is not billed beyond transformers' own fp32 loss upcast",
    "fp8": "FP8 training is not billed",
    "use_kt": "KTransformers' CPU-offloaded experts are not billed",
    "use_v1_kernels": "LLaMA-Factory's v1 kernels are not billed",
    "mixture_of_depths": "mixture-of-depths is not billed",
}
"""Keys that change memory but that memdoc does not bill, each with the reason (recorded when turned on)."""


def looks_like(data: dict) -> bool:
    """`model_name_or_path` with `stage`, `finetuning_type`, `cutoff_len` or `template`
    (llamafactory/hparams/finetuning_args.py, data_args.py)."""
    return KEYS["model"] in data and bool(DETECTING & set(data))


def read_llamafactory(doc: SourceDoc, stack: Stack) -> ConfigReading:
    """What a LLaMA-Factory config says about the plan; absent keys take LLaMA-Factory's defaults, and an
    absent `optim` transformers' default for `stack` (`defaults.hf_default_optim`)."""
    reading = ConfigReading(formats=["llamafactory"])
    model = get_str(doc, KEYS["model"])
    if model is not None:
        reading.model = model
        reading.read.append(KeyRead(doc.path, KEYS["model"], "model"))
    _stage(reading, doc)
    method = _method(reading, doc)
    if method != "full":
        _lora(reading, doc)
    _precision(reading, doc, method)
    read_optimizer(reading, doc, HF["optimizer"], hf_default_optim(stack))
    _batch(reading, doc)
    _checkpointing(reading, doc)
    _attention(reading, doc)
    _packing(reading, doc)
    _loss(reading, doc)
    _sharding(reading, doc, stack)
    skip_set_keys(reading, doc, NOT_BILLED)
    return reading


def _stage(reading: ConfigReading, doc: SourceDoc) -> None:
    """`stage` (default sft): pt packs by default (parser.py: packing = stage == "pt"); rm/ppo/dpo/kto are the
    post-training tasks (`rl_keys.read_llamafactory_rl`)."""
    stage = (get_str(doc, KEYS["task"]) or "sft").strip().lower()
    if stage in ("rm", "ppo", "dpo", "kto"):
        read_llamafactory_rl(reading, doc, stage)
    elif stage == "pt" and doc.data.get(KEYS["packing"]) is None:
        reading.set(doc, KEYS["task"], "packing", True)  # parser.py: packing = stage == "pt"


def _packing(reading: ConfigReading, doc: SourceDoc) -> None:
    """`neat_packing` (packing without cross-attention; data_args.py sets `packing` with it) or `packing` ->
    packing. `packing` alone attends across the packed documents: billed with one document per row (the
    plan's `document_tokens` left unset), which is what its attention costs."""
    for key in (KEYS["neat_packing"], "packing"):
        on = get_bool(doc, key)
        if on is not None:
            reading.set(doc, key, "packing", on)
            return


def _method(reading: ConfigReading, doc: SourceDoc) -> str:
    """finetuning_type (default lora) + quantization_bit: bitsandbytes 4-bit under LoRA is memdoc's qlora
    (NF4 with double quantisation by default: model_args.py `QuantizationArguments`); quantisation needs
    LoRA or OFT (parser.py)."""
    kind = (get_str(doc, KEYS["method"]) or "lora").strip().lower()
    bits = get_int(doc, KEYS["quantization_bit"])
    if bits is not None and kind not in ("lora", "oft"):
        raise doc.error(KEYS["quantization_bit"], f"quantization needs finetuning_type lora (or oft), not {kind}")
    if kind in ("freeze", "oft"):
        reading.skip(
            doc, KEYS["method"], f"finetuning_type {kind} is not billed (memdoc bills full and lora); billed as full"
        )
        reading.plan["method"] = "full"
        return "full"
    if kind == "full":
        reading.set(doc, KEYS["method"], "method", "full")
        return "full"
    quant = (get_str(doc, KEYS["quantization_method"]) or "bnb").strip().lower()
    if bits == 4 and quant in ("bnb", "bitsandbytes"):
        _set_or_default(reading, doc, KEYS["method"], "method", "qlora")
        reading.read.append(KeyRead(doc.path, KEYS["quantization_bit"], "method"))
        if get_bool(doc, KEYS["double_quantization"]) is False:
            reading.skip(doc, KEYS["double_quantization"], "4-bit constants without double quantisation are not billed")
        return "qlora"
    _set_or_default(reading, doc, KEYS["method"], "method", "lora")
    if bits is not None:
        reading.skip(
            doc, KEYS["quantization_bit"], f"a {bits}-bit {quant} base is not billed; billed in the compute dtype"
        )
    return "lora"


def _set_or_default(reading: ConfigReading, doc: SourceDoc, key: str, plan_field: str, value) -> None:
    """Set `plan_field` from `key` when the file has it, else as the trainer's default (no key read)."""
    if doc.data.get(key) is not None:
        reading.set(doc, key, plan_field, value)
    else:
        reading.plan[plan_field] = value


def _lora(reading: ConfigReading, doc: SourceDoc) -> None:
    """lora_rank, lora_alpha (absent: 2 × rank, memdoc's own default), lora_dropout and lora_target
    (`all`, the default, is every linear; else comma-separated module names)."""
    _set_or_default(
        reading, doc, KEYS["lora_rank"], "lora_rank", get_int(doc, KEYS["lora_rank"]) or DEFAULTS[KEYS["lora_rank"]]
    )
    alpha = get_int(doc, KEYS["lora_alpha"])
    if alpha is not None:
        reading.set(doc, KEYS["lora_alpha"], "lora_alpha", alpha)
    dropout = get_float(doc, KEYS["lora_dropout"])
    _set_or_default(
        reading,
        doc,
        KEYS["lora_dropout"],
        "lora_dropout",
        DEFAULTS[KEYS["lora_dropout"]] if dropout is None else dropout,
    )
    target = get_str(doc, KEYS["lora_targets"])
    names = [t.strip() for t in (target or "all").split(",") if t.strip()]
    if not names:
        raise doc.error(KEYS["lora_targets"], f"must name modules (or all), got {quoted(target)}")
    targets = [ALL_LINEAR] if names == ["all"] else names
    _set_or_default(reading, doc, KEYS["lora_targets"], "lora_targets", targets)


def _precision(reading: ConfigReading, doc: SourceDoc, method: str) -> None:
    """bf16/fp16 (TrainingArguments: autocast) and pure_bf16 (finetuning_args.py). The weights load in the
    compute dtype (parser.py: bf16 or pure_bf16 -> bfloat16, fp16 -> float16; neither: inferred from the
    checkpoint, bf16 for today's checkpoints, model/patcher.py `infer_optim_dtype`), then adapter.py upcasts
    the trainable ones to fp32 unless pure_bf16. So a full fine-tune is amp-bf16/amp-fp16 (fp32 master
    weights), pure_bf16 is bf16, neither flag fp32; a LoRA base stays in the compute dtype (amp-bf16 or
    amp-fp16 under autocast, bf16 without it): `precision.trained_precision` of those weights."""
    bf16, fp16, pure = (get_bool(doc, k) for k in (HF["bf16"], HF["fp16"], KEYS["pure_bf16"]))
    if bf16 and fp16:
        raise doc.error(HF["fp16"], "bf16 and fp16 are both true; choose one")
    if pure and fp16:
        raise doc.error(HF["fp16"], "pure_bf16 and fp16 are both true; choose one")
    if pure:
        weights, amp = "bf16", None
    else:
        amp = "bf16" if bf16 else "fp16" if fp16 else None
        weights = "fp32" if method == "full" else amp or "bf16"  # adapter.py's upcast; else the compute dtype
    precision = trained_precision(weights, amp, peft=method != "full")
    reading.plan["precision"] = precision
    for key in (HF["bf16"], HF["fp16"], KEYS["pure_bf16"]):
        if doc.data.get(key) is not None:
            reading.set(doc, key, "precision", precision)


def _batch(reading: ConfigReading, doc: SourceDoc) -> None:
    """per_device_train_batch_size, gradient_accumulation_steps and cutoff_len (defaults in `DEFAULTS`)."""
    for key, plan_field in (
        (HF["micro_batch"], "micro_batch"),
        (HF["grad_accum"], "grad_accum"),
        (KEYS["seq_len"], "seq_len"),
    ):
        value = get_int(doc, key)
        _set_or_default(reading, doc, key, plan_field, DEFAULTS[plan_field] if value is None else value)


def _checkpointing(reading: ConfigReading, doc: SourceDoc) -> None:
    """LLaMA-Factory checkpoints unless disable_gradient_checkpointing (model/model_utils/checkpointing.py,
    reentrant unless use_reentrant_gc: false: the same saved layer inputs). TrainingArguments'
    `gradient_checkpointing` is not how LLaMA-Factory turns it on; a `false` there changes nothing."""
    off = get_bool(doc, KEYS["checkpointing"])
    get_bool(doc, KEYS["use_reentrant_gc"])
    _set_or_default(reading, doc, KEYS["checkpointing"], "checkpointing", "none" if off else "full")
    if get_bool(doc, HF["checkpointing"]) is False and not off:
        reading.skip(
            doc,
            HF["checkpointing"],
            "LLaMA-Factory checkpoints anyway (disable_gradient_checkpointing: true turns it off); billed as full",
        )


_FLASH_ATTN = KEYS.row("attention").reading()
"""`flash_attn` -> memdoc attention (`keys.FLASH_ATTN`)."""


def _attention(reading: ConfigReading, doc: SourceDoc) -> None:
    value = get_str(doc, KEYS["attention"])
    if value is not None and value.strip().lower() not in _FLASH_ATTN:
        raise doc.error(KEYS["attention"], f"{quoted(value)} is not one of: {', '.join(_FLASH_ATTN)}")
    _set_or_default(reading, doc, KEYS["attention"], "attention", _FLASH_ATTN[(value or "auto").strip().lower()])


def _loss(reading: ConfigReading, doc: SourceDoc) -> None:
    """enable_liger_kernel applies every Liger kernel the model has (transformers' `apply_liger_kernel`):
    memdoc's fused loss."""
    on = get_bool(doc, KEYS["loss"])
    _set_or_default(reading, doc, KEYS["loss"], "loss", "fused" if on else "hf")


def _sharding(reading: ConfigReading, doc: SourceDoc, stack: Stack) -> None:
    """`deepspeed:` (a JSON path, read next, or an inline mapping) or transformers' `fsdp` words with
    `fsdp_config` -> shard (`fsdp.read_fsdp`; LLaMA-Factory otherwise takes FSDP from an accelerate config at
    launch); both at once contradict."""
    config = get_mapping(doc, HF["fsdp_config"]) or {}
    words = fsdp_words(doc)
    if read_deepspeed_key(reading, doc, stack) and words:
        raise doc.error(HF["fsdp"], "deepspeed and fsdp both shard the model; keep one")
    if words:
        read_fsdp(reading, doc, "fsdp", words, config)
