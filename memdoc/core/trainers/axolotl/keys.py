"""Axolotl's keys (0.19, its pydantic schema `axolotl/utils/schemas/`: `model.py`, `peft.py`, `training.py`,
`config.py`, `trl.py`, `vllm.py`, `enums.py`; the Liger plugin's `integrations/liger/args.py`): one table for the
reader and the writer. The `trl:` and `vllm:` blocks of `rl: grpo` and the FSDP block are tables of their own."""

from __future__ import annotations

from memdoc.core.trainers.table import Key, KeyTable

VERSION = "0.19.0"

KEYS = KeyTable(
    "axolotl",
    VERSION,
    (
        Key("model", "base_model"),
        Key("dataset", "datasets"),
        Key("method", "adapter", {"lora": "lora", "qlora": "qlora"}),
        Key("method", "load_in_4bit", name="load_in_4bit"),
        Key("method", "load_in_8bit", name="load_in_8bit"),
        Key("method", "bnb_config_kwargs", name="bnb_config_kwargs"),
        Key("lora_rank", "lora_r", default=8),
        Key("lora_alpha", "lora_alpha"),
        Key("lora_dropout", "lora_dropout", default=0.0),
        Key("lora_targets", "lora_target_linear", name="lora_target_linear"),
        Key("lora_targets", "lora_target_modules"),
        Key("micro_batch", "micro_batch_size", default=1),
        Key("grad_accum", "gradient_accumulation_steps", default=1),
        Key("grad_accum", "batch_size", name="batch_size"),
        Key("seq_len", "sequence_len", default=512),
        Key("optimizer", "optimizer", default="adamw_torch_fused"),
        Key("optimizer", "optim_args", name="optim_args"),
        Key("precision", "bf16", name="bf16", default="auto"),
        Key("precision", "fp16", name="fp16"),
        Key("precision", "bfloat16", name="bfloat16"),
        Key("precision", "float16", name="float16"),
        Key("precision", "float32", name="float32"),
        Key("attention", "attn_implementation"),
        Key("packing", "sample_packing", default=False),
        Key("packing", "pad_to_sequence_len", name="pad_to_sequence_len"),
        Key("loss", "plugins"),
        Key("loss", "liger_fused_linear_cross_entropy", name="liger_flce"),
        Key("loss", "liger_rope", name="liger_rope"),
        Key("loss", "liger_rms_norm", name="liger_rms_norm"),
        Key("loss", "liger_glu_activation", name="liger_glu_activation"),
        Key("loss", "liger_cross_entropy", name="liger_cross_entropy"),
        Key("loss", "cut_cross_entropy", name="cut_cross_entropy"),
        Key("checkpointing", "gradient_checkpointing"),
        Key("checkpointing", "gradient_checkpointing_kwargs", name="checkpointing_kwargs"),
        Key("activation_offload", "activation_offloading", {True: "hidden_states"}),
        Key("shard", "deepspeed"),
        Key("shard", "fsdp_config", name="fsdp_config"),
        Key("shard", "fsdp_version", name="fsdp_version"),
        Key("shard", "fsdp", name="fsdp"),
        Key("cp", "context_parallel_size", read_also=("sequence_parallel_degree",)),
        Key("tp", "tensor_parallel_size"),
        Key("tiled_mlp", "tiled_mlp_num_shards"),
        Key("tiled_mlp", "tiled_mlp", name="tiled_mlp_on"),
        Key("task", "rl", {"dpo": "dpo", "kto": "kto", "orpo": "orpo", "simpo": "simpo", "grpo": "grpo"}),
        Key("task", "reward_model", name="reward_model"),
        Key("beta", "rl_beta"),
        Key("precompute_ref", "precompute_ref_log_probs"),
        Key("task", "trl", name="trl"),
        Key("vllm_memory", "vllm", name="vllm"),
    ),
)
TASK_ALIASES = {"ipo": "dpo", "gdpo": "grpo"}
"""Axolotl `rl:` values read as another memdoc task (ipo is DPO with IPO's loss; gdpo is GRPO with GDPO's reward
aggregation)."""

TRL_BLOCK = KeyTable(
    "axolotl",
    VERSION,
    (
        Key("beta", "trl.beta"),
        Key("completion_len", "trl.max_completion_length"),
        Key("num_generations", "trl.num_generations"),
        Key("generation_batch", "trl.generation_batch_size"),
        Key("num_iterations", "trl.num_iterations"),
        Key("vllm", "trl.use_vllm"),
        Key("vllm", "trl.vllm_mode", name="vllm_mode"),
        Key("vllm_sleep", "trl.vllm_enable_sleep_mode"),
        Key("task", "trl.reward_funcs", name="reward_funcs"),
    ),
    block="trl",
)
"""`TRLConfig` (`axolotl/utils/schemas/trl.py`): the `trl:` block of `rl: grpo`."""

VLLM_BLOCK = KeyTable(
    "axolotl", VERSION, (Key("vllm_memory", "vllm.gpu_memory_utilization", default=0.9),), block="vllm"
)
"""`VllmConfig` (`axolotl/utils/schemas/vllm.py`): the colocated engine's share of the card (default 0.9)."""

DETECTING = frozenset({KEYS["micro_batch"], KEYS["seq_len"]})
"""Keys beside `base_model` that mark a document as Axolotl's."""

__all__ = ["DETECTING", "KEYS", "TASK_ALIASES", "TRL_BLOCK", "VERSION", "VLLM_BLOCK"]
