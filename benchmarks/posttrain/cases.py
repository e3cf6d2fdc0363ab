"""The post-training cases: a tiny random Llama, a word-level tokenizer, fixed-length data, TRL's knobs per case.

Every sequence has exactly its length, as on a GPU run with uniform data: DPO prompts of `PROMPT_LEN` words and
chosen/rejected completions of `COMPLETION_LEN - 1` words (TRL's DPO `_prepare_dataset` appends the EOS, so each
completion has `COMPLETION_LEN` tokens and every row `PROMPT_LEN + COMPLETION_LEN`); GRPO prompts of `PROMPT_LEN`
words and completions forced to `max_completion_length` (`min_new_tokens` = `max_new_tokens`, so no EOS stops a
row early). The tokenizer has no BOS and adds no special tokens, so words are tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 704,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 128,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
"""config.json of the tiny model. The vocabulary is small (128) so that the CPU-only temporaries of TRL's
chunked log-prob tiles (`_forward_tile`/`_backward_tile` in trl/kernels/chunked_logprob.py: tokens × used
vocabulary, fp32) stay small beside the `[min(N, 4096) × 32768]` tile buffer the GPU path allocates too."""

SPECIAL = ["<pad>", "<eos>", "<unk>"]
PROMPT_LEN = 32
COMPLETION_LEN = 96
PAIRS = 2
"""DPO micro-batch: pairs per device (rows in the concatenated forward: 2 × PAIRS)."""
COMPLETIONS = 4
"""GRPO micro-batch: completions per device (`per_device_train_batch_size`)."""
GENERATIONS = 4


@dataclass(frozen=True)
class Case:
    name: str
    trainer: str
    """dpo or grpo."""
    config: dict = field(default_factory=dict)
    """DPOConfig / GRPOConfig keywords on top of `COMMON`."""
    lora: bool = False
    steps: int = 2
    """Optimizer steps run; the last one is measured (GRPO with 2 iterations generates on steps 1 and 3)."""
    plan: dict = field(default_factory=dict)
    """The same run in memdoc's plan terms (`parse_plan` keywords)."""


COMMON = {
    "per_device_train_batch_size": None,  # set per trainer below
    "gradient_accumulation_steps": 1,
    "bf16": True,
    "gradient_checkpointing": True,
    "optim": "adamw_torch_fused",
    "learning_rate": 1e-5,
    "max_grad_norm": 1.0,
    "logging_steps": 1,
    "report_to": "none",
    "save_strategy": "no",
    "use_cpu": True,
    "seed": 0,
    "data_seed": 0,
    "dataloader_num_workers": 0,
    "model_init_kwargs": {"dtype": "bfloat16"},
}
"""Knobs every case shares: TRL's own defaults where they are its defaults (`bf16`, `gradient_checkpointing` on,
DPOConfig/GRPOConfig docstrings), weights in bf16 as loaded from a bf16 checkpoint, torch's fused AdamW."""

DPO_BASE = {"per_device_train_batch_size": PAIRS, "max_length": PROMPT_LEN + COMPLETION_LEN, "beta": 0.1}
GRPO_BASE = {
    "per_device_train_batch_size": COMPLETIONS,
    "num_generations": GENERATIONS,
    "max_completion_length": COMPLETION_LEN,
    "generation_kwargs": {"min_new_tokens": COMPLETION_LEN},
}

PLAN_BASE = {
    "precision": "bf16",
    "optimizer": "adamw-fused",
    "checkpointing": "full",
    "loss": "trl-fused",
    "grad_accum": 1,
}
DPO_PLAN = {
    **PLAN_BASE,
    "task": "dpo",
    "micro_batch": PAIRS,
    "seq_len": PROMPT_LEN + COMPLETION_LEN,
    "prompt_len": PROMPT_LEN,
}
GRPO_PLAN = {
    **PLAN_BASE,
    "task": "grpo",
    "micro_batch": COMPLETIONS,
    "seq_len": PROMPT_LEN,
    "completion_len": COMPLETION_LEN,
    "num_generations": GENERATIONS,
    "generation_batch": COMPLETIONS,
}
LORA = {"r": 16, "lora_alpha": 32, "lora_dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}
LORA_PLAN = {"method": "lora", "lora_rank": 16, "lora_alpha": 32, "lora_targets": ("q_proj", "v_proj")}

CASES = {
    c.name: c
    for c in (
        Case("dpo-full", "dpo", DPO_BASE, plan={**DPO_PLAN, "method": "full", "beta": 0.1}),
        Case("dpo-lora", "dpo", DPO_BASE, lora=True, plan={**DPO_PLAN, **LORA_PLAN, "beta": 0.1}),
        Case(
            "dpo-precompute",
            "dpo",
            {**DPO_BASE, "precompute_ref_log_probs": True},
            plan={**DPO_PLAN, "method": "full", "beta": 0.1, "precompute_ref": True},
        ),
        Case("grpo-beta0", "grpo", {**GRPO_BASE, "beta": 0.0}, plan={**GRPO_PLAN, "method": "full", "beta": 0.0}),
        Case("grpo-beta004", "grpo", {**GRPO_BASE, "beta": 0.04}, plan={**GRPO_PLAN, "method": "full", "beta": 0.04}),
        Case(
            "grpo-iter2",
            "grpo",
            {**GRPO_BASE, "beta": 0.0, "num_iterations": 2},
            steps=3,
            plan={**GRPO_PLAN, "method": "full", "beta": 0.0, "num_iterations": 2},
        ),
    )
}


def save_model(folder) -> None:
    """Write the tiny model (seed 0, bf16) and its tokenizer to `folder`, as a local checkpoint."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

    cfg = dict(CONFIG)
    config = AutoConfig.for_model(cfg.pop("model_type"), **{k: v for k, v in cfg.items() if k != "architectures"})
    config.pad_token_id, config.eos_token_id, config.bos_token_id = 0, 1, None
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).save_pretrained(folder)
    words = SPECIAL + [f"w{i}" for i in range(CONFIG["vocab_size"] - len(SPECIAL))]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    ).save_pretrained(folder)


def _words(rng, n: int) -> str:
    return " ".join(f"w{rng.randrange(CONFIG['vocab_size'] - len(SPECIAL))}" for _ in range(n))


def dataset(trainer: str, rows: int = 16):
    """`rows` examples of fixed length: DPO prompt/chosen/rejected, GRPO prompt (seeded)."""
    import random

    from datasets import Dataset

    rng = random.Random(0)
    if trainer == "dpo":
        data = [
            {
                "prompt": _words(rng, PROMPT_LEN),
                "chosen": " " + _words(rng, COMPLETION_LEN - 1),  # TRL joins prompt + chosen as strings
                "rejected": " " + _words(rng, COMPLETION_LEN - 1),
            }
            for _ in range(rows)
        ]
    else:
        data = [{"prompt": _words(rng, PROMPT_LEN)} for _ in range(rows)]
    return Dataset.from_list(data)


def reward_len(completions, **kwargs) -> list[float]:
    """A trivial reward (GRPO needs one): the completion's length in characters."""
    return [float(len(c)) for c in completions]
