"""Read a TRL (`trl sft --config`) or HF `TrainingArguments` YAML/JSON: the inverse of
`memdoc.core.trainers.trl.write` / `memdoc.core.trainers.hf.write` (+ `emit.common.training_arguments`).

Keys and defaults come from the installed trainers (TRL 1.16, transformers 5.24):

* `trl/trainer/model_config.py` (`ModelConfig`, the trl CLI's model keys): `model_name_or_path`, `dtype`
  (default "float32"), `attn_implementation`, `use_peft`, `lora_r` (16), `lora_alpha` (32),
  `lora_dropout` (0.05), `lora_target_modules` (None: peft's default for the model), `load_in_4bit`,
  `load_in_8bit`, `bnb_4bit_quant_type`, `use_bnb_nested_quant` (False);
* `trl/trainer/sft_config.py` (`SFTConfig`): `max_length` (1024), `packing`, `padding_free`;
  `trl/trainer/base_config.py`: `gradient_checkpointing` defaults to True and `bf16` to `not fp16`;
* `transformers/training_args.py` (`TrainingArguments`): `per_device_train_batch_size` (8),
  `gradient_accumulation_steps` (1), `optim` (`OptimizerNames`; default fused AdamW on torch ≥ 2.8),
  `bf16`/`fp16` (autocast), `gradient_checkpointing`/`activation_checkpointing` (+ `_kwargs`),
  `use_liger_kernel`/`liger_kernel_config`, `deepspeed` (a path or a dict), `fsdp`/`fsdp_config`;
  the whole run's keys: `per_device_eval_batch_size` (8), `eval_accumulation_steps` (None),
  `prediction_loss_only` (False), `save_only_model` (False), `eval_strategy` ("no").

A document with any `ModelConfig`/`SFTConfig` key is read with TRL's defaults ("trl"), otherwise with
TrainingArguments' ("hf"): TrainingArguments cannot say the model, its load dtype, LoRA or the length.
The post-training task and its keys (DPOConfig, KTOConfig, RewardConfig, GRPOConfig, RLOOConfig): `trl_post`;
GRPO/RLOO have no `max_length` (the plan's `seq_len` is their prompt length, TRL 1.16 has no key for it).
"""

from __future__ import annotations

from memdoc.core.model.stack import Stack, trl_fused_lm_head
from memdoc.core.trainers.hf.keys import DETECTING as HF_KEYS
from memdoc.core.trainers.hf.keys import KEYS as HF
from memdoc.core.trainers.hf.read import (
    read_batch,
    read_checkpointing,
    read_distributed,
    read_liger,
    read_optim,
    read_run,
    set_default,
)
from memdoc.core.trainers.precision import read_precision
from memdoc.core.trainers.reading import ConfigReading, KeyRead, SourceDoc
from memdoc.core.trainers.trl.defaults import trl_sft_defaults
from memdoc.core.trainers.trl.keys import DETECTING as TRL_KEYS
from memdoc.core.trainers.trl.keys import KEYS
from memdoc.core.trainers.trl.post_read import read_trl_post
from memdoc.core.trainers.values import (
    fail,
    get_bool,
    get_choice,
    get_float,
    get_int,
    get_mapping,
    get_str,
)
from memdoc.errors import quoted

TRL_LORA_DEFAULTS = {KEYS[n]: KEYS.row(n).default for n in ("lora_rank", "lora_alpha", "lora_dropout")}
"""ModelConfig's LoRA defaults (trl/trainer/model_config.py)."""
TRL_MAX_LENGTH = KEYS.row("seq_len").default
"""SFTConfig.max_length's default (trl/trainer/sft_config.py)."""

ATTENTION = KEYS.row("attention").reading()
"""attn_implementation -> memdoc's kernel (`keys.FLASH`: flash attention saves O(s) state, as sdpa)."""


def is_trainer_args(data: dict) -> bool:
    """Does a document look like TRL's or TrainingArguments' keys?"""
    return bool((TRL_KEYS | HF_KEYS) & set(data))


def is_trl(data: dict) -> bool:
    return bool(TRL_KEYS & set(data))


def read_trainer_args(doc: SourceDoc, stack: Stack) -> ConfigReading:
    """A TRL or HF TrainingArguments document -> what it says about the plan (see the module docstring)."""
    reading = ConfigReading(formats=["trainer-args"])
    trl = is_trl(doc.data)
    model = get_str(doc, KEYS["model"])
    if model:
        reading.model = model
        reading.read.append(KeyRead(doc.path, KEYS["model"], "model"))
    read_batch(doc, reading)
    _method(doc, reading, trl)
    read_precision(doc, reading, trl=trl)
    read_optim(doc, reading, stack)
    task = read_trl_post(doc, reading) if trl else None
    _length(doc, reading, trl and task not in ("grpo", "rloo"))
    read_checkpointing(doc, reading, trl)
    if trl and trl_fused_lm_head(stack):
        _trl_loss(doc, reading, stack)
    else:
        read_liger(doc, reading)
    _attention(doc, reading)
    read_distributed(doc, reading, stack)
    read_run(doc, reading)
    return reading


def _method(doc: SourceDoc, reading: ConfigReading, trl: bool) -> None:
    """use_peft / load_in_4bit / load_in_8bit and the LoRA keys (ModelConfig; trl/scripts/sft.py passes
    `get_peft_config(model_args)` and `get_quantization_config(model_args)` to SFTTrainer)."""
    peft = get_bool(doc, KEYS["method"])
    four = get_bool(doc, KEYS["load_in_4bit"])
    eight = get_bool(doc, KEYS["load_in_8bit"])
    if four and eight:
        raise fail(doc, KEYS["load_in_4bit"], "load_in_4bit and load_in_8bit are both true; pick one")
    if (four or eight) and not peft:
        key = KEYS["load_in_4bit"] if four else KEYS["load_in_8bit"]
        raise fail(doc, key, f"{key} needs use_peft: true (a quantised base trains only through adapters)")
    if peft is not None:
        reading.set(doc, KEYS["method"], "method", "qlora" if four else "lora" if peft else "full")
    if four:
        reading.set(doc, KEYS["load_in_4bit"], "method", "qlora")
        if get_choice(doc, KEYS["quant_type"], ("nf4", "fp4")) == "fp4":
            reading.skip(doc, KEYS["quant_type"], "fp4: memdoc bills NF4 (the same 4 bits per weight)")
        if not get_bool(doc, KEYS["nested_quant"]):
            reading.skip(
                doc,
                KEYS["nested_quant"],
                "false (TRL's default): memdoc bills double-quantised constants; without them ~0.37 bit per "
                "weight more (fp32 absmax per 64 weights)",
            )
    if eight:
        reading.skip(
            doc, KEYS["load_in_8bit"], "an 8-bit (LLM.int8) base: memdoc bills a 16-bit (lora) or 4-bit (qlora) base"
        )
    if peft:
        _lora(doc, reading, trl)


def _lora(doc: SourceDoc, reading: ConfigReading, trl: bool) -> None:
    for key, plan_field in ((KEYS["lora_rank"], "lora_rank"), (KEYS["lora_alpha"], "lora_alpha")):
        value = get_int(doc, key)
        if value is not None:
            reading.set(doc, key, plan_field, value)
        elif trl:
            set_default(doc, reading, key, plan_field, TRL_LORA_DEFAULTS[key])
    dropout = get_float(doc, KEYS["lora_dropout"])
    if dropout is not None and not 0 <= dropout < 1:
        raise fail(doc, KEYS["lora_dropout"], f"must be a probability in [0, 1), got {dropout!r}")
    if dropout is not None:
        reading.set(doc, KEYS["lora_dropout"], "lora_dropout", dropout)
    elif trl:
        set_default(doc, reading, KEYS["lora_dropout"], "lora_dropout", TRL_LORA_DEFAULTS[KEYS["lora_dropout"]])
    targets = doc.data.get(KEYS["lora_targets"])
    if isinstance(targets, str) and targets.strip():
        reading.set(doc, KEYS["lora_targets"], "lora_targets", [t.strip() for t in targets.split(",")])
    elif isinstance(targets, list) and targets and all(isinstance(t, str) and t for t in targets):
        reading.set(doc, KEYS["lora_targets"], "lora_targets", list(targets))
    elif targets is not None:
        raise fail(doc, KEYS["lora_targets"], f"must be module names or 'all-linear', got {quoted(targets)}")
    for key, reason in (
        ("use_dora", "DoRA keeps a magnitude vector and the adapted weight's norm per adapted module: not modelled"),
        ("lora_modules_to_save", "full trainable copies of these modules (+ their gradients and states): not billed"),
        ("lora_target_parameters", "adapters on raw parameters (e.g. MoE experts): not billed"),
    ):
        if doc.data.get(key):
            reading.skip(doc, key, reason)


def _length(doc: SourceDoc, reading: ConfigReading, trl: bool) -> None:
    """`max_length` (SFTConfig; `max_seq_length` before TRL 0.20): sequences are truncated (or packed) to it;
    memdoc bills every sequence at that length (packing fills it, padding pads a batch to its longest)."""
    key = next((k for k in (KEYS["seq_len"], "max_seq_length") if doc.data.get(k) is not None), None)
    if key:
        reading.set(doc, key, "seq_len", get_int(doc, key))
    elif trl:
        set_default(doc, reading, KEYS["seq_len"], "seq_len", TRL_MAX_LENGTH)
    # TRL: "bfd" packing turns padding_free on (`SFTTrainer.__init__`); either packs the rows without padding
    packed = next((k for k in (KEYS["packing"], KEYS["padding_free"]) if get_bool(doc, k)), None)
    if packed:
        reading.set(doc, packed, "packing", True)


def _trl_loss(doc: SourceDoc, reading: ConfigReading, stack: Stack) -> None:
    """The loss path of a TRL file on a stack whose TRL has the fused LM head (`trl_sft_defaults(stack).loss`,
    memdoc's trl-fused), whatever the file says about Liger.

    trl/trainer/sft_trainer.py (TRL 1.16): `__init__` calls `add_fused_lm_head` on every model and, under
    `use_liger_kernel`, sets `liger_kernel_config["fused_linear_cross_entropy"] = False` (Liger's layer kernels
    only), refusing a config that asks for the fused cross-entropy; `compute_loss` runs
    `model(**inputs, fused_lm_head=True)` for every `loss_type` ("nll", the default, and "dft"; TRL's DPO and
    GRPO trainers compute theirs through the same head)."""
    key = KEYS["loss"] if doc.data.get(KEYS["loss"]) is not None else "loss_type (default)"  # DPOConfig: a list
    reading.set(doc, key, "loss", trl_sft_defaults(stack).loss.value)
    if not get_bool(doc, HF["loss"]):
        return
    config = get_mapping(doc, HF["liger_kernel_config"]) or {}
    if config.get("fused_linear_cross_entropy"):
        raise fail(
            doc,
            "liger_kernel_config",
            "fused_linear_cross_entropy: true is refused by TRL's SFTTrainer, which computes the loss through its "
            "own fused LM head (use_liger_kernel applies Liger's layer kernels only)",
        )
    reading.skip(
        doc,
        HF["loss"],
        "under TRL's fused LM head only Liger's layer kernels (RMSNorm, RoPE, SwiGLU) apply: not billed",
    )


def _attention(doc: SourceDoc, reading: ConfigReading) -> None:
    name = get_str(doc, KEYS["attention"])
    if name is None:
        return
    if name in ATTENTION:
        reading.set(doc, KEYS["attention"], "attention", ATTENTION[name])
    else:
        reading.skip(doc, KEYS["attention"], f"{name}: memdoc bills sdpa/flash (O(s) state) or eager (O(s²))")
