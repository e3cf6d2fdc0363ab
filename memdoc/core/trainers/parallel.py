"""Context and tensor parallelism (`--cp`, `--tp`) in each trainer format, or a refusal naming the nearest one: the
refusals every format shares; each format's own answer is its folder's `facts.py` (`Format.check_parallel`).

* TRL / HF: accelerate's `parallelism_config` in the accelerate config file (accelerate 1.15
  `commands/launch.py` copies the file's `parallelism_config` keys onto the `--parallelism_config_*` arguments;
  `utils/launch.py` `prepare_extend_env_parallelism_config` hands them to `ParallelismConfig.__post_init__`
  through `PARALLELISM_CONFIG_*`). `_validate_launch_command` refuses a parallelism config without FSDP2, so
  the plan needs `--shard fsdp2`. CP there is torch's ring attention (`cp_backend: torch`); accelerate runs
  DeepSpeed Ulysses (`sp_size`, `sp_backend: deepspeed`) only from Python (`TrainingArguments.parallelism_config`),
  which a YAML file cannot build.
* Axolotl 0.19: `context_parallel_size` (`sequence_parallel_degree` is its deprecated name:
  `utils/schemas/validation.py` `check_context_parallel_size`) runs ring-flash-attn and requires
  `attn_implementation: flash_attention_2`; `tensor_parallel_size` is DeepSpeed AutoTP (`utils/schemas/config.py`:
  "Only supported with DeepSpeed AutoTP"), so it needs a ZeRO `--shard`.
* ALST tiled MLP (`--tiled-mlp`): Axolotl only (`tiled_mlp`); TRL, HF and LLaMA-Factory have no key.
* LLaMA-Factory 0.9.5: its training arguments have no sequence- or tensor-parallel key (`llamafactory/hparams`;
  Ulysses lives in its separate v1 trainer, `v1/plugins/model_plugins/parallelization`).
"""

from __future__ import annotations

from memdoc.core.model.plan import CpImpl, TrainingPlan
from memdoc.errors import PlanError


def refuse_tiled_mlp(fmt: str, plan: TrainingPlan) -> None:
    """`--tiled-mlp` for a format without a key for ALST's tiled MLP: refused, naming Axolotl's."""
    if plan.tiled_mlp > 1:
        raise PlanError(
            f"--tiled-mlp: --format {fmt} has no key for ALST's tiled MLP (it runs through ArcticTraining or "
            "DeepSpeed's own API, deepspeed/runtime/sequence_parallel/ulysses_sp.py TiledMLP); nearest: --format "
            "axolotl (tiled_mlp, tiled_mlp_num_shards)"
        )


def parallel_asked(fmt: str, plan: TrainingPlan) -> bool:
    """Does the plan ask for CP or TP? Ulysses CP is refused for every format (no YAML key builds it)."""
    if plan.cp == 1 and plan.tp == 1:
        return False
    if plan.cp > 1 and plan.cp_impl is CpImpl.ULYSSES:
        raise PlanError(
            f"--cp-impl ulysses: no --format writes DeepSpeed Ulysses ({fmt} included; accelerate 1.15 runs it only "
            "from Python, TrainingArguments(parallelism_config=ParallelismConfig(sp_size=…))); nearest: --cp-impl "
            "ring with --format trl or hf and --shard fsdp2, or with --format axolotl"
        )
    return True


__all__ = ["parallel_asked", "refuse_tiled_mlp"]
