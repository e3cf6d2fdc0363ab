"""The post-training keys of LLaMA-Factory YAML (0.9.5): `stage` and the `RLHFArguments`.

Read from the installed LLaMA-Factory 0.9.5:
* `llamafactory/hparams/finetuning_args.py` `FinetuningArguments.stage`: pt, sft, rm, ppo, dpo, kto (no GRPO or
  RLOO); `RLHFArguments`: `pref_beta` (default 0.1), `pref_ftx`, `pref_loss` (sigmoid, hinge, ipo, kto_pair, orpo,
  simpo), `simpo_gamma`, `ppo_epochs`, `reward_model` (required by `stage: ppo`, `FinetuningArguments.__post_init__`);
  `use_ref_model` is true for `stage: dpo` unless `pref_loss` is orpo or simpo;
* `llamafactory/hparams/generating_args.py` `GeneratingArguments.max_new_tokens`: PPO's completion length;
* `llamafactory/extras/misc.py` `check_dependencies`: trl >= 0.18, <= 0.24 (its PPO imports `trl.PPOTrainer`,
  `llamafactory/train/ppo/trainer.py`).
"""

from __future__ import annotations

from memdoc.core.model.plan import TrainingPlan
from memdoc.core.model.plan_post import Task
from memdoc.core.trainers.llamafactory.keys import KEYS, STAGES
from memdoc.errors import PlanError

LF_STAGES = {Task(task): stage for task, stage in STAGES.items()}
"""memdoc task → LLaMA-Factory `stage` and `pref_loss`."""

LF_PAIRED_ROWS = (
    'declared in data/dataset_info.json with "ranking": true: chosen/rejected columns (alpaca) or a conversations '
    "list plus chosen/rejected messages (sharegpt), rendered with `template`"
)
LF_TASK_DATASETS = {
    Task.DPO: LF_PAIRED_ROWS,
    Task.ORPO: LF_PAIRED_ROWS,
    Task.SIMPO: LF_PAIRED_ROWS,
    Task.RM: LF_PAIRED_ROWS,
    Task.KTO: 'declared in data/dataset_info.json with a "kto_tag" column (true: desirable) beside the messages',
    Task.PPO: "declared in data/dataset_info.json: the prompts (alpaca instruction/input or sharegpt turns)",
}
"""The rows each stage reads (LLaMA-Factory's data/README.md, "Preference Dataset", "KTO Dataset")."""

REWARD_MODEL_PLACEHOLDER = "CHANGE_ME_reward_model"
PPO_TRL_NOTE = (
    "stage ppo: LLaMA-Factory 0.9.5's PPO imports trl's PPOTrainer (llamafactory/train/ppo/trainer.py), which TRL "
    "removed: it runs with the trl it pins (>= 0.18, <= 0.24), not TRL 1.16"
)


def lf_task_keys(plan: TrainingPlan, notes: list[str], placeholders: dict[str, str]) -> dict:
    """`stage` and the RLHF keys of `plan.task`; a one-line error for GRPO and RLOO (no stage runs them)."""
    task = plan.task
    if task not in LF_STAGES:
        raise PlanError(
            f"--task {task.value} --format llamafactory: LLaMA-Factory 0.9.5's stages are pt, sft, rm, ppo, dpo, "
            "kto (no GRPO or RLOO)",
            hint=f"use --format trl (trl {task.value}) or, for grpo, axolotl (rl: grpo)",
        )
    stage, loss = LF_STAGES[task]
    out: dict = {KEYS["task"]: stage}
    if loss:
        out[KEYS["pref_loss"]] = loss
        out[KEYS["pref_ftx"]] = 0.0
    beta = plan.effective_beta if task not in (Task.ORPO, Task.SIMPO) else plan.beta
    if beta is not None and task is not Task.PPO:
        out[KEYS["beta"]] = float(beta)
    if plan.precompute_ref:
        notes.append(
            "--precompute-ref: LLaMA-Factory has no key for precomputed reference log-probabilities; its reference "
            "forward runs every step (more memory and compute than billed)"
        )
    if task is Task.PPO:
        out[KEYS["reward_model"]] = REWARD_MODEL_PLACEHOLDER
        placeholders[KEYS["reward_model"]] = "your trained reward model (a LoRA adapter of this base, or a full model)"
        out[KEYS["completion_len"]] = plan.completion_len
        notes.append(PPO_TRL_NOTE)
        notes.append(
            f"--generations {plan.num_generations}: LLaMA-Factory's PPO samples one completion per prompt and has no "
            "key for more"
        )
    return out


__all__ = ["LF_STAGES", "LF_TASK_DATASETS", "lf_task_keys"]
