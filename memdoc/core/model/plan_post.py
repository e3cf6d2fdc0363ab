"""The plan fields of post-training: preference optimisation (DPO and its family), reward modelling and online
RL (GRPO, RLOO, PPO), with the trainers' defaults as TRL 1.16 ships them.

`PostTrainingFields` is a base of `memdoc.core.model.plan.TrainingPlan`: its fields are plan fields like any
other (flags, recipe keys, `--json`). `check_post_training_fields` checks their ranges (on every plan);
`check_post_training_request` the rules across fields that TRL enforces (on the plan as requested only: plans
derived inside memdoc, such as the states' memo key or a ladder rung, may change the batch).

Defaults, read from TRL 1.16 (`trl/trainer/*_config.py`):
* `DPOConfig.beta` 0.1, `KTOConfig.beta` 0.1, `GRPOConfig.beta` 0.0 (no reference model is loaded), `RLOOConfig.beta`
  0.05; `precompute_ref_log_probs` False;
* `GRPOConfig`/`RLOOConfig`: `num_generations` 8 / 2, `max_completion_length` 512, `generation_batch_size` None (the
  effective batch: per-device batch × processes × `steps_per_generation`, which defaults to the accumulation
  steps), `num_iterations` 1, `use_vllm` False, `vllm_mode` "colocate", `vllm_gpu_memory_utilization` 0.3,
  `vllm_enable_sleep_mode` False.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from memdoc.errors import PlanError


class Task(str, Enum):
    """What one training step optimises."""

    SFT = "sft"
    """Supervised fine-tuning: one forward and backward of the policy on the batch."""
    DPO = "dpo"
    """Direct preference optimisation (TRL `DPOTrainer`): chosen and rejected rows in one concatenated forward, and
    a frozen reference model's log-probabilities."""
    ORPO = "orpo"
    """Odds-ratio preference optimisation (TRL `experimental.orpo`): chosen and rejected rows, no reference model."""
    SIMPO = "simpo"
    """SimPO (TRL `experimental.cpo` with `loss_type="simpo"`): chosen and rejected rows, no reference model."""
    KTO = "kto"
    """KTO (TRL `KTOTrainer`): unpaired desirable/undesirable rows plus the mismatched KL rows, a reference model."""
    RM = "rm"
    """Reward modelling (TRL `RewardTrainer`): a scalar head scores chosen and rejected rows."""
    GRPO = "grpo"
    """Group-relative policy optimisation (TRL `GRPOTrainer`): generation of `num_generations` completions per
    prompt, then the policy's forward and backward on prompt + completion."""
    RLOO = "rloo"
    """REINFORCE leave-one-out (TRL `RLOOTrainer`): GRPO's generation and step, with RLOO's baseline."""
    PPO = "ppo"
    """PPO with four models: policy, reference, reward and value (OpenRLHF, LLaMA-Factory `stage: ppo`)."""

    @property
    def is_online(self) -> bool:
        """The step generates its own completions (GRPO, RLOO, PPO)."""
        return self in (Task.GRPO, Task.RLOO, Task.PPO)

    @property
    def is_paired(self) -> bool:
        """Chosen and rejected rows go through one concatenated forward: twice the rows of the batch."""
        return self in (Task.DPO, Task.ORPO, Task.SIMPO, Task.RM)

    @property
    def default_beta(self) -> float | None:
        """The trainer's default KL/temperature coefficient; None where the task has no reference term."""
        return {Task.DPO: 0.1, Task.KTO: 0.1, Task.GRPO: 0.0, Task.RLOO: 0.05, Task.PPO: 0.05}.get(self)

    @property
    def may_use_reference(self) -> bool:
        """The task's loss compares with a frozen reference policy (when `beta` > 0 for the online tasks)."""
        return self in (Task.DPO, Task.KTO, Task.GRPO, Task.RLOO, Task.PPO)


class Vllm(str, Enum):
    """How an online task generates: transformers' `generate`, or vLLM (TRL `use_vllm` + `vllm_mode`)."""

    NONE = "none"
    """`model.generate` on the policy itself, with a KV cache of the generation batch."""
    COLOCATE = "colocate"
    """A vLLM engine in the training process on the same GPU: it holds `vllm_memory` of the card."""
    SERVER = "server"
    """A vLLM server on other GPUs (`trl vllm-serve`): the training GPUs hold no generation memory."""


@dataclass(frozen=True, kw_only=True)
class PostTrainingFields:
    """The post-training knobs of `TrainingPlan` (ignored with `task` sft)."""

    task: Task = Task.SFT
    """What the step optimises (see `Task`)."""
    beta: float | None = None
    """KL / preference coefficient; None: the trainer's default for the task (`Task.default_beta`). With GRPO and
    RLOO, 0 means no reference model is loaded."""
    precompute_ref: bool = False
    """DPO/KTO: the reference log-probabilities are computed once before training (`precompute_ref_log_probs`), so
    no reference model is held or run during the steps."""
    prompt_len: int | None = None
    """DPO family/KTO/RM (and SFT): tokens of each row that are the prompt, not scored; None: every token scored (an
    upper bound). TRL 1.16 masks the prompt's labels (`DPOTrainer._compute_loss`: `input_ids.masked_fill(
    completion_mask == 0, -100)`) and its fused LM head scores only the labelled positions on the GPU
    (`add_fused_lm_head`, `hidden_states[mask]`); its configs have no key for the prompt's length (`max_prompt_length`
    is gone), so it is read from no config. For the online tasks the prompt is `seq_len` and this is ignored."""
    num_generations: int | None = None
    """Online tasks: completions sampled per prompt (`num_generations`); None: the trainer's default
    (`default_generations`), resolved when the plan is built."""
    completion_len: int = 512
    """Online tasks: the longest completion in tokens (`max_completion_length`); the trained row is `seq_len`
    (the prompt) + this."""
    generation_batch: int | None = None
    """Online tasks: completions generated at once over all processes (`generation_batch_size`); None: TRL's
    default, the effective batch (micro-batch × data-parallel GPUs × accumulation steps)."""
    num_iterations: int = 1
    """Online tasks: optimisation passes over each generated batch (`num_iterations`); above 1 the old policy's
    log-probabilities are computed and kept."""
    vllm: Vllm = Vllm.NONE
    """Online tasks: how completions are generated (see `Vllm`)."""
    vllm_memory: float = 0.3
    """Colocated vLLM: the fraction of the card's memory vLLM takes (`vllm_gpu_memory_utilization`)."""
    vllm_sleep: bool = False
    """Colocated vLLM: vLLM releases its weights and KV cache while the policy trains (`vllm_enable_sleep_mode`)."""

    @property
    def effective_beta(self) -> float | None:
        """`beta` as given, else the task's default."""
        return self.task.default_beta if self.beta is None else self.beta


DEFAULT_GENERATIONS = {Task.RLOO: 2, Task.PPO: 1}
"""Completions per prompt when not given: `RLOOConfig.num_generations` 2 (TRL 1.16 `rloo_config.py`); PPO samples one
response per prompt; every other task `GRPOConfig`'s 8 (`grpo_config.py`)."""


def default_generations(task: Task) -> int:
    """The trainer's default `num_generations` for `task` (`DEFAULT_GENERATIONS`, else GRPO's 8)."""
    return DEFAULT_GENERATIONS.get(task, 8)


POST_TRAINING_FLOATS = ("beta", "vllm_memory")
"""Post-training fields that are real numbers."""
POST_TRAINING_BOOLS = ("precompute_ref", "vllm_sleep")
"""Post-training fields that are true or false."""
POST_TRAINING_COUNTS = ("num_generations", "completion_len", "generation_batch", "num_iterations")
"""Post-training fields that are positive integers (`generation_batch` may also be None)."""


def check_post_training_fields(plan) -> None:
    """The post-training fields' own ranges (`plan`: a `TrainingPlan`, which imports this module)."""
    if plan.beta is not None and (isinstance(plan.beta, bool) or not isinstance(plan.beta, (int, float))):
        raise PlanError(f"--beta must be a number, got {plan.beta!r}")
    if plan.beta is not None and plan.beta < 0:
        raise PlanError(f"--beta must be 0 or more, got {plan.beta!r}")
    memory = plan.vllm_memory
    if isinstance(memory, bool) or not isinstance(memory, (int, float)) or not 0 < memory <= 1:
        raise PlanError(f"--vllm-memory must be a fraction of the card in (0, 1], got {memory!r}")


def check_post_training_request(plan) -> None:
    """The rules across the post-training fields that TRL's configs enforce at construction (1.16)."""
    if plan.task.is_online and plan.task is not Task.PPO and plan.num_generations < 2:
        raise PlanError(
            f"--generations must be at least 2 with --task {plan.task.value}: the advantage compares completions "
            "of one prompt (TRL's GRPOConfig/RLOOConfig refuse fewer)"
        )
    if plan.precompute_ref and plan.task not in (Task.DPO, Task.KTO):
        raise PlanError("--precompute-ref applies to --task dpo and kto (TRL's precompute_ref_log_probs)")
    if plan.vllm is not Vllm.NONE and not plan.task.is_online:
        raise PlanError(f"--vllm generates completions: it applies to --task grpo, rloo or ppo, not {plan.task.value}")
    if plan.prompt_len is not None and not plan.task.is_online and plan.prompt_len >= plan.seq_len:
        raise PlanError(
            f"--prompt-len {plan.prompt_len} must be shorter than the row (--seq {plan.seq_len}): the rest is the "
            "completion that is scored"
        )
    _check_generation_batch(plan)


def _check_generation_batch(plan) -> None:
    """TRL's `GRPOConfig.__post_init__` (1.16): a given generation batch is a whole number of global batches
    (per-device batch × processes), and the generation batch holds whole groups of `num_generations`."""
    if not plan.task.is_online or plan.task is Task.PPO:
        return
    global_batch = plan.micro_batch * plan.dp_size
    if plan.generation_batch is not None and plan.generation_batch % global_batch:
        raise PlanError(
            f"--generation-batch {plan.generation_batch} must be a multiple of the global batch {global_batch} "
            "(--batch × data-parallel GPUs), as TRL requires"
        )
    generation = plan.generation_batch or global_batch * plan.grad_accum
    if generation % plan.num_generations:
        raise PlanError(
            f"the generation batch ({generation} completions: --batch × data-parallel GPUs × --accum, or "
            f"--generation-batch) must be a multiple of --generations {plan.num_generations}, as TRL requires",
            hint=_generation_hint(plan, generation),
        )


def _generation_hint(plan, generation: int) -> str:
    """A fix that satisfies the rule: as many accumulation steps as generations, or a divisor (≥ 2) of the
    generation batch as the number of generations."""
    fix = f"e.g. --accum {plan.num_generations} (TRL generates once per optimizer step)"
    divisors = [n for n in range(min(plan.num_generations, generation), 1, -1) if generation % n == 0]
    return fix + (f", or --generations {divisors[0]}" if divisors else "")
