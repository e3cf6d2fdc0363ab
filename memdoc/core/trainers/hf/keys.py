"""transformers' `TrainingArguments` keys (transformers 5.24, `training_args.py`): the key table every HF-Trainer-based
format shares (HF, TRL, LLaMA-Factory write them; the trainer-args and LLaMA-Factory readers read them), and the
`optim` names (`OptimizerNames`) memdoc bills, both ways."""

from __future__ import annotations

from memdoc.core.model.plan import Optimizer
from memdoc.core.trainers.table import Key, KeyTable

VERSION = "5.24.0"
"""The transformers release these keys were read from."""

OPTIM_NAMES = {
    Optimizer.ADAMW_FOREACH.value: "adamw_torch",
    Optimizer.ADAMW_FUSED.value: "adamw_torch_fused",
    Optimizer.ADAMW_8BIT.value: "adamw_bnb_8bit",
    Optimizer.PAGED_ADAMW_8BIT.value: "paged_adamw_8bit",
    Optimizer.SGD.value: "sgd",
    Optimizer.ADAFACTOR.value: "adafactor",
    Optimizer.LION.value: "lion_32bit",
}
"""memdoc optimizer → transformers `OptimizerNames` value (the `optim` key of every HF-based trainer)."""

KEYS = KeyTable(
    "transformers",
    VERSION,
    (
        Key("output_dir", "output_dir"),
        Key("micro_batch", "per_device_train_batch_size", default=8),
        Key("grad_accum", "gradient_accumulation_steps", default=1),
        Key("learning_rate", "learning_rate"),
        Key("epochs", "num_train_epochs"),
        Key("lr_scheduler", "lr_scheduler_type"),
        Key("warmup", "warmup_steps", spellings={"5.2.0": "warmup_ratio"}),
        Key("optimizer", "optim", OPTIM_NAMES, aliases={"adamw_8bit": Optimizer.ADAMW_8BIT.value}),
        Key("optimizer", "optim_args", name="optim_args"),
        Key("precision", "bf16", name="bf16"),
        Key("precision", "fp16", name="fp16"),
        Key("checkpointing", "gradient_checkpointing"),
        # from 5.23.0 `activation_checkpointing(_kwargs)`; `gradient_checkpointing(_kwargs)` are deprecated aliases
        # that warn (transformers 5.23.0 training_args.py:908-934, the warning at :1541)
        Key(
            "checkpointing",
            "activation_checkpointing",
            name="activation_checkpointing",
            spellings={"5.23.0": "gradient_checkpointing"},
        ),
        Key(
            "checkpointing",
            "activation_checkpointing_kwargs",
            name="activation_checkpointing_kwargs",
            spellings={"5.23.0": "gradient_checkpointing_kwargs"},
        ),
        Key("checkpointing", "gradient_checkpointing_kwargs", name="checkpointing_kwargs"),
        Key("loss", "use_liger_kernel"),
        Key("loss", "liger_kernel_config", name="liger_kernel_config"),
        Key("shard", "deepspeed"),
        Key("shard", "fsdp", name="fsdp"),
        Key("shard", "fsdp_config", name="fsdp_config"),
        Key("logging_steps", "logging_steps"),
        Key("save_strategy", "save_strategy"),
        Key("report_to", "report_to"),
        Key("max_steps", "max_steps"),
        Key("micro_batch", "train_sampling_strategy", name="sampling"),
        Key("eval_batch", "per_device_eval_batch_size", default=8),
        Key("eval_accumulation_steps", "eval_accumulation_steps"),
        Key("save_only_model", "save_only_model", default=False),
        Key("eval_keeps_logits", "prediction_loss_only", default=False),
        Key("eval_samples", "eval_strategy", default="no"),
    ),
)

CHECKPOINTING_KWARGS = KeyTable(
    "transformers",
    VERSION,
    (
        Key("checkpoint_every", "gradient_checkpointing_kwargs.every_n_layers"),
        Key("activation_offload", "gradient_checkpointing_kwargs.offload"),
    ),
    block="gradient_checkpointing_kwargs",
)
"""`gradient_checkpointing_kwargs` (an alias of `activation_checkpointing_kwargs`): transformers 5.24's
`Trainer.__init__`
pops `every_n_layers` and `offload` before the rest reaches `checkpoint`."""

LIGER_KEYS = KeyTable(
    "transformers",
    VERSION,
    (
        Key("loss", "liger_kernel_config.rope", name="rope"),
        Key("loss", "liger_kernel_config.rms_norm", name="rms_norm"),
        Key("loss", "liger_kernel_config.swiglu", name="swiglu"),
        Key("loss", "liger_kernel_config.geglu", name="geglu"),
        Key("loss", "liger_kernel_config.fused_linear_cross_entropy", name="fused_linear_cross_entropy"),
    ),
    block="liger_kernel_config",
)
"""`liger_kernel_config`: transformers passes it to liger's `_apply_liger_kernel_to_instance`."""

DETECTING = frozenset(
    KEYS[name]
    for name in (
        "output_dir",
        "micro_batch",
        "grad_accum",
        "optimizer",
        "bf16",
        "fp16",
        "checkpointing",
        "activation_checkpointing",
        "learning_rate",
        "epochs",
        "max_steps",
        "shard",
        "fsdp",
        "lr_scheduler",
        "logging_steps",
        "save_strategy",
        "warmup",
        "report_to",
    )
)
"""TrainingArguments keys that mark a document as trainer arguments."""


__all__ = ["CHECKPOINTING_KWARGS", "DETECTING", "KEYS", "LIGER_KEYS", "OPTIM_NAMES", "VERSION"]
