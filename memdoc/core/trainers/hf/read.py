"""The TrainingArguments part of a trainer-args document (transformers 5.24 `training_args.py`): batch, accumulation,
optimizer, checkpointing, Liger, DeepSpeed/FSDP and the evaluation's and save's keys. TRL's configs subclass
TrainingArguments, so the TRL reader (`memdoc.core.trainers.trl.read.read_trainer_args`) reads an HF file too,
through these."""

from __future__ import annotations

from memdoc.core.model.plan import Optimizer
from memdoc.core.model.stack import Stack
from memdoc.core.trainers.deepspeed.read import read_deepspeed_key
from memdoc.core.trainers.fsdp import fsdp_words, read_fsdp
from memdoc.core.trainers.hf.defaults import default_optimizer
from memdoc.core.trainers.hf.keys import CHECKPOINTING_KWARGS as CKPT
from memdoc.core.trainers.hf.keys import KEYS
from memdoc.core.trainers.hf.keys import LIGER_KEYS as LIGER
from memdoc.core.trainers.hf.optimizers import read_optimizer
from memdoc.core.trainers.reading import ConfigReading, SourceDoc
from memdoc.core.trainers.values import get_bool, get_int, get_mapping, get_str

TRAINER_DEFAULTS = {KEYS[n]: KEYS.row(n).default for n in ("micro_batch", "grad_accum")}
"""TrainingArguments' defaults that differ from memdoc's plan defaults or that a run always has."""


def read_run(doc: SourceDoc, reading: ConfigReading) -> None:
    """The evaluation's and the save's keys (`core/billing/run_phases.py`): the evaluation batch, how many steps
    of logits stay on the GPU, whether only the loss is kept, whether checkpoints carry the optimizer."""
    for key, plan_field, get in (
        (KEYS["eval_batch"], "eval_batch", get_int),
        (KEYS["eval_accumulation_steps"], "eval_accumulation_steps", get_int),
        (KEYS["save_only_model"], "save_only_model", get_bool),
    ):
        value = get(doc, key)
        if value is not None:
            reading.set(doc, key, plan_field, value)
    if get_bool(doc, KEYS["eval_keeps_logits"]):
        reading.set(doc, KEYS["eval_keeps_logits"], "eval_keeps_logits", False)
    strategy = get_str(doc, KEYS["eval_samples"])
    if strategy is not None and strategy != "no":
        reading.skip(
            doc,
            KEYS["eval_samples"],
            "the evaluation set's size is not in the config: give --eval-samples (and --eval-keeps-logits when "
            "a compute_metrics keeps the logits) to bill the evaluation",
        )


def set_default(doc: SourceDoc, reading: ConfigReading, key: str, plan_field: str, value) -> None:
    """A key the document leaves out, at the trainer's default (listed as `key (default)`)."""
    reading.set(doc, f"{key} (default)", plan_field, value)


def read_batch(doc: SourceDoc, reading: ConfigReading) -> None:
    for key, plan_field in (
        (KEYS["micro_batch"], "micro_batch"),
        (KEYS["grad_accum"], "grad_accum"),
    ):
        value = get_int(doc, key)
        if value is not None:
            reading.set(doc, key, plan_field, value)
        else:
            set_default(doc, reading, key, plan_field, TRAINER_DEFAULTS[key])


def read_optim(doc: SourceDoc, reading: ConfigReading, stack: Stack) -> None:
    """`optim`: every `OptimizerNames` value (memdoc.core.trainers.hf.optimizers; a name transformers does not
    know is an error, as in its parser); absent: the stack's default (`defaults.default_optimizer`), left to
    the plan's own default when that is fused AdamW."""
    if doc.data.get(KEYS["optimizer"]) is not None:
        read_optimizer(reading, doc, KEYS["optimizer"], strict=True)
        return
    default = default_optimizer(stack)
    if default is not Optimizer.ADAMW_FUSED:
        set_default(doc, reading, KEYS["optimizer"], "optimizer", default.value)


def read_checkpointing(doc: SourceDoc, reading: ConfigReading, trl: bool) -> None:
    """`activation_checkpointing` (transformers ≥ 5.x) or its alias `gradient_checkpointing`; TRL's default
    is on (trl/trainer/base_config.py). Kwargs: `every_n_layers` -> checkpoint_every, `offload` ->
    activation_offload."""
    if doc.data.get("activation_offloading") is True:  # TRL's SFTConfig key, not transformers' offload kwarg
        reading.skip(
            doc,
            "activation_offloading",
            "TRL's activation offloading (torchtune's: every activation but the last linear's to pinned host memory, "
            "trl/models/activation_offloading.py): not billed (--activation-offload bills transformers' own)",
        )
    key = next((k for k in (KEYS["activation_checkpointing"], KEYS["checkpointing"]) if k in doc.data), None)
    on = get_bool(doc, key) if key else None
    if on is None:
        if trl:
            set_default(doc, reading, KEYS["checkpointing"], "checkpointing", "full")
            on, key = True, KEYS["checkpointing"]
    else:
        reading.set(doc, key, "checkpointing", "full" if on else "none")
    if not on:
        return
    kw_key = key + "_kwargs"
    kwargs = get_mapping(doc, kw_key) or {}
    every = get_int(doc, CKPT["checkpoint_every"], kwargs, where=f"{kw_key}.every_n_layers")
    if every is not None:
        reading.set(doc, f"{kw_key}.every_n_layers", "checkpoint_every", every)
    offload = get_bool(doc, CKPT["activation_offload"], kwargs, where=f"{kw_key}.offload")
    if offload is not None:  # transformers 5.24 pops it in `Trainer.__init__` (`activation_checkpointing_enable`)
        reading.set(doc, f"{kw_key}.offload", "activation_offload", offload)


def read_liger(doc: SourceDoc, reading: ConfigReading) -> None:
    """`use_liger_kernel` (+ `liger_kernel_config`): every kernel -> loss fused; the fused cross-entropy
    alone -> fused-ce (memdoc.core.trainers.base.LIGER_CE_ONLY_CONFIG); no fused cross-entropy -> hf."""
    if not get_bool(doc, KEYS["loss"]):
        return
    config = get_mapping(doc, KEYS["liger_kernel_config"]) or {}
    flce = config.get(LIGER["fused_linear_cross_entropy"], True) is not False
    others = any(config.get(k, True) is not False for k in (LIGER["rope"], LIGER["rms_norm"], LIGER["swiglu"]))
    if flce:
        reading.set(doc, KEYS["loss"], "loss", "fused" if others else "fused-ce")
    else:
        reading.set(doc, KEYS["loss"], "loss", "hf")
        if others:
            reading.skip(
                doc,
                KEYS["liger_kernel_config"],
                "Liger's RMSNorm/RoPE/SwiGLU without its fused cross-entropy: not billed",
            )


def read_distributed(doc: SourceDoc, reading: ConfigReading, stack: Stack) -> None:
    """`deepspeed`: a path (read next, relative to this file) or an inline dict (`deepspeed.read_deepspeed_key`);
    `fsdp`/`fsdp_config` (`fsdp.read_fsdp`)."""
    read_deepspeed_key(reading, doc, stack)
    _fsdp(doc, reading)


def _fsdp(doc: SourceDoc, reading: ConfigReading) -> None:
    """`fsdp`: true, or the legacy option string ("full_shard offload", "shard_grad_op", "hybrid_shard", …;
    transformers' `FSDPOption`) with `fsdp_config` (`reshard_after_forward`, `cpu_offload`,
    `activation_checkpointing`; TrainingArguments._process_fsdp_args). `fsdp_config` as a path to a JSON is
    not read."""
    words = fsdp_words(doc)
    if not words:
        return
    path = isinstance(doc.data.get(KEYS["fsdp_config"]), str)
    config = {} if path else get_mapping(doc, KEYS["fsdp_config"]) or {}
    read_fsdp(reading, doc, KEYS["fsdp"], words, config)
    if path:
        reading.skip(doc, KEYS["fsdp_config"], "a path to an FSDP JSON: not read (memdoc reads accelerate configs)")
