"""The post-training keys of Axolotl and LLaMA-Factory configs -> the plan's task and its knobs (the inverse of
`memdoc.core.trainers.axolotl.post` and `memdoc.core.trainers.llamafactory.post`).

Axolotl 0.19 (`axolotl/utils/schemas/config.py`, `trl.py`, `vllm.py`, `enums.py` `RLType`): `rl` (dpo, ipo -> dpo;
kto; orpo; simpo; grpo, gdpo -> grpo; ebft is not billed), `rl_beta` or `trl.beta` (`core/builders/rl.py` prefers
`trl.beta`), `precompute_ref_log_probs`, `reward_model: true` -> rm; the `trl:` block's `num_generations`,
`max_completion_length`, `generation_batch_size`, `num_iterations`, `use_vllm`, `vllm_mode` (None: TRL's colocate),
`vllm_enable_sleep_mode`; `vllm.gpu_memory_utilization` (default 0.9, `VllmConfig`), which
`core/trainers/grpo/__init__.py` passes to TRL for a colocated engine.

LLaMA-Factory 0.9.5 (`hparams/finetuning_args.py`): `stage` dpo with `pref_loss` sigmoid/hinge/ipo/kto_pair -> dpo,
orpo -> orpo, simpo -> simpo; kto; rm; ppo; `pref_beta` (default 0.1, the same for every stage); PPO's completion
length is `max_new_tokens` (`hparams/generating_args.py`).
"""

from __future__ import annotations

from memdoc.core.trainers.reading import ConfigReading, SourceDoc
from memdoc.core.trainers.values import fail, get_bool, get_choice, get_float, get_int, get_mapping, get_str

AXOLOTL_RL = {"dpo": "dpo", "ipo": "dpo", "kto": "kto", "orpo": "orpo", "simpo": "simpo", "grpo": "grpo"}
AXOLOTL_RL |= {"gdpo": "grpo"}
"""Axolotl `rl:` -> memdoc task (ipo is DPO with IPO's loss; gdpo is GRPO with GDPO's reward aggregation)."""
AXOLOTL_VLLM_MEMORY = 0.9
"""`VllmConfig.gpu_memory_utilization` default (axolotl/utils/schemas/vllm.py)."""

LF_STAGES = {"dpo": "dpo", "kto": "kto", "rm": "rm", "ppo": "ppo"}
LF_DPO_LOSSES = {"sigmoid": "dpo", "hinge": "dpo", "ipo": "dpo", "kto_pair": "dpo", "orpo": "orpo", "simpo": "simpo"}
LF_PREF_BETA = 0.1
"""`RLHFArguments.pref_beta` default (llamafactory/hparams/finetuning_args.py)."""


def _beta(reading: ConfigReading, doc: SourceDoc, key: str, beta: float | None) -> None:
    if beta is None:
        return
    if beta < 0:
        raise fail(doc, key, f"must be 0 or more, got {beta!r}")
    reading.set(doc, key, "beta", beta)


def read_axolotl_rl(reading: ConfigReading, doc: SourceDoc) -> None:
    """`rl:` and its keys, or `reward_model: true` (see the module docstring)."""
    if get_bool(doc, "reward_model"):
        reading.set(doc, "reward_model", "task", "rm")
        return
    rl = get_str(doc, "rl")
    if rl is None:
        return
    task = AXOLOTL_RL.get(rl.strip().lower())
    if task is None:
        reading.skip(doc, "rl", f"rl {rl}: not a task memdoc bills (dpo, ipo, kto, orpo, simpo, grpo, gdpo)")
        return
    reading.set(doc, "rl", "task", task)
    block = get_mapping(doc, "trl") or {}
    if block.get("beta") is not None:
        _beta(reading, doc, "trl.beta", get_float(doc, "beta", block, where="trl.beta"))
    else:
        _beta(reading, doc, "rl_beta", get_float(doc, "rl_beta"))
    if task in ("dpo", "kto") and get_bool(doc, "precompute_ref_log_probs") is not None:
        reading.set(doc, "precompute_ref_log_probs", "precompute_ref", get_bool(doc, "precompute_ref_log_probs"))
    if task == "grpo":
        _axolotl_grpo(reading, doc, block)


def _axolotl_grpo(reading: ConfigReading, doc: SourceDoc, block: dict) -> None:
    """The `trl:` block's generation keys and the colocated engine's share of the card (`vllm:`)."""
    for key, plan_field in (
        ("num_generations", "num_generations"),
        ("max_completion_length", "completion_len"),
        ("generation_batch_size", "generation_batch"),
        ("num_iterations", "num_iterations"),
    ):
        value = get_int(doc, key, block, where=f"trl.{key}")
        if value is not None:
            reading.set(doc, f"trl.{key}", plan_field, value)
    if not get_bool(doc, "use_vllm", block, where="trl.use_vllm"):
        return
    given = get_choice(doc, "vllm_mode", ("colocate", "server"), block, where="trl.vllm_mode")
    mode = given or "colocate"  # None: TRL's GRPOConfig default
    reading.set(doc, "trl.use_vllm", "vllm", mode)
    if given:
        reading.set(doc, "trl.vllm_mode", "vllm", given)
    if given != "colocate":  # Axolotl passes the engine's fraction and sleep mode only with vllm_mode colocate
        return  # written out (`axolotl/core/trainers/grpo/__init__.py`); else TRL's defaults (0.3, no sleep) hold
    sleep = get_bool(doc, "vllm_enable_sleep_mode", block, where="trl.vllm_enable_sleep_mode")
    if sleep is not None:
        reading.set(doc, "trl.vllm_enable_sleep_mode", "vllm_sleep", sleep)
    engine = get_mapping(doc, "vllm") or {}
    memory = get_float(doc, "gpu_memory_utilization", engine, where="vllm.gpu_memory_utilization")
    if memory is None:
        reading.set(doc, "vllm.gpu_memory_utilization (default)", "vllm_memory", AXOLOTL_VLLM_MEMORY)
    else:
        reading.set(doc, "vllm.gpu_memory_utilization", "vllm_memory", memory)


def read_llamafactory_rl(reading: ConfigReading, doc: SourceDoc, stage: str) -> None:
    """`stage` dpo/kto/rm/ppo with `pref_loss`, `pref_beta` and PPO's `max_new_tokens` (see the module docstring)."""
    task = LF_STAGES[stage]
    if stage == "dpo":
        loss = get_choice(doc, "pref_loss", tuple(LF_DPO_LOSSES)) or "sigmoid"
        task = LF_DPO_LOSSES[loss]
        reading.set(doc, "pref_loss" if doc.data.get("pref_loss") is not None else "stage", "task", task)
    else:
        reading.set(doc, "stage", "task", task)
    if stage in ("dpo", "kto"):
        beta = get_float(doc, "pref_beta")
        if beta is None:
            reading.set(doc, "pref_beta (default)", "beta", LF_PREF_BETA)
        else:
            _beta(reading, doc, "pref_beta", beta)
    if stage == "ppo":
        tokens = get_int(doc, "max_new_tokens")
        if tokens is not None and tokens > 0:
            reading.set(doc, "max_new_tokens", "completion_len", tokens)
        reading.set(doc, "stage", "num_generations", 1)  # one completion per prompt (LLaMA-Factory's PPO)


__all__ = ["read_axolotl_rl", "read_llamafactory_rl"]
