"""The post-training keys of Axolotl YAML (0.19): `rl:` and its keys, or `reward_model: true`.

Read from the installed Axolotl 0.19:
* `axolotl/utils/schemas/enums.py` `RLType`: dpo, gdpo, grpo, ipo, orpo, kto, simpo, ebft (no RLOO, no PPO);
* `axolotl/utils/schemas/config.py` `rl`, `rl_beta`, `precompute_ref_log_probs`, `reward_model`, `trl`, `vllm`;
  `axolotl/core/builders/rl.py` passes `trl.beta`, else `rl_beta`, as the trainer's `beta`;
* `axolotl/utils/schemas/trl.py` `TRLConfig`: `beta`, `max_completion_length`, `num_generations`,
  `generation_batch_size`, `num_iterations`, `use_vllm`, `vllm_mode`, `vllm_enable_sleep_mode`, `reward_funcs`;
  `axolotl/core/trainers/grpo/__init__.py` `set_training_args_kwargs` takes the colocated engine's memory from
  `vllm.gpu_memory_utilization` (default 0.9, so it is always written);
* reward models: `model_type: AutoModelForSequenceClassification`, `num_labels: 1`, `reward_model: true`
  (Axolotl's reward-modelling example, `examples/gemma2/reward-model.yaml`);
* the dataset types: `prompt_strategies/dpo/chat_template.py` `default` (DPO, SimPO), `orpo/chat_template.py`
  `argilla` (ORPO), `kto/chatml.py` `argilla_chat` (KTO), `bradley_terry/chat_template.py` (reward models).
"""

from __future__ import annotations

from memdoc.core.model.plan import TrainingPlan
from memdoc.core.model.plan_post import Task, Vllm
from memdoc.core.trainers.axolotl.keys import KEYS, TRL_BLOCK, VLLM_BLOCK
from memdoc.errors import PlanError

AXOLOTL_RL = {Task(task): rl for task, rl in KEYS.row("task").values.items()}
"""memdoc task → Axolotl's `rl:` value (`RLType`)."""

AXOLOTL_DATASET_TYPES = {
    Task.DPO: (
        {
            "type": "chat_template.default",
            "field_messages": "messages",
            "field_chosen": "chosen",
            "field_rejected": "rejected",
        },
        'rows {"messages": [prompt turns], "chosen": {"role": "assistant", "content": …}, "rejected": {…}}',
    ),
    Task.SIMPO: (
        {
            "type": "chat_template.default",
            "field_messages": "messages",
            "field_chosen": "chosen",
            "field_rejected": "rejected",
        },
        'rows {"messages": [prompt turns], "chosen": {"role": "assistant", "content": …}, "rejected": {…}}',
    ),
    Task.ORPO: (
        {"type": "chat_template.argilla"},
        'rows {"chosen": [messages], "rejected": [messages]} (Argilla format), rendered with chat_template',
    ),
    Task.KTO: (
        {"type": "chatml.argilla_chat"},
        'rows {"chosen": [messages] or "completion": [messages], "label": true|false}, rendered as ChatML',
    ),
    Task.RM: (
        {"type": "bradley_terry.chat_template"},
        'rows {"chosen": [messages], "rejected": [messages]}, rendered with chat_template',
    ),
    Task.GRPO: (
        {"type": "rewards.prompt_transform"},
        'a dotted path to your function (in a module next to the config) that maps a row to {"prompt": [messages]}',
    ),
}
"""Each task's `datasets` entry and the rows it reads."""

AXOLOTL_REWARD_FUNCS = ["rewards.my_reward"]
AXOLOTL_REWARD_NOTE = "dotted paths to your reward functions (a module next to the config): choose your reward"

UNRUNNABLE = {
    Task.RLOO: "Axolotl 0.19's rl: has no rloo (RLType: dpo, gdpo, grpo, ipo, orpo, kto, simpo, ebft)",
    Task.PPO: "Axolotl 0.19 has no PPO trainer (RLType has no ppo)",
}
RUNS_IT = {Task.RLOO: "--format trl (trl rloo)", Task.PPO: "--format llamafactory (stage: ppo, with your reward model)"}


def axolotl_task_keys(plan: TrainingPlan, notes: list[str]) -> dict:
    """`plan`'s task as Axolotl keys: `rl` + `rl_beta` + `precompute_ref_log_probs`, the `trl:` block and `vllm:`
    for GRPO, `reward_model: true` for reward models; a one-line error for RLOO and PPO."""
    task = plan.task
    if task in UNRUNNABLE:
        raise PlanError(f"--task {task.value} --format axolotl: {UNRUNNABLE[task]}", hint=f"use {RUNS_IT[task]}")
    if task is Task.SFT:
        return {}
    if task is Task.RM:
        return {"model_type": "AutoModelForSequenceClassification", "num_labels": 1, KEYS["reward_model"]: True}
    out: dict = {KEYS["task"]: AXOLOTL_RL[task]}
    beta = plan.effective_beta
    if task is Task.GRPO:
        out[KEYS["trl"]] = _grpo_block(plan, notes)
        if plan.vllm is Vllm.COLOCATE:
            out[KEYS["vllm"]] = {VLLM_BLOCK["vllm_memory"]: float(plan.vllm_memory)}
        return out
    if beta is not None:
        out[KEYS["beta"]] = float(beta)
    if task in (Task.DPO, Task.KTO):
        out[KEYS["precompute_ref"]] = plan.precompute_ref
    if task is Task.KTO:  # Axolotl's validator requires it for KTO (axolotl/utils/schemas/validation.py)
        out["remove_unused_columns"] = False
    return out


def _grpo_block(plan: TrainingPlan, notes: list[str]) -> dict:
    """The `trl:` block of `rl: grpo` (`TRLConfig`); `trl.beta` is TRL's own GRPO `beta`."""
    block: dict = {
        TRL_BLOCK["beta"]: float(plan.effective_beta),
        TRL_BLOCK["completion_len"]: plan.completion_len,
        TRL_BLOCK["num_generations"]: plan.num_generations,
        TRL_BLOCK["num_iterations"]: plan.num_iterations,
        TRL_BLOCK["vllm"]: plan.vllm is not Vllm.NONE,
    }
    if plan.generation_batch is not None:
        block[TRL_BLOCK["generation_batch"]] = plan.generation_batch
    if plan.vllm is not Vllm.NONE:
        block[TRL_BLOCK["vllm_mode"]] = plan.vllm.value
    if plan.vllm is Vllm.COLOCATE:
        block[TRL_BLOCK["vllm_sleep"]] = plan.vllm_sleep
    if plan.vllm is Vllm.SERVER:
        notes.append("vllm_mode server: start `axolotl vllm-serve CONFIG` on other GPUs first; they are not billed")
    block[TRL_BLOCK["reward_funcs"]] = list(AXOLOTL_REWARD_FUNCS)
    notes.append(f"trl.reward_funcs: {AXOLOTL_REWARD_NOTE}")
    return block


def axolotl_schedule(plan: TrainingPlan, config: dict, notes: list[str]) -> None:
    """Axolotl refuses `warmup_ratio` with `rl: simpo` (`axolotl/utils/schemas/validation.py`: "warmup_ratio is not
    supported with the simpo trainer"): the warmup is dropped, with a note."""
    if plan.task is Task.SIMPO and config.pop("warmup_ratio", None) is not None:
        notes.append(
            "rl: simpo: Axolotl refuses warmup_ratio with the SimPO trainer — no warmup is written; set warmup_steps "
            "(a step count) for one"
        )


def axolotl_dataset(plan: TrainingPlan) -> tuple[dict, str] | None:
    """The task's `datasets` entry (without its path) and its row format; None for SFT (the chat template rows)."""
    return AXOLOTL_DATASET_TYPES.get(plan.task)


__all__ = ["AXOLOTL_RL", "axolotl_dataset", "axolotl_schedule", "axolotl_task_keys"]
