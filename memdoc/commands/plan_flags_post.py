"""The post-training plan flags (`--task` and its knobs), in their own help panel; `POST_TRAINING_OPTIONS` joins
`plan_flags.PLAN_OPTIONS`. The defaults named in the help are TRL 1.16's (`core/model/plan_post.py`)."""

from typing import Annotated, Optional

import typer

from memdoc.core.model.plan_post import Task, Vllm

POST = "Post-training (DPO, reward models, GRPO/RLOO/PPO)"

TaskOpt = Annotated[
    Optional[Task],
    typer.Option(
        "--task",
        help="What the step optimises: sft, the preference family (dpo, orpo, simpo, kto), a reward model (rm), or "
        "online RL that generates its own completions (grpo, rloo, ppo). \\[default: sft]",
        rich_help_panel=POST,
    ),
]
BetaOpt = Annotated[
    Optional[float],
    typer.Option(
        "--beta",
        help="KL/preference coefficient; with grpo/rloo, 0 loads no reference model. "
        "\\[default: the trainer's: dpo/kto 0.1, grpo 0.0, rloo/ppo 0.05]",
        rich_help_panel=POST,
    ),
]
PrecomputeRefOpt = Annotated[
    Optional[bool],
    typer.Option(
        "--precompute-ref/--no-precompute-ref",
        help="dpo/kto: reference log-probs computed once before training (precompute_ref_log_probs): no reference "
        "model during the steps. \\[default: no]",
        rich_help_panel=POST,
    ),
]
PromptLenOpt = Annotated[
    Optional[int],
    typer.Option(
        "--prompt-len",
        help="DPO family/KTO/RM: tokens of each row that are the prompt (not scored by TRL's fused LM head); "
        "TRL 1.16 has no config key for it. \\[default: none, every token scored, an upper bound]",
        rich_help_panel=POST,
    ),
]
GenerationsOpt = Annotated[
    Optional[int],
    typer.Option(
        "--generations",
        help="Online tasks: completions per prompt (num_generations). \\[default: the trainer's: grpo 8, rloo 2]",
        rich_help_panel=POST,
    ),
]
CompletionLenOpt = Annotated[
    Optional[int],
    typer.Option(
        "--completion-len",
        help="Online tasks: longest completion in tokens (max_completion_length); the trained row is --seq (the "
        "prompt) + this. \\[default: 512]",
        rich_help_panel=POST,
    ),
]
GenerationBatchOpt = Annotated[
    Optional[int],
    typer.Option(
        "--generation-batch",
        help="Online tasks: completions generated at once over all GPUs (generation_batch_size). "
        "\\[default: --batch × GPUs × --accum]",
        rich_help_panel=POST,
    ),
]
IterationsOpt = Annotated[
    Optional[int],
    typer.Option(
        "--iterations",
        help="Online tasks: optimisation passes per generated batch (num_iterations); above 1 the old policy's "
        "log-probs are kept. \\[default: 1]",
        rich_help_panel=POST,
    ),
]
VllmOpt = Annotated[
    Optional[Vllm],
    typer.Option(
        "--vllm",
        help="Online tasks: generate with transformers (none), a vLLM engine on the training GPU (colocate), or a "
        "vLLM server on other GPUs (server). \\[default: none]",
        rich_help_panel=POST,
    ),
]
VllmMemoryOpt = Annotated[
    Optional[float],
    typer.Option(
        "--vllm-memory",
        help="Colocated vLLM: the card's fraction vLLM takes (vllm_gpu_memory_utilization). \\[default: 0.3]",
        rich_help_panel=POST,
    ),
]
VllmSleepOpt = Annotated[
    Optional[bool],
    typer.Option(
        "--vllm-sleep/--no-vllm-sleep",
        help="Colocated vLLM: release its weights and KV cache while the policy trains (vllm_enable_sleep_mode). "
        "\\[default: no]",
        rich_help_panel=POST,
    ),
]

POST_TRAINING_OPTIONS = {
    "task": TaskOpt,
    "beta": BetaOpt,
    "precompute_ref": PrecomputeRefOpt,
    "generations": GenerationsOpt,
    "completion_len": CompletionLenOpt,
    "prompt_len": PromptLenOpt,
    "generation_batch": GenerationBatchOpt,
    "iterations": IterationsOpt,
    "vllm": VllmOpt,
    "vllm_memory": VllmMemoryOpt,
    "vllm_sleep": VllmSleepOpt,
}
