"""The training plan: every knob that changes the memory of one training step.

`TrainingPlan` is frozen and validated on construction; its fields are the contract shared by
`bill`, `diagnose`, `prescribe` and `emit`. Enum values are the exact strings the CLI accepts.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import Enum

from memdoc.core.model.network import AUTO as AUTO_NETWORK
from memdoc.core.model.network import parse_interconnect
from memdoc.core.model.plan_enums import (
    Allocator,
    Attention,
    Checkpointing,
    CpImpl,
    Loss,
    MasterWeights,
    Method,
    Offload,
    OffloadTarget,
    Optimizer,
    Precision,
    Shard,
)
from memdoc.core.model.plan_post import (
    PostTrainingFields,
    Task,
    Vllm,
    check_post_training_fields,
    default_generations,
)
from memdoc.core.model.plan_values import ENGINE_COUNTS, FLAG_ALIASES, coerce, flag_for
from memdoc.core.model.plan_vision import VisionFields, check_vision_fields
from memdoc.core.model.ranges import check_bound, check_world
from memdoc.core.model.stack import MoeExperts
from memdoc.errors import PlanError

ALL_LINEAR = "all-linear"
"""The LoRA target that adapts every decoder linear (peft's "all-linear")."""
DEFAULT_TARGETS = ("q_proj", "v_proj")
"""The plan's default LoRA targets: peft's default for Llama-style attention."""

__all__ = [
    "Allocator",
    "Attention",
    "Checkpointing",
    "CpImpl",
    "Loss",
    "MasterWeights",
    "Method",
    "Offload",
    "OffloadTarget",
    "Optimizer",
    "Precision",
    "Shard",
    "Task",
    "Vllm",
    "ALL_LINEAR",
    "DEFAULT_TARGETS",
    "MAX_PLAN_VALUE",
    "MoeExperts",
    "TrainingPlan",
    "flag_for",
    "parse_plan",
]

MAX_PLAN_VALUE = 2**31 - 1
"""Largest batch, sequence, accumulation, GPU/node count or LoRA rank accepted (int32 range)."""


@dataclass(frozen=True, kw_only=True)
class TrainingPlan(PostTrainingFields, VisionFields):
    """One training step's setup. All sizes are per GPU. The post-training fields (`task`, `beta`, the generation
    knobs) are inherited from `plan_post.PostTrainingFields`, the vision fields (`images_per_sample`, `image_size`,
    `video_frames`, the pixel bounds) from `plan_vision.VisionFields`."""

    method: Method = Method.FULL
    """What is trained: full, lora or qlora."""
    precision: Precision = Precision.BF16
    """Storage and compute dtypes (see `Precision`)."""
    optimizer: Optimizer = Optimizer.ADAMW_FUSED
    """Optimizer (see `Optimizer`)."""
    micro_batch: int = 1
    """Sequences per GPU per forward pass."""
    seq_len: int = 2048
    """Tokens per sequence."""
    grad_accum: int = 1
    """Micro-batches accumulated per optimizer step. From 2 on, micro-batches 2..N run forward and
    backward with the accumulated gradients resident (a later micro-batch's peak = the first's + gradients)."""
    checkpointing: Checkpointing = Checkpointing.NONE
    """Activation checkpointing mode."""
    checkpoint_every: int = 1
    """With full checkpointing, checkpoint every Nth decoder layer only (layers 0, N, 2N, …); the others
    keep all their activations (partial checkpointing: less recompute, more memory). Ignored by the
    other checkpointing modes (`plan_checks.check_requested_plan` refuses it without full checkpointing)."""
    attention: Attention = Attention.SDPA
    """Attention kernel."""
    loss: Loss = Loss.HF
    """LM head + cross-entropy implementation."""
    lora_rank: int = 16
    """LoRA rank r (lora/qlora only)."""
    lora_alpha: int | None = None
    """LoRA alpha; None means 2 × rank (memory-neutral, used by emit)."""
    lora_targets: tuple[str, ...] = DEFAULT_TARGETS
    """Module names that get adapters, or ('all-linear',)."""
    lora_dropout: float = 0.0
    """LoRA dropout probability. Default 0.0, peft's `LoraConfig` default (and LLaMA-Factory's);
    TRL's and Axolotl's examples use 0.05. Dropout > 0 keeps an extra fp32 copy of each adapted
    input per adapter (see `activations.adapters.lora_saved`); emit writes this value."""
    kbit_upcast: bool = False
    """QLoRA only: the non-quantised parameters (embeddings, LM head, norms, biases, anything
    bitsandbytes left 16-bit) are upcast to fp32, as peft's `prepare_model_for_kbit_training` does
    (`core/billing/kbit.py` bills the fp32 copies and the fp32 tensors they make between the 4-bit matmuls).
    Default False: what TRL's SFTTrainer (≥ 0.26), Axolotl (casts back to the compute dtype) and
    LLaMA-Factory (`upcast_layernorm: false`) run; True is peft's QLoRA recipe (the HF-format note).
    Ignored by the other methods (`plan_checks.check_requested_plan` refuses it without qlora)."""
    shard: Shard = Shard.NONE
    """Sharding of model states over the data-parallel GPUs."""
    gpus_per_node: int = 1
    """GPUs per node."""
    nodes: int = 1
    """Nodes."""
    offload: Offload = Offload.NONE
    """What is offloaded off the GPU."""
    offload_to: OffloadTarget = OffloadTarget.CPU
    """Where offloaded states go."""
    allow_long: bool = False
    """Allow seq_len beyond the model's max_position_embeddings."""
    allocator: Allocator = Allocator.DEFAULT
    """CUDA caching-allocator mode (reserved memory and fragmentation)."""
    moe_experts: MoeExperts = MoeExperts.FUSED
    """MoE routed experts: fused 3-D parameters (transformers 5) or `nn.Linear`s (4.x, quantised by QLoRA)."""
    master_weights: MasterWeights = MasterWeights.AUTO
    """Master weights' and optimizer states' dtype under DeepSpeed/FSDP (see `MasterWeights`)."""
    reduce_bucket_size: int | None = None
    """DeepSpeed `reduce_bucket_size` (elements); None: "auto", which HF fills with hidden² (memdoc's ds_config)."""
    allgather_bucket_size: int = 500_000_000
    """DeepSpeed `allgather_bucket_size` (elements; DeepSpeedZeroConfig's default 5e8)."""
    stage3_prefetch_bucket_size: int | None = None
    """DeepSpeed ZeRO-3 prefetch bucket (elements); None: "auto", 0.9 × hidden² (HF)."""
    stage3_param_persistence_threshold: int | None = None
    """ZeRO-3: parameters of at most this many elements stay unpartitioned; None: "auto", 10 × hidden (HF)."""
    stage3_max_live_parameters: int = 1_000_000_000
    """ZeRO-3: gathered parameters kept alive at most (elements; DeepSpeed's default 1e9)."""
    sub_group_size: int = 1_000_000_000
    """ZeRO-3 optimizer-step sub-group (elements; DeepSpeed's default 1e9): its fp32 gradient is a step buffer."""
    overlap_comm: bool = True
    """DeepSpeed `overlap_comm` (memdoc's ds_config: true): ZeRO-1/2 keep two reduce buckets instead of one."""
    contiguous_gradients: bool = True
    """DeepSpeed `contiguous_gradients` (default true): gradients are reduced through the reduce bucket."""
    interconnect: str = AUTO_NETWORK
    """The network between nodes, `[N×]KIND` (`memdoc/core/model/network.py`: ib-ndr-400, roce-100, eth-25, …;
    N NICs per node); "auto" picks it from the GPU. Only step time reads it, and only with more than one node."""
    eval_samples: int = 0
    """Samples per evaluation; 0: no evaluation (HF `TrainingArguments.eval_strategy` defaults to "no")."""
    eval_batch: int = 8
    """Sequences per GPU per evaluation step (`per_device_eval_batch_size`, default 8 in transformers 5.24)."""
    eval_accumulation_steps: int | None = None
    """Evaluation steps whose gathered logits stay on the GPU before they move to the host (HF's
    `eval_accumulation_steps`; None, its default: all of them, until the evaluation ends)."""
    eval_keeps_logits: bool = False
    """The evaluation keeps the logits (a `compute_metrics` without `preprocess_logits_for_metrics`); without
    `compute_metrics`, HF's `Trainer.evaluate` passes `prediction_loss_only=True` and keeps none."""
    save_gather: bool | None = None
    """The save gathers the full model on rank 0: ZeRO-3's `stage3_gather_16bit_weights_on_model_save`, FSDP's
    `FULL_STATE_DICT` (False: `SHARDED_STATE_DICT`). None: what memdoc emits (ZeRO-3 True, FSDP False)."""
    save_only_model: bool = False
    """Checkpoints save the model only, not the optimizer states (HF's `save_only_model`)."""
    low_mem_load: bool = True
    """ZeRO-3: the model is built under `deepspeed.zero.Init` (transformers does, when the TrainingArguments
    naming the ZeRO-3 config exist before `from_pretrained`); FSDP: `cpu_ram_efficient_loading`."""
    activation_offload: bool = False
    """With full checkpointing, the checkpointed layers' inputs live in pinned host memory, not on the GPU:
    transformers 5.24 `activation_checkpointing_kwargs: {offload: true}` wraps each layer's `checkpoint` in
    `torch.autograd.graph.save_on_cpu(pin_memory=True)` (`modeling_utils.py`
    `PreTrainedModel._activation_checkpointing_enable`); a copy to the host in forward and back in backward,
    both on the compute stream (`core/billing/activations/offload.py`)."""
    cp: int = 1
    """Context-parallel degree: each sequence is split over `cp` GPUs, each holding seq/cp of its activations
    (`--cp-impl`; `core/billing/parallel.py`). The GPUs of one sequence are not data-parallel: the data-parallel
    degree is world / (cp × tp), and the engines shard the model states over world / tp (accelerate's
    `dp_shard_cp` mesh, DeepSpeed's `seq_data_parallel_group`)."""
    cp_impl: CpImpl = CpImpl.ULYSSES
    """How the split sequence meets in attention (see `CpImpl`); ignored with cp = 1."""
    tp: int = 1
    """Tensor-parallel degree inside a node: each decoder linear is split over `tp` GPUs as transformers'
    `tp_plan` splits it (q/k/v, gate/up column-wise, o/down row-wise, the LM head column-wise)."""
    packing: bool = False
    """Samples packed into rows of `seq_len` tokens with no padding (TRL `packing` / `padding_free`, Axolotl
    `sample_packing`, LLaMA-Factory `neat_packing`): position_ids restart per document and flash-attention's varlen
    kernel attends within each document (`cu_seqlens`). Memory per row is the plan's (every token real); the
    attention costs Σ dᵢ² per row, not seq² (`core/billing/steptime.py`, `document_tokens`)."""
    document_tokens: int | None = None
    """With `packing`: the documents' length-weighted mean length Σdᵢ²/Σdᵢ in tokens (`--dataset` gives it), so a
    packed row's attention is seq × this; None: one document per row assumed (attention as unpacked, an upper
    bound)."""
    tiled_mlp: int = 0
    """ALST's tiled MLP: each decoder MLP runs over this many sequence shards (0 or 1: off). DeepSpeed 0.19.8
    `runtime/sequence_parallel/ulysses_sp.py` `TiledMLP.forward` saves only the MLP's input and runs the shards
    under `no_grad`; its `backward` recomputes one shard at a time, so the MLP's intermediates on the GPU are one
    shard's, at the cost of one more MLP forward (`core/billing/activations/mlp.py`)."""

    def __post_init__(self) -> None:
        if self.num_generations is None:  # the task's trainer default (a frozen dataclass: set once, here)
            object.__setattr__(self, "num_generations", default_generations(self.task))
        for name in _POSITIVE:
            value = getattr(self, name)
            if value is None and name in _MAY_BE_NONE:
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise PlanError(f"{flag_for(name)} must be a positive integer, got {value!r}")
            check_bound(flag_for(name), name, value)
        check_world(self.gpus_per_node, self.nodes)
        if (
            not isinstance(self.lora_dropout, (int, float))
            or isinstance(self.lora_dropout, bool)
            or not 0 <= self.lora_dropout < 1
        ):
            raise PlanError(f"--lora-dropout must be a probability in [0, 1), got {self.lora_dropout!r}")
        if self.lora_alpha is not None and self.lora_alpha < 1:
            raise PlanError(f"--lora-alpha must be a positive integer, got {self.lora_alpha!r}")
        if not self.lora_targets or any(not t for t in self.lora_targets):
            raise PlanError("--lora-targets must name at least one module (e.g. q_proj,v_proj or all-linear)")
        if not isinstance(self.eval_samples, int) or isinstance(self.eval_samples, bool) or self.eval_samples < 0:
            raise PlanError(
                f"--eval-samples must be 0 (no evaluation) or a positive integer, got {self.eval_samples!r}"
            )
        check_bound("--eval-samples", "eval_samples", self.eval_samples)
        for name in ("eval_keeps_logits", "save_only_model", "low_mem_load", "save_gather", "activation_offload"):
            if not isinstance(getattr(self, name), bool) and not (name == "save_gather" and self.save_gather is None):
                raise PlanError(f"{flag_for(name)} must be true or false, got {getattr(self, name)!r}")
        if not isinstance(self.tiled_mlp, int) or isinstance(self.tiled_mlp, bool) or self.tiled_mlp < 0:
            raise PlanError(f"--tiled-mlp must be 0 (off) or a number of shards, got {self.tiled_mlp!r}")
        check_bound("--tiled-mlp", "tiled_mlp", self.tiled_mlp)
        for name in ("kbit_upcast", "packing"):
            if not isinstance(getattr(self, name), bool):
                raise PlanError(f"{flag_for(name)} must be true or false, got {getattr(self, name)!r}")
        if self.method is Method.QLORA and self.precision is Precision.FP32:
            raise PlanError("--precision fp32 with --method qlora: QLoRA computes in bf16/fp16; use bf16 or amp-bf16")
        single_gpu_offload = self.shard is Shard.ZERO3 and self.offload is Offload.OPTIMIZER_PARAMS
        if self.shard is not Shard.NONE and self.world_size == 1 and not single_gpu_offload:
            raise PlanError(
                f"--shard {self.shard.value} needs more than one GPU (set --gpus N), "
                "except zero3 with --offload optimizer+params (DeepSpeed runs it on one GPU)"
            )
        if self.offload is Offload.OPTIMIZER_PARAMS and not self.shard.shards_weights:
            raise PlanError(
                "--offload optimizer+params needs --shard zero3, fsdp or fsdp2 (weights are offloaded per shard)"
            )
        _check_engine_knobs(self)
        if self.optimizer in (Optimizer.ADAMW_8BIT, Optimizer.PAGED_ADAMW_8BIT) and self.offload is not Offload.NONE:
            raise PlanError(
                "--offload with an 8-bit optimizer: DeepSpeed/FSDP offload runs its own CPU Adam; use adamw"
            )

        parse_interconnect(self.interconnect)
        _check_parallel(self)
        check_post_training_fields(self)
        check_vision_fields(self)

    @property
    def world_size(self) -> int:
        """Total GPUs (data-parallel unless `cp` or `tp` > 1: then `dp_size` of them are)."""
        return self.gpus_per_node * self.nodes

    @property
    def dp_size(self) -> int:
        """Data-parallel replicas: world / (cp × tp)."""
        return self.world_size // (self.cp * self.tp)

    @property
    def is_peft(self) -> bool:
        return self.method is not Method.FULL

    @property
    def sharded_mixed_precision(self) -> bool:
        """AMP under ZeRO/FSDP/offload: 16-bit working weights + fp32 master in the optimizer (DeepSpeed layout)."""
        return (
            self.method is Method.FULL
            and self.precision.is_amp
            and (self.shard is not Shard.NONE or self.offload is not Offload.NONE)
        )

    def replace(self, **changes) -> TrainingPlan:
        """A new, re-validated plan with `changes` applied."""
        return dataclasses.replace(self, **changes)

    @property
    def effective_lora_alpha(self) -> int:
        """LoRA alpha as the trainer configs use it: the given value, else 2 × rank."""
        return self.lora_alpha if self.lora_alpha is not None else 2 * self.lora_rank

    def to_dict(self) -> dict:
        """Plain-data form (enum values as CLI strings), as used by recipes and --json.

        `lora_alpha` is the effective value (2 × rank when not given), the one emitted configs use.
        """
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Enum):
                value = value.value
            elif isinstance(value, tuple):
                value = list(value)
            out[f.name] = value
        out["lora_alpha"] = self.effective_lora_alpha
        return out

    @classmethod
    def from_dict(cls, data: dict) -> TrainingPlan:
        """Build from plain data (recipe YAML or --json); unknown keys are refused by name."""
        known = {f.name: f for f in dataclasses.fields(cls)}
        kwargs = {}
        for key, value in data.items():
            name = key.replace("-", "_")
            name = FLAG_ALIASES.get(name, name)
            if name not in known:
                raise PlanError(f"unknown plan key {key!r}; known keys: {', '.join(sorted(known))}")
            kwargs[name] = coerce(name, value)
        return cls(**kwargs)


def _check_engine_knobs(plan: TrainingPlan) -> None:
    """The engine knobs: counts ≥ 0 (None: "auto"), and a master-weights choice the engine can make."""
    for name in ENGINE_COUNTS:
        value = getattr(plan, name)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise PlanError(f"{flag_for(name)} must be a whole number of elements (0 or more), got {value!r}")
        check_bound(flag_for(name), name, value)
    if plan.shard.is_fsdp and plan.offload is Offload.OPTIMIZER:
        raise PlanError(
            f"--shard {plan.shard.value} cannot offload the optimizer alone: FSDP's CPUOffload moves parameters, "
            "gradients and optimizer states together; nearest plans: --offload optimizer+params, or --shard zero3 "
            "--offload optimizer"
        )
    if plan.shard.is_fsdp and plan.offload is not Offload.NONE and plan.offload_to is OffloadTarget.NVME:
        raise PlanError(
            f"--shard {plan.shard.value} offloads to CPU memory only; use --offload-to cpu or --shard zero3"
        )
    if plan.master_weights is MasterWeights.AUTO:
        return
    if plan.shard is Shard.NONE and plan.offload is Offload.NONE:
        raise PlanError(
            "--master-weights applies to DeepSpeed and FSDP (--shard); without them --precision decides "
            "(amp-bf16: fp32 master weights, bf16: none)"
        )
    if plan.master_weights is MasterWeights.BF16 and plan.precision not in (Precision.BF16, Precision.AMP_BF16):
        raise PlanError(f"--master-weights bf16 needs --precision bf16, got {plan.precision.value}")
    if plan.master_weights is MasterWeights.BF16 and plan.offload is not Offload.NONE and not plan.shard.is_fsdp:
        raise PlanError(
            "--master-weights bf16 with --offload: DeepSpeed's bf16 optimizer states need its CPU Adam built "
            "for bf16 (deepspeed/runtime/base_optimizer.py); use --master-weights fp32 with offload"
        )


_POSITIVE = (
    "micro_batch",
    "seq_len",
    "grad_accum",
    "gpus_per_node",
    "nodes",
    "lora_rank",
    "lora_alpha",
    "checkpoint_every",
    "eval_batch",
    "eval_accumulation_steps",
    "cp",
    "tp",
    "document_tokens",
    "num_generations",
    "completion_len",
    "generation_batch",
    "num_iterations",
    "prompt_len",
)
"""Plan fields that are positive integers (`lora_alpha`, `eval_accumulation_steps`, `document_tokens`,
`generation_batch` and `prompt_len` may also be None)."""
_MAY_BE_NONE = ("lora_alpha", "eval_accumulation_steps", "document_tokens", "generation_batch", "prompt_len")
"""The fields of `_POSITIVE` that may also be None."""


def _check_parallel(plan: TrainingPlan) -> None:
    """CP and TP against the GPU count: cp × tp divides the world, TP stays inside a node (its collectives run
    per layer on the peer link), and a sharded plan keeps more than one GPU to shard over (world / tp)."""
    if plan.world_size % (plan.cp * plan.tp):
        raise PlanError(
            f"--cp {plan.cp} × --tp {plan.tp} must divide the {plan.world_size} GPUs (--gpus × --nodes): "
            f"use a multiple of {plan.cp * plan.tp} GPUs"
        )
    if plan.gpus_per_node % plan.tp:
        raise PlanError(f"--tp {plan.tp} must divide --gpus {plan.gpus_per_node}: tensor parallelism stays in a node")
    if plan.tp > 1 and plan.shard is not Shard.NONE and plan.world_size == plan.tp:
        raise PlanError(
            f"--shard {plan.shard.value} with --tp {plan.tp} on {plan.world_size} GPUs leaves one GPU per shard "
            "group (world / tp): use --shard none, or more GPUs (2-D: dp × tp)"
        )


def parse_plan(**values) -> TrainingPlan:
    """Build a plan from loosely typed values (CLI strings, recipe YAML); None values are skipped."""
    return TrainingPlan.from_dict({k: v for k, v in values.items() if v is not None})
