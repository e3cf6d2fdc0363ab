"""Context and tensor parallelism (`--cp`, `--tp`) in each trainer format, or a refusal naming the nearest one.

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

from memdoc.core.model.plan import CpImpl, Shard, TrainingPlan
from memdoc.core.trainers.base import Emitted
from memdoc.errors import PlanError


def check_parallel_format(fmt: str, plan: TrainingPlan) -> None:
    """Refuse CP/TP (and ALST's tiled MLP) a format cannot express, naming the nearest format or flag that can."""
    if plan.tiled_mlp > 1 and fmt != "axolotl":
        raise PlanError(
            f"--tiled-mlp: --format {fmt} has no key for ALST's tiled MLP (it runs through ArcticTraining or "
            "DeepSpeed's own API, deepspeed/runtime/sequence_parallel/ulysses_sp.py TiledMLP); nearest: --format "
            "axolotl (tiled_mlp, tiled_mlp_num_shards)"
        )
    if plan.cp == 1 and plan.tp == 1:
        return
    if plan.cp > 1 and plan.cp_impl is CpImpl.ULYSSES:
        raise PlanError(
            f"--cp-impl ulysses: no --format writes DeepSpeed Ulysses ({fmt} included; accelerate 1.15 runs it only "
            "from Python, TrainingArguments(parallelism_config=ParallelismConfig(sp_size=…))); nearest: --cp-impl "
            "ring with --format trl or hf and --shard fsdp2, or with --format axolotl"
        )
    if fmt == "llamafactory":
        raise PlanError(
            "--format llamafactory cannot express --cp or --tp (LLaMA-Factory 0.9.5 has no sequence_parallel_size "
            "or tensor-parallel key); nearest: --format axolotl (context_parallel_size, tensor_parallel_size) or "
            "--format trl with --shard fsdp2 (accelerate's parallelism_config)"
        )
    if fmt in ("trl", "hf") and plan.shard is not Shard.FSDP2:
        raise PlanError(
            f"--format {fmt} writes --cp/--tp as accelerate's parallelism_config, which accelerate 1.15 launches "
            "with FSDP2 only: add --shard fsdp2 (or use --format axolotl)"
        )
    if fmt == "axolotl" and plan.tp > 1 and plan.shard not in (Shard.ZERO1, Shard.ZERO2, Shard.ZERO3):
        raise PlanError(
            "--format axolotl writes --tp as tensor_parallel_size, DeepSpeed AutoTP only: add --shard zero1, zero2 "
            "or zero3, or use --format trl with --shard fsdp2"
        )


def accelerate_parallelism(plan: TrainingPlan) -> dict:
    """The accelerate config file's `parallelism_config` (keys as `accelerate launch` takes them)."""
    return {
        "parallelism_config_dp_replicate_size": 1,
        "parallelism_config_dp_shard_size": plan.dp_size,
        "parallelism_config_tp_size": plan.tp,
        "parallelism_config_cp_size": plan.cp,
        "parallelism_config_cp_backend": "torch",
    }


def add_parallel_keys(fmt: str, plan: TrainingPlan, emitted: Emitted) -> None:
    """Write the plan's CP/TP into an emitted config (after `check_parallel_format` let it through); Axolotl 0.19's
    `tiled_mlp` / `tiled_mlp_num_shards` (`utils/schemas/config.py`; `monkeypatch/tiled_mlp/patch.py` applies
    DeepSpeed's `TiledMLP` under DeepSpeed, its own copy otherwise)."""
    if plan.tiled_mlp > 1 and fmt == "axolotl":
        emitted.config["tiled_mlp"] = True
        emitted.config["tiled_mlp_num_shards"] = plan.tiled_mlp
    if plan.cp == 1 and plan.tp == 1:
        return
    if fmt in ("trl", "hf"):
        for side in emitted.side_files:
            if side.data.get("distributed_type") == "FSDP":
                side.data["parallelism_config"] = accelerate_parallelism(plan)
        emitted.notes.append(
            f"accelerate parallelism_config: dp_shard {plan.dp_size} × cp {plan.cp} × tp {plan.tp}; CP runs torch's "
            "ring attention under SDPA, TP transformers' tp_plan"
        )
        return
    if plan.cp > 1:
        emitted.config["context_parallel_size"] = plan.cp
        emitted.config["attn_implementation"] = "flash_attention_2"
        emitted.notes.append(
            "context_parallel_size runs ring-flash-attn, which needs attn_implementation: flash_attention_2 "
            "(billed as SDPA's flash kernel: the same saved tensors)"
        )
    if plan.tp > 1:
        emitted.config["tensor_parallel_size"] = plan.tp
