"""The rows and lengths the policy trains on per micro-batch, per task, and the SFT plan that bills its step.

TRL 1.16:
* DPO (`trl/trainer/dpo_trainer.py` `DataCollatorForPreference.torch_call`, `DPOTrainer._compute_loss`): the
  collator stacks chosen then rejected rows ("batch is [chosen, rejected]"), one forward of 2 × micro-batch rows
  of up to `max_length` tokens; ORPO/SimPO (`experimental/orpo`, `experimental/cpo`) and the reward model
  (`reward_trainer.py` `DataCollatorForPreference`) concatenate the pair the same way;
* KTO (`kto_trainer.py` `KTOTrainer._compute_loss`): the micro-batch's completion rows are trained; its
  mismatched KL rows run under `torch.no_grad()` only (`_compute_kl_logps`), billed as a no-grad forward;
* GRPO/RLOO (`grpo_trainer.py`, `rloo_trainer.py`): `per_device_train_batch_size` counts completions and each
  trained row is the prompt (`seq_len`) + `max_completion_length`;
* PPO (no trainer in TRL 1.16; OpenRLHF / LLaMA-Factory `stage: ppo`): the policy trains on prompt + response.
"""

from __future__ import annotations

import dataclasses

from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.plan import Loss, TrainingPlan
from memdoc.core.model.plan_post import Task

TRL_FUSED_TASKS = (Task.DPO, Task.KTO, Task.GRPO, Task.RLOO)
"""Tasks whose TRL 1.16 trainer calls `model(..., fused_lm_head=True)` in the policy and reference forwards
(`add_fused_lm_head`, trl/trainer/utils.py): DPOTrainer, KTOTrainer, GRPOTrainer, RLOOTrainer."""


def trained_rows(plan: TrainingPlan) -> int:
    """Rows of one micro-batch's trained forward: 2 × micro-batch for the paired tasks, else the micro-batch."""
    return 2 * plan.micro_batch if plan.task.is_paired else plan.micro_batch


def trained_seq(plan: TrainingPlan) -> int:
    """Tokens per trained row: the prompt + the completion for the online tasks, else `seq_len` (`max_length`)."""
    return plan.seq_len + plan.completion_len if plan.task.is_online else plan.seq_len


def policy_loss(plan: TrainingPlan) -> Loss:
    """The policy's loss head: TRL's fused head for `TRL_FUSED_TASKS` unless Liger's is asked for (GRPO's
    `use_liger_kernel`/Liger GRPO loss: billed as Liger's fused linear loss), else the plan's."""
    if plan.task in TRL_FUSED_TASKS and plan.loss not in (Loss.FUSED, Loss.FUSED_CE):
        return Loss.TRL_FUSED
    return plan.loss


def scored_prefix(plan: TrainingPlan) -> int | None:
    """The unscored prefix of each trained row: the prompt (`seq_len`) for the online tasks (GRPO/RLOO label only
    the last `logits_to_keep` = completion positions, `_get_per_token_logps_and_entropies`), else `prompt_len`."""
    return plan.seq_len if plan.task.is_online else plan.prompt_len


def policy_model(model: ModelSpec, plan: TrainingPlan) -> ModelSpec:
    """The model the policy step trains: the causal LM, or for a reward model the sequence classifier TRL 1.16 builds
    (`reward_trainer.py`: `AutoModelForSequenceClassification` with `num_labels=1`): no LM head but a `score` linear of
    hidden × 1, so its "logits" are one number per token and its head one hidden-sized vector."""
    if plan.task is not Task.RM:
        return model
    params = dataclasses.replace(model.params, head=model.hidden_size)
    return dataclasses.replace(model, vocab_size=1, tie_embeddings=False, params=params)


def policy_plan(plan: TrainingPlan) -> TrainingPlan:
    """The supervised plan whose step is the policy's forward, backward and optimizer step of `plan`."""
    return plan.replace(
        task=Task.SFT,
        micro_batch=trained_rows(plan),
        seq_len=trained_seq(plan),
        loss=policy_loss(plan),
        prompt_len=scored_prefix(plan),
        beta=None,
        precompute_ref=False,
    )


__all__ = [
    "TRL_FUSED_TASKS",
    "policy_loss",
    "policy_model",
    "policy_plan",
    "scored_prefix",
    "trained_rows",
    "trained_seq",
]
