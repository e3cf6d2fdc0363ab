"""The post-training keys of `trl <task> --config` YAML: which TRL script runs `plan.task`, its dataset rows and the
config class's keys for the plan's post-training fields.

TRL 1.16 (`trl/cli/commands/training.py` `TrainingCommand`: `trl NAME` runs `trl/scripts/NAME.py` `make_parser`)
ships the scripts sft, dpo, kto, reward, grpo and rloo; their config classes are `SFTConfig`, `DPOConfig`,
`KTOConfig`, `RewardConfig`, `GRPOConfig` and `RLOOConfig` (`trl/trainer/*_config.py`). ORPO and SimPO live in
`trl.experimental` without a script, and TRL 1.16 has no PPO trainer: those tasks are refused with the formats
that run them.
"""

from __future__ import annotations

from memdoc.core.model.plan import TrainingPlan
from memdoc.core.model.plan_post import Task, Vllm
from memdoc.core.trainers.trl.keys import KEYS, SELF_DESCRIBING, TRL_SCRIPTS, TRL_TRAINERS
from memdoc.errors import PlanError

PAIRED_ROWS = (
    'rows {"prompt": …, "chosen": …, "rejected": …} (strings or message lists; the chat template is applied to '
    "message lists)"
)
TRL_TASK_DATASETS = {
    Task.DPO: PAIRED_ROWS,
    Task.RM: PAIRED_ROWS + '; {"chosen": …, "rejected": …} with the prompt inside each works too',
    Task.KTO: 'rows {"prompt": …, "completion": …, "label": true|false} (unpaired: label says desirable or not)',
    Task.GRPO: 'rows {"prompt": …} (a string or a message list), plus any column your reward functions read',
    Task.RLOO: 'rows {"prompt": …} (a string or a message list), plus any column your reward functions read',
}
"""The rows each TRL trainer reads (TRL docs, "Dataset formats and types": preference, unpaired preference,
prompt-only)."""

REWARD_FUNCS_PLACEHOLDER = ["think_format_reward"]
REWARD_FUNCS_NOTE = (
    "choose your reward — a name TRL's script registers (accuracy_reward, reasoning_accuracy_reward, "
    "think_format_reward, get_soft_overlong_punishment) or a dotted import path to your function "
    "(trl/scripts/grpo.py `main`), or reward_model_name_or_path for a reward model"
)

UNRUNNABLE = {
    Task.ORPO: (
        "TRL 1.16 has ORPO only in trl.experimental.orpo, with no `trl` script or config the CLI runs",
        "--format axolotl (rl: orpo) or llamafactory (stage: dpo, pref_loss: orpo)",
    ),
    Task.SIMPO: (
        "TRL 1.16 has SimPO only as trl.experimental.cpo's loss_type simpo, with no `trl` script or config the CLI "
        "runs",
        "--format axolotl (rl: simpo) or llamafactory (stage: dpo, pref_loss: simpo)",
    ),
    Task.PPO: (
        "TRL 1.16 has no PPOTrainer (removed from trl and trl.experimental)",
        "--format llamafactory (stage: ppo, with your reward model)",
    ),
}
"""Tasks `trl` cannot run, why, and the formats that can."""


def trl_script(plan: TrainingPlan) -> str:
    """The TRL script (and `trl` subcommand) that trains `plan.task`; a one-line error for the tasks TRL's CLI
    cannot run."""
    if plan.task in UNRUNNABLE:
        why, formats = UNRUNNABLE[plan.task]
        raise PlanError(f"--task {plan.task.value} --format trl: {why}", hint=f"use {formats}")
    return TRL_SCRIPTS[plan.task]


def trl_length_keys(plan: TrainingPlan, notes: list[str], seq_key: str = KEYS["seq_len"]) -> dict:
    """The sequence lengths: `max_length` (SFT, DPO, KTO, reward: prompt + completion, truncated by the trainer);
    GRPO/RLOO: `max_completion_length` (TRL 1.16's GRPOConfig/RLOOConfig have no prompt limit, so `seq_len`, the
    prompt length of the online plan, is a note)."""
    if not plan.task.is_online:
        return {seq_key: plan.seq_len}
    notes.append(
        f"prompt length {plan.seq_len}: TRL 1.16's {TRL_TRAINERS[plan.task]} has no prompt-length key and never "
        f"truncates prompts — keep your prompts within {plan.seq_len} tokens, as billed"
    )
    return {KEYS["completion_len"]: plan.completion_len}


def trl_task_keys(plan: TrainingPlan, notes: list[str]) -> dict:
    """`plan`'s post-training fields as the keys of the task's config class (TRL 1.16 `DPOConfig`, `KTOConfig`,
    `GRPOConfig`, `RLOOConfig`; `RewardConfig` has none of them). `beta` is always written, so a TRL release that
    changes its default does not change the run; KTO and reward files also carry a key only their class has
    (`SELF_DESCRIBING`)."""
    task = plan.task
    out: dict = dict(SELF_DESCRIBING.get(task, {}))
    if task.may_use_reference:
        out[KEYS["beta"]] = float(plan.effective_beta)
    if task in (Task.DPO, Task.KTO):
        out[KEYS["precompute_ref"]] = plan.precompute_ref
    if task.is_online:
        out[KEYS["num_generations"]] = plan.num_generations
        if plan.generation_batch is not None:
            out[KEYS["generation_batch"]] = plan.generation_batch
        out[KEYS["num_iterations"]] = plan.num_iterations
        out.update(_vllm_keys(plan, notes))
    return out


def _vllm_keys(plan: TrainingPlan, notes: list[str]) -> dict:
    """`use_vllm`, `vllm_mode`, `vllm_gpu_memory_utilization` (colocate only: a server holds its own GPUs) and
    `vllm_enable_sleep_mode` of `GRPOConfig`/`RLOOConfig` (1.16)."""
    if plan.vllm is Vllm.NONE:
        return {KEYS["vllm"]: False}
    out: dict = {KEYS["vllm"]: True, KEYS["vllm_mode"]: plan.vllm.value}
    if plan.vllm is Vllm.COLOCATE:
        out[KEYS["vllm_memory"]] = float(plan.vllm_memory)
        out[KEYS["vllm_sleep"]] = plan.vllm_sleep
        notes.append("use_vllm: pip install vllm (TRL's vllm extra); colocated vLLM runs in each training process")
    else:
        notes.append(
            "vllm_mode server: start `trl vllm-serve --model MODEL` on other GPUs first (vllm_server_host/port "
            "default to 0.0.0.0:8000); those GPUs are not billed here"
        )
    return out


__all__ = [
    "REWARD_FUNCS_NOTE",
    "REWARD_FUNCS_PLACEHOLDER",
    "TRL_SCRIPTS",
    "TRL_TASK_DATASETS",
    "TRL_TRAINERS",
    "UNRUNNABLE",
    "trl_length_keys",
    "trl_script",
    "trl_task_keys",
]
