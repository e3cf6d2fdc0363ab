"""Which engine runs a plan, and the dtype of every model state under it (per parameter, before sharding).

Sources (installed versions: deepspeed 0.19.8, accelerate 1.15, torch 2.13):
* DeepSpeed ZeRO-1/2/3 with `bf16.enabled` / `fp16.enabled`: the module is cast to the 16-bit dtype
  (`deepspeed/runtime/engine.py` `DeepSpeedEngine.get_data_types`: the model dtype; `grad_accum_dtype`
  defaults to it, so `_do_optimizer_sanity_check` picks the ZeRO optimizer, not `BF16_Optimizer`). The
  ZeRO optimizer clones its partition into fp32 master weights (`stage_1_and_2.py`
  `DeepSpeedZeroOptimizer.__init__`: `weights_partition = ….clone().to(dtype=self.master_weights_and_grads_dtype)`;
  `stage3.py` `_create_fp32_partitions`), the optimizer's states follow the master (fp32 `exp_avg`,
  `exp_avg_sq`), gradient partitions stay 16-bit, and each step builds an fp32 gradient of the partition
  (`stage_1_and_2.py` `step`: `single_grad_partition = flat_grad_partition.to(fp32)`; `stage3.py`
  `_prepare_fp32_grad_for_sub_group`, one `sub_group_size` group at a time). Without bf16/fp16 everything is
  fp32 and the master is still a separate clone. `bf16_master_weights_and_grads` + `bf16_optimizer_states`
  (`deepspeed/runtime/precision_config.py`, ZeRO 1-3 only: `config.py` `_do_error_check`) make the master,
  its gradient and the states bf16.
* accelerate FSDP1 (`accelerator.py` `Accelerator.prepare_model`, the FSDP branch) and FSDP2
  (`utils/fsdp_utils.py` `fsdp2_prepare_model`): with `mixed_precision` other than "no", every trainable
  parameter is upcast to fp32 and sharded as such (no separate master); gradients are sharded fp32;
  `MixedPrecision` / `MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=bf16)` (accelerate's
  `FullyShardedDataParallelPlugin.set_mixed_precision`) gathers and reduces in bf16. With `mixed_precision: no`
  on a bf16 model (memdoc's `--master-weights bf16`) everything stays bf16.
* DDP (and one GPU): what `--precision` says (`Precision`): pure 16-bit, or AMP's fp32 master.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from memdoc.core.model.plan import MasterWeights, Offload, Precision, Shard, TrainingPlan


class Engine(str, Enum):
    """The engine that shards (or not) the model states."""

    DDP = "ddp"
    """torch DDP, or one GPU: every GPU holds every state."""
    ZERO1 = "zero1"
    """DeepSpeed ZeRO stage 1 (`stage_1_and_2.py`, `partition_gradients=False`)."""
    ZERO2 = "zero2"
    """DeepSpeed ZeRO stage 2 (`stage_1_and_2.py`)."""
    ZERO3 = "zero3"
    """DeepSpeed ZeRO stage 3 (`stage3.py`, `partition_parameters.py`)."""
    FSDP1 = "fsdp"
    """FSDP1 `FullyShardedDataParallel` through accelerate (flat parameters)."""
    FSDP2 = "fsdp2"
    """FSDP2 `fully_shard` through accelerate (per-parameter DTensors)."""

    @property
    def is_deepspeed(self) -> bool:
        return self in (Engine.ZERO1, Engine.ZERO2, Engine.ZERO3)

    @property
    def is_fsdp(self) -> bool:
        return self in (Engine.FSDP1, Engine.FSDP2)


@dataclass(frozen=True, kw_only=True)
class EngineLayout:
    """The dtype (in bits) of each trainable parameter's states under the plan's engine, and what it shards.

    Full fine-tuning bytes per parameter, unsharded: (weight_bits + grad_bits + master_bits) / 8 + the
    optimizer's states at `state_bits` (AdamW: 2 × state_bits / 8), + `fp32_grad_bits` / 8 in the step.
    """

    engine: Engine
    weight_bits: int
    """The working weights the forward uses (DeepSpeed: the 16-bit module; FSDP: the sharded flat parameter)."""
    grad_bits: int
    """Gradients as the engine keeps them (DeepSpeed: 16-bit partitions; FSDP: the sharded parameter's dtype)."""
    master_bits: int
    """A separate master copy the optimizer steps (0: the working weights are stepped)."""
    state_bits: int
    """Optimizer states (AdamW `exp_avg`, `exp_avg_sq`)."""
    step_grad_bits: int
    """DeepSpeed's gradient cast to the master dtype for the step (0: none)."""
    gather_bits: int
    """All-gathered (unsharded) weights in flight (ZeRO-3: 16-bit; FSDP: `param_dtype`)."""
    reduce_bits: int
    """Unsharded gradients before their reduce-scatter (DeepSpeed: 16-bit; FSDP: `reduce_dtype`)."""
    shards_weights: bool
    shards_gradients: bool
    shards_optimizer: bool
    offload_optimizer: bool
    offload_params: bool
    risk: str | None = None
    """A numerical risk of the layout, said in the notes (16-bit master weights)."""

    def full_bytes_per_param(self) -> float:
        """Model-state bytes per parameter for full fine-tuning with AdamW, unsharded (no step buffers)."""
        return (self.weight_bits + self.grad_bits + self.master_bits + 2 * self.state_bits) / 8


BF16_RISK = (
    "bf16 master weights and optimizer states (--master-weights bf16): updates smaller than bf16's 8-bit "
    "mantissa are lost, a numerical risk over long runs; fp32 master weights are the engines' default"
)


def plan_engine(plan: TrainingPlan) -> Engine:
    """The engine of a plan: `--shard` names it; offload without sharding runs as DeepSpeed ZeRO-Offload
    (ZeRO-2 on one GPU, ZeRO-1 on several: `core/trainers/deepspeed/write.py` `_zero_stage`)."""
    by_shard = {
        Shard.ZERO1: Engine.ZERO1,
        Shard.ZERO2: Engine.ZERO2,
        Shard.ZERO3: Engine.ZERO3,
        Shard.FSDP: Engine.FSDP1,
        Shard.FSDP2: Engine.FSDP2,
    }
    if plan.shard in by_shard:
        return by_shard[plan.shard]
    if plan.offload is not Offload.NONE:
        return Engine.ZERO1 if plan.world_size > 1 else Engine.ZERO2
    return Engine.DDP


def engine_layout(plan: TrainingPlan) -> EngineLayout:
    """The plan's `EngineLayout` (module docstring for the rules and their sources)."""
    engine = plan_engine(plan)
    flags = {
        "shards_weights": engine in (Engine.ZERO3, Engine.FSDP1, Engine.FSDP2),
        # ZeRO-1 too: 0.19.8 reduces its gradients through the buckets into 16-bit partitions
        # (`averaged_gradients`, 2P/N after backward on the CPU run of tests/fixtures/engines, eng-verify)
        "shards_gradients": engine is not Engine.DDP,
        "shards_optimizer": engine is not Engine.DDP,
        "offload_optimizer": plan.offload is not Offload.NONE,
        "offload_params": plan.offload is Offload.OPTIMIZER_PARAMS,
    }
    p = plan.precision
    sixteen = p is not Precision.FP32
    bf16_master = plan.master_weights is MasterWeights.BF16
    risk = BF16_RISK if bf16_master else None
    if engine is Engine.DDP:
        bits = p.param_bits
        return EngineLayout(
            engine=engine,
            weight_bits=bits,
            grad_bits=bits,
            master_bits=0,
            state_bits=bits,
            step_grad_bits=0,
            gather_bits=p.compute_bits,
            reduce_bits=bits,
            **flags,
        )
    if engine.is_deepspeed:
        work = 16 if sixteen else 32
        master = 16 if bf16_master else 32
        return EngineLayout(
            engine=engine,
            weight_bits=work,
            grad_bits=work,
            master_bits=master,
            state_bits=master,
            step_grad_bits=master,
            gather_bits=work,
            reduce_bits=work,
            risk=risk,
            **flags,
        )
    flat = 16 if bf16_master else 32
    return EngineLayout(
        engine=engine,
        weight_bits=flat,
        grad_bits=flat,
        master_bits=0,
        state_bits=flat,
        step_grad_bits=0,
        gather_bits=16 if sixteen else 32,
        reduce_bits=16 if sixteen else 32,
        risk=risk,
        **flags,
    )
