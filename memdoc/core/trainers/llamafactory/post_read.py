"""The post-training keys of a LLaMA-Factory config -> the plan's task and its knobs (the inverse of
`memdoc.core.trainers.llamafactory.post`).

LLaMA-Factory 0.9.5 (`hparams/finetuning_args.py`): `stage` dpo with `pref_loss` sigmoid/hinge/ipo/kto_pair -> dpo,
orpo -> orpo, simpo -> simpo; kto; rm; ppo; `pref_beta` (default 0.1, the same for every stage); PPO's completion
length is `max_new_tokens` (`hparams/generating_args.py`).
"""

from __future__ import annotations

from memdoc.core.trainers.llamafactory.keys import DPO_LOSSES, KEYS, RL_STAGES
from memdoc.core.trainers.reading import ConfigReading, SourceDoc
from memdoc.core.trainers.values import get_choice, get_float, get_int, read_beta

LF_STAGES = RL_STAGES
LF_DPO_LOSSES = DPO_LOSSES
LF_PREF_BETA = KEYS.row("beta").default
"""`RLHFArguments.pref_beta` default (llamafactory/hparams/finetuning_args.py)."""


def read_llamafactory_rl(reading: ConfigReading, doc: SourceDoc, stage: str) -> None:
    """`stage` dpo/kto/rm/ppo with `pref_loss`, `pref_beta` and PPO's `max_new_tokens` (see the module docstring)."""
    task = LF_STAGES[stage]
    if stage == "dpo":
        loss = get_choice(doc, KEYS["pref_loss"], tuple(LF_DPO_LOSSES)) or "sigmoid"
        task = LF_DPO_LOSSES[loss]
        reading.set(
            doc, KEYS["pref_loss"] if doc.data.get(KEYS["pref_loss"]) is not None else KEYS["task"], "task", task
        )
    else:
        reading.set(doc, KEYS["task"], "task", task)
    if stage in ("dpo", "kto"):
        beta = get_float(doc, KEYS["beta"])
        if beta is None:
            reading.set(doc, "pref_beta (default)", "beta", LF_PREF_BETA)
        else:
            read_beta(reading, doc, KEYS["beta"], beta)
    if stage == "ppo":
        tokens = get_int(doc, KEYS["completion_len"])
        if tokens is not None and tokens > 0:
            reading.set(doc, KEYS["completion_len"], "completion_len", tokens)
        reading.set(doc, KEYS["task"], "num_generations", 1)  # one completion per prompt (LLaMA-Factory's PPO)


__all__ = ["read_llamafactory_rl"]
