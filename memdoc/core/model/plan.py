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
    Loss,
    MasterWeights,
    Method,
    Offload,
    OffloadTarget,
    Optimizer,
    Precision,
    Shard,
)
from memdoc.core.model.ranges import check_bound, check_world
from memdoc.core.model.stack import MoeExperts
from memdoc.errors import PlanError, did_you_mean, quoted

ALL_LINEAR = "all-linear"
"""The LoRA target that adapts every decoder linear (peft's "all-linear")."""
DEFAULT_TARGETS = ("q_proj", "v_proj")
"""The plan's default LoRA targets: peft's default for Llama-style attention."""

__all__ = [
    "Allocator",
    "Attention",
    "Checkpointing",
    "Loss",
    "MasterWeights",
    "Method",
    "Offload",
    "OffloadTarget",
    "Optimizer",
    "Precision",
    "Shard",
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
class TrainingPlan:
    """One training step's setup. All sizes are per GPU."""

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

    def __post_init__(self) -> None:
        for name in (
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
        ):
            value = getattr(self, name)
            if value is None and name in ("lora_alpha", "eval_accumulation_steps"):
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
        if not isinstance(self.kbit_upcast, bool):
            raise PlanError(f"--kbit-upcast must be true or false, got {self.kbit_upcast!r}")
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

    @property
    def world_size(self) -> int:
        """Total data-parallel GPUs."""
        return self.gpus_per_node * self.nodes

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
            kwargs[name] = _coerce(name, value)
        return cls(**kwargs)


FLAG_ALIASES = {"batch": "micro_batch", "seq": "seq_len", "accum": "grad_accum", "gpus": "gpus_per_node"}
"""CLI flag (and recipe key) -> plan field, where they differ; every other flag is the field with dashes."""

_ENUMS = {
    "method": Method,
    "precision": Precision,
    "optimizer": Optimizer,
    "checkpointing": Checkpointing,
    "attention": Attention,
    "loss": Loss,
    "shard": Shard,
    "offload": Offload,
    "offload_to": OffloadTarget,
    "allocator": Allocator,
    "moe_experts": MoeExperts,
    "master_weights": MasterWeights,
}

ENGINE_COUNTS = (
    "reduce_bucket_size",
    "allgather_bucket_size",
    "stage3_prefetch_bucket_size",
    "stage3_param_persistence_threshold",
    "stage3_max_live_parameters",
    "sub_group_size",
)
"""DeepSpeed's element-count knobs (`deepspeed/runtime/zero/config.py` `DeepSpeedZeroConfig`, 0.19.8)."""


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


def flag_for(field_name: str) -> str:
    """The CLI flag that sets plan field `field_name` (micro_batch -> --batch, lora_rank -> --lora-rank)."""
    return "--" + _FIELD_TO_FLAG.get(field_name, field_name).replace("_", "-")


_FIELD_TO_FLAG = {v: k for k, v in FLAG_ALIASES.items()}


_BOOLS = (
    "allow_long",
    "kbit_upcast",
    "overlap_comm",
    "contiguous_gradients",
    "eval_keeps_logits",
    "save_gather",
    "save_only_model",
    "low_mem_load",
    "activation_offload",
)
"""Plan fields that are true or false."""
_OPTIONAL = ("lora_alpha", "eval_accumulation_steps", "save_gather", *ENGINE_COUNTS)
"""Plan fields where None means "the default rule" (2 × rank, HF's None, as emitted, DeepSpeed's "auto")."""


def _coerce(name: str, value):
    """Turn recipe/CLI values into field types, strictly, with an error naming the field.

    No silent conversion: `micro_batch: 2.9` or `true` is not 2 or 1, `allow_long: "false"` is
    false, not true (a bool or exactly "true"/"false"); integers may be written as digits ("4", as
    on a command line, or 4.0). YAML's `false` for checkpointing/offload means none, `true` for
    checkpointing full.
    """
    if name in _ENUMS:
        return _coerce_enum(name, _ENUMS[name], value)
    if name == "lora_targets":
        if isinstance(value, str):
            value = [t.strip() for t in value.split(",")]
        if not isinstance(value, (list, tuple)) or not all(isinstance(t, str) for t in value):
            raise PlanError(
                f"{flag_for(name)} must be module names (a comma-separated string or a list), got {quoted(value)}"
            )
        return tuple(value)
    if name in _OPTIONAL and value is None:
        return None
    if name in _BOOLS:
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):  # as typed on a command line
            return value.strip().lower() == "true"
        if not isinstance(value, bool):
            raise PlanError(f"{flag_for(name)} must be true or false, got {quoted(value)}")
        return value
    if name == "interconnect":
        parse_interconnect(value)  # a one-line PlanError naming the flag
        return value.strip().lower()
    if name == "lora_dropout":
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise PlanError(f"--lora-dropout must be a number in [0, 1), got {quoted(value)}")
        try:
            return float(value)
        except ValueError:
            raise PlanError(f"--lora-dropout must be a number in [0, 1), got {quoted(value)}") from None
    return _coerce_int(name, value)


def _coerce_enum(name: str, enum, value):
    """An enum field from its CLI/recipe spelling (case-insensitive; YAML's false/true for checkpointing/offload)."""
    if isinstance(value, enum):
        return value
    if value is False and name in ("checkpointing", "offload"):
        value = "none"
    if value is True and name == "checkpointing":
        value = "full"
    choices = ", ".join(m.value for m in enum)
    if not isinstance(value, str):
        raise PlanError(f"{flag_for(name)} must be one of: {choices}; got {quoted(value)}")
    try:
        return enum(value.lower())
    except ValueError:
        hint = did_you_mean(value.lower(), [m.value for m in enum])
        raise PlanError(f"{flag_for(name)} {quoted(value)} is not one of: {choices}{hint}") from None


def _coerce_int(name: str, value) -> int:
    """An integer field: an int, an integral float (DeepSpeed JSON's 5e8, YAML's 4.0) or digits as typed."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if (
        isinstance(value, str) and value.strip().isdigit() and value.strip().isascii()
    ):  # "4", as typed on a command line
        value = int(value.strip())
    if not isinstance(value, int) or isinstance(value, bool):
        raise PlanError(f"{flag_for(name)} must be an integer, got {quoted(value)}")
    return value


def parse_plan(**values) -> TrainingPlan:
    """Build a plan from loosely typed values (CLI strings, recipe YAML); None values are skipped."""
    return TrainingPlan.from_dict({k: v for k, v in values.items() if v is not None})
