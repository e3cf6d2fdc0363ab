"""LLaMA-Factory's keys (0.9.5, `llamafactory/hparams/`: `model_args.py`, `finetuning_args.py`, `data_args.py`,
`generating_args.py`): one table for the reader and the writer. Its TrainingArguments keys (`training_args.py`,
transformers' own) are `memdoc.core.trainers.hf.keys`."""

from __future__ import annotations

from memdoc.core.trainers.table import Key, KeyTable

VERSION = "0.9.5"

FLASH_ATTN = {"auto": "sdpa", "sdpa": "sdpa", "fa2": "sdpa", "fa3": "sdpa", "disabled": "eager"}
"""llamafactory/extras/constants.py `AttentionFunction` -> memdoc attention (model/model_utils/attention.py:
auto leaves transformers' default, sdpa; disabled is eager; FlashAttention-2/3 keep O(s) state, as sdpa)."""

KEYS = KeyTable(
    "llamafactory",
    VERSION,
    (
        Key("model", "model_name_or_path"),
        Key("task", "stage", default="sft"),
        Key("task", "pref_loss", name="pref_loss", default="sigmoid"),
        Key("task", "pref_ftx", name="pref_ftx"),
        Key("beta", "pref_beta", default=0.1),
        Key("completion_len", "max_new_tokens"),
        Key("task", "reward_model", name="reward_model"),
        Key("method", "finetuning_type", default="lora"),
        Key("method", "quantization_bit", name="quantization_bit"),
        Key("method", "quantization_method", name="quantization_method", default="bnb"),
        Key("method", "quantization_type", name="quantization_type"),
        Key("method", "double_quantization", name="double_quantization"),
        Key("lora_rank", "lora_rank", default=8),
        Key("lora_alpha", "lora_alpha"),
        Key("lora_dropout", "lora_dropout", default=0.0),
        Key("lora_targets", "lora_target", {("all-linear",): "all"}, default="all"),
        Key("dataset", "dataset"),
        Key("model", "template", name="template"),
        Key("seq_len", "cutoff_len", default=2048),
        Key("attention", "flash_attn", {"sdpa": "sdpa", "eager": "disabled"}, aliases=FLASH_ATTN, default="auto"),
        Key("packing", "packing"),
        Key("packing", "neat_packing", name="neat_packing"),
        Key("checkpointing", "disable_gradient_checkpointing", {"none": True, "full": False}, default=False),
        Key("checkpointing", "use_reentrant_gc", name="use_reentrant_gc"),
        Key("precision", "pure_bf16", name="pure_bf16"),
        Key("loss", "enable_liger_kernel", {"fused": True, "hf": False}),
    ),
)

STAGES = {
    "sft": ("sft", None),
    "dpo": ("dpo", "sigmoid"),
    "orpo": ("dpo", "orpo"),
    "simpo": ("dpo", "simpo"),
    "kto": ("kto", None),
    "rm": ("rm", None),
    "ppo": ("ppo", None),
}
"""memdoc task → LLaMA-Factory `stage` and `pref_loss` (`FinetuningArguments.stage`: pt, sft, rm, ppo, dpo, kto)."""
DPO_LOSSES = {"sigmoid": "dpo", "hinge": "dpo", "ipo": "dpo", "kto_pair": "dpo", "orpo": "orpo", "simpo": "simpo"}
"""`pref_loss` of `stage: dpo` -> memdoc task (the inverse of `STAGES`, with the DPO losses memdoc bills as DPO)."""
RL_STAGES = {stage: stage for stage in ("dpo", "kto", "rm", "ppo")}
"""Stages that are post-training tasks -> the task (dpo's refined by `pref_loss`)."""

DETECTING = frozenset({KEYS["task"], KEYS["method"], KEYS["seq_len"], KEYS["template"]})
"""Keys beside `model_name_or_path` that mark a document as LLaMA-Factory's."""

__all__ = ["DETECTING", "DPO_LOSSES", "FLASH_ATTN", "KEYS", "RL_STAGES", "STAGES", "VERSION"]
