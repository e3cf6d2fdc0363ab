"""TRL's answers to the plan's knobs beyond its key table (TRL 1.16): packing, CP/TP, QLoRA's upcast, the loss path.

* Packing (`sft_config.py`): `packing: true` (strategy "bfd", which turns `padding_free` on: `sft_trainer.py`
  `SFTTrainer.__init__`), `padding_free: true` written out; `padding_free` "is only supported with the
  FlashAttention 2 or 3".
* CP/TP: accelerate's `parallelism_config` in the FSDP side file (`memdoc.core.trainers.accelerate.write`).
* QLoRA: `SFTTrainer` (≥ 0.26, `__init__`) never calls peft's `prepare_model_for_kbit_training` and has no key for
  it; for a 4-bit model it also casts the trainable (LoRA) parameters to bf16.
* The loss: TRL ≥ 1.16's trainers compute it through their fused LM head (`add_fused_lm_head` in
  trl/trainer/{sft,dpo,kto,grpo,rloo}_trainer.py); the reward trainer has a score head, no vocabulary logits.
"""

from __future__ import annotations

from memdoc.core.model.plan import Loss, Method, Task, TrainingPlan
from memdoc.core.model.stack import Stack, trl_fused_lm_head
from memdoc.core.trainers.accelerate.write import add_parallelism, check_parallelism
from memdoc.core.trainers.kbit import upcast_mismatch
from memdoc.core.trainers.packing import FLASH_NOTE
from memdoc.core.trainers.parallel import parallel_asked, refuse_tiled_mlp
from memdoc.core.trainers.trl.keys import KEYS, TRL_TRAINERS

NAME = "trl"


def packing_keys(plan: TrainingPlan, notes: list[str]) -> dict:
    if not plan.packing:
        return {}
    notes.append(FLASH_NOTE)
    return {KEYS["packing"]: True, KEYS["padding_free"]: True, KEYS["attention"]: "flash_attention_2"}


def check_parallel(plan: TrainingPlan) -> None:
    refuse_tiled_mlp(NAME, plan)
    if parallel_asked(NAME, plan):
        check_parallelism(NAME, plan)


def add_parallel_keys(plan: TrainingPlan, emitted) -> None:
    if plan.cp > 1 or plan.tp > 1:
        add_parallelism(plan, emitted)


NOT_RUN = "TRL's SFTTrainer (≥ 0.26) does not call peft's prepare_model_for_kbit_training and has no key for it"
ADAPTER_CAST = (
    "TRL casts a 4-bit model's LoRA adapters to bf16 (billed in fp32, peft's default): "
    "adapters, their gradients and AdamW states take about half the billed bytes"
)


def kbit_notes(plan: TrainingPlan) -> list[str]:
    if plan.method is not Method.QLORA:
        return []
    notes = [upcast_mismatch(NOT_RUN)] if plan.kbit_upcast else []
    return [*notes, ADAPTER_CAST]


RM_HEAD_NOTE = (
    "task rm: TRL's RewardTrainer loads AutoModelForSequenceClassification (trl/trainer/reward_trainer.py): a scalar "
    "score head, no vocabulary logits — --loss does not apply"
)


def _trl_head(plan: TrainingPlan) -> str:
    """Which TRL trainer computes the loss through its fused LM head."""
    trainer = TRL_TRAINERS.get(plan.task, TRL_TRAINERS[Task.SFT])
    source = f"trl/trainer/{trainer.removesuffix('Trainer').lower()}_trainer.py"
    return f"TRL ≥ 1.16's {trainer} computes the loss through its fused LM head ({source})"


def loss_note(plan: TrainingPlan, stack: Stack | None = None) -> str | None:
    """TRL ≥ 1.16 always uses its fused LM head: bill trl-fused (`trl_fused_lm_head`; an older TRL of the `stack`
    computes the loss as `--loss` says)."""
    if plan.task is Task.RM:
        return RM_HEAD_NOTE
    if stack is not None and not trl_fused_lm_head(stack):
        return None
    trl_head = _trl_head(plan)
    if plan.loss is Loss.HF:
        return f"loss hf: {trl_head}, never the full logits — bill --loss trl-fused for this config"
    if plan.loss is Loss.FUSED:
        return (
            f"loss fused: {trl_head} and turns Liger's fused cross-entropy off (use_liger_kernel applies its layer "
            "kernels only) — bill --loss trl-fused for this config"
        )
    if plan.loss is Loss.FUSED_CE:
        return (
            f"loss fused-ce: {trl_head} and refuses liger_kernel_config with fused_linear_cross_entropy — on TRL "
            "≥ 1.16 drop the Liger keys and bill --loss trl-fused"
        )
    return None


__all__ = ["add_parallel_keys", "check_parallel", "kbit_notes", "loss_note", "packing_keys"]
