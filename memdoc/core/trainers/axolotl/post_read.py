"""The post-training keys of Axolotl configs -> the plan's task and its knobs (the inverse of
`memdoc.core.trainers.axolotl.post`).

Axolotl 0.19 (`axolotl/utils/schemas/config.py`, `trl.py`, `vllm.py`, `enums.py` `RLType`): `rl` (dpo, ipo -> dpo;
kto; orpo; simpo; grpo, gdpo -> grpo; ebft is not billed), `rl_beta` or `trl.beta` (`core/builders/rl.py` prefers
`trl.beta`), `precompute_ref_log_probs`, `reward_model: true` -> rm; the `trl:` block's `num_generations`,
`max_completion_length`, `generation_batch_size`, `num_iterations`, `use_vllm`, `vllm_mode` (None: TRL's colocate),
`vllm_enable_sleep_mode`; `vllm.gpu_memory_utilization` (default 0.9, `VllmConfig`), which
`core/trainers/grpo/__init__.py` passes to TRL for a colocated engine.

"""

from __future__ import annotations

from memdoc.core.trainers.axolotl.keys import KEYS, TASK_ALIASES, TRL_BLOCK, VLLM_BLOCK
from memdoc.core.trainers.reading import ConfigReading, SourceDoc
from memdoc.core.trainers.values import get_bool, get_choice, get_float, get_int, get_mapping, get_str, read_beta

AXOLOTL_RL = {**{rl: task for task, rl in KEYS.row("task").values.items()}, **TASK_ALIASES}
"""Axolotl `rl:` -> memdoc task."""
AXOLOTL_VLLM_MEMORY = VLLM_BLOCK.row("vllm_memory").default
"""`VllmConfig.gpu_memory_utilization` default (axolotl/utils/schemas/vllm.py)."""


def read_axolotl_rl(reading: ConfigReading, doc: SourceDoc) -> None:
    """`rl:` and its keys, or `reward_model: true` (see the module docstring)."""
    if get_bool(doc, KEYS["reward_model"]):
        reading.set(doc, KEYS["reward_model"], "task", "rm")
        return
    rl = get_str(doc, KEYS["task"])
    if rl is None:
        return
    task = AXOLOTL_RL.get(rl.strip().lower())
    if task is None:
        reading.skip(doc, KEYS["task"], f"rl {rl}: not a task memdoc bills (dpo, ipo, kto, orpo, simpo, grpo, gdpo)")
        return
    reading.set(doc, KEYS["task"], "task", task)
    block = get_mapping(doc, KEYS["trl"]) or {}
    if block.get(TRL_BLOCK["beta"]) is not None:
        read_beta(reading, doc, "trl.beta", get_float(doc, TRL_BLOCK["beta"], block, where="trl.beta"))
    else:
        read_beta(reading, doc, KEYS["beta"], get_float(doc, KEYS["beta"]))
    if task in ("dpo", "kto") and get_bool(doc, KEYS["precompute_ref"]) is not None:
        reading.set(doc, KEYS["precompute_ref"], "precompute_ref", get_bool(doc, KEYS["precompute_ref"]))
    if task == "grpo":
        _axolotl_grpo(reading, doc, block)


def _axolotl_grpo(reading: ConfigReading, doc: SourceDoc, block: dict) -> None:
    """The `trl:` block's generation keys and the colocated engine's share of the card (`vllm:`)."""
    for key, plan_field in (
        (TRL_BLOCK["num_generations"], "num_generations"),
        (TRL_BLOCK["completion_len"], "completion_len"),
        (TRL_BLOCK["generation_batch"], "generation_batch"),
        (TRL_BLOCK["num_iterations"], "num_iterations"),
    ):
        value = get_int(doc, key, block, where=f"trl.{key}")
        if value is not None:
            reading.set(doc, f"trl.{key}", plan_field, value)
    if not get_bool(doc, TRL_BLOCK["vllm"], block, where="trl.use_vllm"):
        return
    given = get_choice(doc, TRL_BLOCK["vllm_mode"], ("colocate", "server"), block, where="trl.vllm_mode")
    mode = given or "colocate"  # None: TRL's GRPOConfig default
    reading.set(doc, "trl.use_vllm", "vllm", mode)
    if given:
        reading.set(doc, "trl.vllm_mode", "vllm", given)
    if given != "colocate":  # Axolotl passes the engine's fraction and sleep mode only with vllm_mode colocate
        return  # written out (`axolotl/core/trainers/grpo/__init__.py`); else TRL's defaults (0.3, no sleep) hold
    sleep = get_bool(doc, TRL_BLOCK["vllm_sleep"], block, where="trl.vllm_enable_sleep_mode")
    if sleep is not None:
        reading.set(doc, "trl.vllm_enable_sleep_mode", "vllm_sleep", sleep)
    engine = get_mapping(doc, KEYS["vllm"]) or {}
    memory = get_float(doc, VLLM_BLOCK["vllm_memory"], engine, where="vllm.gpu_memory_utilization")
    if memory is None:
        reading.set(doc, "vllm.gpu_memory_utilization (default)", "vllm_memory", AXOLOTL_VLLM_MEMORY)
    else:
        reading.set(doc, "vllm.gpu_memory_utilization", "vllm_memory", memory)


__all__ = ["read_axolotl_rl"]
