"""LLaMA-Factory's answers to the plan's knobs beyond its key table (0.9.5): packing, CP/TP, QLoRA's upcast, the
loss path.

* Packing (`hparams/data_args.py`): `neat_packing: true` (packing "without cross-attention"; it sets `packing`
  too), `packing: true`, `flash_attn: fa2`. `packing` alone attends across documents: not what is billed.
* CP/TP: its training arguments have no sequence- or tensor-parallel key (`llamafactory/hparams`; Ulysses lives in
  its separate v1 trainer, `v1/plugins/model_plugins/parallelization`): refused, naming Axolotl and TRL.
* QLoRA: LLaMA-Factory never calls `prepare_model_for_kbit_training`; `upcast_layernorm` (default false) upcasts
  the norm weights only.
* The loss: its trainer (a transformers Seq2SeqTrainer) computes the full logits, never TRL's fused LM head.
"""

from __future__ import annotations

from memdoc.core.model.plan import Method, TrainingPlan
from memdoc.core.trainers.hf.facts import full_logits_note
from memdoc.core.trainers.kbit import upcast_mismatch
from memdoc.core.trainers.llamafactory.keys import KEYS
from memdoc.core.trainers.packing import FLASH_NOTE
from memdoc.core.trainers.parallel import parallel_asked, refuse_tiled_mlp
from memdoc.errors import PlanError

NAME = "llamafactory"


def packing_keys(plan: TrainingPlan, notes: list[str]) -> dict:
    if not plan.packing:
        return {}
    notes.append(FLASH_NOTE)
    return {KEYS["packing"]: True, KEYS["neat_packing"]: True, KEYS["attention"]: "fa2"}


def check_parallel(plan: TrainingPlan) -> None:
    refuse_tiled_mlp(NAME, plan)
    if parallel_asked(NAME, plan):
        raise PlanError(
            "--format llamafactory cannot express --cp or --tp (LLaMA-Factory 0.9.5 has no sequence_parallel_size "
            "or tensor-parallel key); nearest: --format axolotl (context_parallel_size, tensor_parallel_size) or "
            "--format trl with --shard fsdp2 (accelerate's parallelism_config)"
        )


def add_parallel_keys(plan: TrainingPlan, emitted) -> None:
    """Nothing: `check_parallel` refuses every CP/TP plan."""


NOT_RUN = (
    "LLaMA-Factory never calls prepare_model_for_kbit_training (upcast_layernorm: true would upcast the norm weights "
    "only)"
)


def kbit_notes(plan: TrainingPlan) -> list[str]:
    return [upcast_mismatch(NOT_RUN)] if plan.method is Method.QLORA and plan.kbit_upcast else []


def loss_note(plan: TrainingPlan) -> str | None:
    return full_logits_note(plan, "LLaMA-Factory's trainer (a transformers Seq2SeqTrainer) computes")


__all__ = ["add_parallel_keys", "check_parallel", "kbit_notes", "loss_note", "packing_keys"]
