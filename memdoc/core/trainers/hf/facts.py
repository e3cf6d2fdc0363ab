"""HF `Trainer`'s answers to the plan's knobs beyond its key table (transformers 5.24): packing, CP/TP, QLoRA's
upcast, the loss path.

* Packing: TrainingArguments have no key (a `DataCollatorWithFlattening` in the script): refused, naming the
  formats that have one.
* CP/TP: accelerate's `parallelism_config` in the FSDP side file (`memdoc.core.trainers.accelerate.write`).
* QLoRA: the script prepares the model itself; the note says whether to call peft's
  `prepare_model_for_kbit_training` (`kbit_prepare_clause`).
* The loss: the HF Trainer computes transformers' own loss (the full logits), never TRL's fused LM head.
"""

from __future__ import annotations

from memdoc.core.model.plan import Loss, Method, TrainingPlan
from memdoc.core.trainers.accelerate.write import add_parallelism, check_parallelism
from memdoc.core.trainers.parallel import parallel_asked, refuse_tiled_mlp
from memdoc.errors import PlanError

NAME = "hf"


def packing_keys(plan: TrainingPlan, notes: list[str]) -> dict:
    if not plan.packing:
        return {}
    raise PlanError(
        "--packing: HF TrainingArguments have no packing key (it is a data collator in your script)",
        hint="nearest formats: --format trl (packing, padding_free), axolotl (sample_packing), "
        "llamafactory (neat_packing)",
    )


def check_parallel(plan: TrainingPlan) -> None:
    refuse_tiled_mlp(NAME, plan)
    if parallel_asked(NAME, plan):
        check_parallelism(NAME, plan)


def add_parallel_keys(plan: TrainingPlan, emitted) -> None:
    if plan.cp > 1 or plan.tp > 1:
        add_parallelism(plan, emitted)


def kbit_notes(plan: TrainingPlan) -> list[str]:
    """None: the script runs the upcast or not as the note on loading the model says (`kbit_prepare_clause`)."""
    return []


def kbit_prepare_clause(plan: TrainingPlan) -> str:
    """The hf note's QLoRA clause: call `prepare_model_for_kbit_training` exactly when the plan bills its upcast."""
    if plan.method is not Method.QLORA:
        return ""
    if plan.kbit_upcast:
        return (
            " after prepare_model_for_kbit_training(model, use_gradient_checkpointing=...) — its fp32 upcast of "
            "embeddings, LM head and norms is billed (--kbit-upcast)"
        )
    return (
        " — without peft's prepare_model_for_kbit_training, whose fp32 upcast of embeddings, LM head and norms "
        "this plan does not bill (--kbit-upcast bills it)"
    )


def full_logits_note(plan: TrainingPlan, computes: str) -> str | None:
    """A trainer that computes transformers' own loss (the full logits) asked for TRL's fused head: bill hf."""
    if plan.loss is not Loss.TRL_FUSED:
        return None
    return (
        f"loss trl-fused: TRL's fused LM head runs in TRL's trainers only; {computes} the full logits — bill "
        "--loss hf for this config"
    )


def loss_note(plan: TrainingPlan) -> str | None:
    return full_logits_note(plan, "the HF Trainer computes")


__all__ = [
    "add_parallel_keys",
    "check_parallel",
    "full_logits_note",
    "kbit_notes",
    "kbit_prepare_clause",
    "loss_note",
    "packing_keys",
]
