"""TRL's keys (TRL 1.16): `ModelConfig` (`trl/trainer/model_config.py`), `SFTConfig` (`sft_config.py`), the
scripts' `ScriptArguments`, and the post-training config classes' keys (`DPOConfig`, `KTOConfig`, `RewardConfig`,
`GRPOConfig`, `RLOOConfig`: `trl/trainer/*_config.py`), with which script and trainer run each task. The
TrainingArguments keys TRL's configs inherit are `memdoc.core.trainers.hf.keys`.
"""

from __future__ import annotations

from memdoc.core.model.plan_post import Task
from memdoc.core.trainers.table import Key, KeyTable

VERSION = "1.16.0"

FLASH = {"flash_attention_2": "sdpa", "flash_attention_3": "sdpa"}
"""attn_implementation values billed as sdpa: flash attention saves O(s) state, as memdoc's sdpa bills."""

KEYS = KeyTable(
    "trl",
    VERSION,
    (
        Key("model", "model_name_or_path"),
        # `dtype` from 0.23.0 (`torch_dtype` stays a deprecated alias): trl 0.23.0 trl/trainer/model_config.py
        Key("precision", "dtype", read_also=("torch_dtype",), default="float32", spellings={"0.23.0": "torch_dtype"}),
        Key("attention", "attn_implementation", {"sdpa": "sdpa", "eager": "eager"}, aliases=FLASH),
        Key("method", "use_peft"),
        Key("lora_rank", "lora_r", default=16),
        Key("lora_alpha", "lora_alpha", default=32),
        Key("lora_dropout", "lora_dropout", default=0.05),
        Key("lora_targets", "lora_target_modules", {("all-linear",): "all-linear"}),
        Key("method", "load_in_4bit", name="load_in_4bit"),
        Key("method", "load_in_8bit", name="load_in_8bit"),
        Key("method", "bnb_4bit_quant_type", name="quant_type"),
        Key("method", "use_bnb_nested_quant", name="nested_quant", default=False),
        Key("method", "bnb_4bit_quant_storage", name="quant_storage"),
        # SFTConfig's `max_seq_length` is gone in 0.20.0 (trl 0.19.0 trl/trainer/sft_config.py:244 still has it)
        Key("seq_len", "max_length", spellings={"0.20.0": "max_seq_length"}, default=1024),
        Key("packing", "packing", default=False),
        Key("packing", "padding_free", name="padding_free", default=False),
        Key("dataset", "dataset_name"),
        Key("dataset", "dataset_text_field", name="dataset_text_field"),
        Key("loss", "loss_type"),
        # the post-training config classes
        Key("beta", "beta"),
        Key("precompute_ref", "precompute_ref_log_probs"),
        Key("num_generations", "num_generations"),
        Key("completion_len", "max_completion_length"),
        Key("generation_batch", "generation_batch_size"),
        Key("generation_batch", "steps_per_generation", name="steps_per_generation"),
        Key("num_iterations", "num_iterations"),
        Key("vllm", "use_vllm"),
        Key("vllm", "vllm_mode", name="vllm_mode"),
        Key("vllm_memory", "vllm_gpu_memory_utilization"),
        Key("vllm_sleep", "vllm_enable_sleep_mode"),
        Key("task", "reward_funcs", name="reward_funcs"),
        Key("task", "reward_model_name_or_path", name="reward_model"),
        Key("task", "desirable_weight", name="desirable_weight", default=1.0),
        Key("task", "undesirable_weight", name="undesirable_weight", default=1.0),
        Key("task", "center_rewards_coefficient", name="center_rewards_coefficient"),
        Key("task", "normalize_advantages", name="normalize_advantages", default=False),
        Key("task", "reward_clip_range", name="reward_clip_range"),
        Key("task", "rpo_alpha", name="rpo_alpha"),
        Key("task", "ref_model_sync_steps", name="ref_model_sync_steps"),
        Key("seq_len", "max_prompt_length", name="max_prompt_length", version="before 1.16.0"),
    ),
)

TRL_SCRIPTS = {
    Task.SFT: "sft",
    Task.DPO: "dpo",
    Task.KTO: "kto",
    Task.RM: "reward",
    Task.GRPO: "grpo",
    Task.RLOO: "rloo",
}
"""Each task TRL's CLI runs → its script (`trl/scripts/<name>.py`, the `trl <name>` subcommand)."""

TRL_TRAINERS = {
    Task.SFT: "SFTTrainer",
    Task.DPO: "DPOTrainer",
    Task.KTO: "KTOTrainer",
    Task.RM: "RewardTrainer",
    Task.GRPO: "GRPOTrainer",
    Task.RLOO: "RLOOTrainer",
}
"""Each task TRL runs → its trainer class."""

RLOO_KEYS = tuple(KEYS[k] for k in ("normalize_advantages", "reward_clip_range"))
GENERATION_KEYS = tuple(
    KEYS[k]
    for k in (
        "num_generations",
        "completion_len",
        "generation_batch",
        "steps_per_generation",
        "num_iterations",
        "vllm",
        "vllm_mode",
        "vllm_memory",
        "vllm_sleep",
    )
)
"""GRPOConfig's and RLOOConfig's generation keys (TRL 1.16)."""
ONLINE_KEYS = (*GENERATION_KEYS, KEYS["reward_funcs"], KEYS["reward_model"])
KTO_KEYS = (KEYS["desirable_weight"], KEYS["undesirable_weight"])
RM_KEYS = (KEYS["center_rewards_coefficient"],)
DPO_KEYS = tuple(KEYS[k] for k in ("beta", "precompute_ref", "rpo_alpha", "ref_model_sync_steps"))

SELF_DESCRIBING = {
    Task.KTO: {KEYS["desirable_weight"]: 1.0, KEYS["undesirable_weight"]: 1.0},
    Task.RM: {KEYS["center_rewards_coefficient"]: None},
    Task.RLOO: {KEYS["normalize_advantages"]: False},
}
"""Keys only the task's config class has, at TRL 1.16's defaults (`KTOConfig`, `RewardConfig`, `RLOOConfig`), so
that the file says which class it is (the reader, `post_read.trl_task`, tells the class by such keys)."""

POST_TRAINING_KEYS = frozenset({*RLOO_KEYS, *ONLINE_KEYS, *KTO_KEYS, *RM_KEYS, *DPO_KEYS})
"""Keys that mark a document as a TRL config."""

DETECTING = (
    frozenset(
        KEYS[k]
        for k in (
            "model",
            "precision",
            "method",
            "lora_rank",
            "lora_alpha",
            "lora_dropout",
            "lora_targets",
            "load_in_4bit",
            "load_in_8bit",
            "quant_type",
            "nested_quant",
            "seq_len",
            "packing",
            "padding_free",
            "dataset",
            "dataset_text_field",
            "attention",
        )
    )
    | {*KEYS.row("precision").read_also, KEYS.row("seq_len").key_at("0.19.0")}
    | POST_TRAINING_KEYS
)
"""Keys of TRL's ModelConfig / SFTConfig / ScriptArguments / post-training configs that TrainingArguments lacks (old
spellings too: `torch_dtype`, `max_seq_length`)."""


__all__ = [
    "DETECTING",
    "GENERATION_KEYS",
    "KEYS",
    "POST_TRAINING_KEYS",
    "SELF_DESCRIBING",
    "TRL_SCRIPTS",
    "TRL_TRAINERS",
    "VERSION",
]
