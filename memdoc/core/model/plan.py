"""The training plan: every knob that changes the memory of one training step.

`TrainingPlan` is frozen and validated on construction; its fields are the contract shared by
`bill`, `diagnose`, `prescribe` and `emit`. Enum values are the exact strings the CLI accepts.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import Enum

from memdoc.core.model.stack import MoeExperts
from memdoc.errors import PlanError, did_you_mean, quoted

ALL_LINEAR = "all-linear"
"""The LoRA target that adapts every decoder linear (peft's "all-linear")."""
DEFAULT_TARGETS = ("q_proj", "v_proj")
"""The plan's default LoRA targets: peft's default for Llama-style attention."""


class Method(str, Enum):
    """What is trained."""

    FULL = "full"
    """Every parameter is trainable."""
    LORA = "lora"
    """Frozen base weights in the compute dtype plus trainable low-rank adapters (peft)."""
    QLORA = "qlora"
    """LoRA over a base stored as 4-bit NF4 with double-quantised constants (bitsandbytes)."""


class Precision(str, Enum):
    """Dtypes of weights, gradients and optimizer states, and the compute dtype."""

    BF16 = "bf16"
    """Pure bf16: weights, gradients and optimizer states all bf16, no fp32 master copy."""
    FP16 = "fp16"
    """Pure fp16 (as BF16 with fp16)."""
    FP32 = "fp32"
    """Everything fp32, fp32 compute."""
    AMP_BF16 = "amp-bf16"
    """Mixed precision: fp32 master weights, gradients and states; bf16 autocast compute."""
    AMP_FP16 = "amp-fp16"
    """Mixed precision with fp16 autocast (and a loss scaler)."""

    @property
    def is_amp(self) -> bool:
        return self in (Precision.AMP_BF16, Precision.AMP_FP16)

    @property
    def param_bits(self) -> int:
        """Bits per stored (master) weight, gradient and optimizer-state element."""
        return 32 if self in (Precision.FP32, Precision.AMP_BF16, Precision.AMP_FP16) else 16

    @property
    def compute_bits(self) -> int:
        """Bits per activation element produced by matmuls."""
        return 32 if self is Precision.FP32 else 16

    @property
    def torch_dtype_name(self) -> str:
        """Name of the dtype the weights are stored in ('bfloat16', 'float16', 'float32')."""
        return {Precision.BF16: "bfloat16", Precision.FP16: "float16"}.get(self, "float32")

    @property
    def compute_dtype_name(self) -> str:
        """Name of the dtype matmuls run in."""
        return {
            Precision.BF16: "bfloat16",
            Precision.AMP_BF16: "bfloat16",
            Precision.FP16: "float16",
            Precision.AMP_FP16: "float16",
        }.get(self, "float32")


class Optimizer(str, Enum):
    """The optimizer and its state layout."""

    ADAMW_FUSED = "adamw-fused"
    """torch AdamW with fused=True: 2 states, no foreach temporaries. memdoc's default, because it is
    the trainers': transformers' `TrainingArguments.optim` defaults to `adamw_torch_fused` with
    torch ≥ 2.8 (TRL, Axolotl and LLaMA-Factory build on it)."""
    ADAMW_FOREACH = "adamw-foreach"
    """torch AdamW, foreach implementation (what `torch.optim.AdamW(params)` picks on CUDA, and HF's
    `adamw_torch`): 2 states + one state-sized temporary in the step. `adamw` is accepted for it."""
    ADAMW = "adamw-foreach"  # an alias of ADAMW_FOREACH (same value): the name before fused became the default
    ADAMW_8BIT = "adamw-8bit"
    """bitsandbytes AdamW8bit: 2 uint8 states + fp32 block-wise absmax (block 256)."""
    PAGED_ADAMW_8BIT = "paged-adamw-8bit"
    """As adamw-8bit, with states in CUDA unified memory that pages out under pressure."""
    SGD = "sgd"
    """SGD with momentum: 1 state."""
    ADAFACTOR = "adafactor"
    """Adafactor: factored second moment (row + column vectors) for matrices, no first moment."""
    LION = "lion"
    """Lion: 1 state (momentum)."""

    @classmethod
    def _missing_(cls, value):
        """`adamw` (the CLI name before fused AdamW became the default) means foreach AdamW, as HF's `adamw_torch`."""
        return cls.ADAMW_FOREACH if value == "adamw" else None


class Checkpointing(str, Enum):
    """Activation (gradient) checkpointing."""

    NONE = "none"
    """Every activation needed by backward is kept."""
    FULL = "full"
    """Each decoder layer keeps only its input; the layer is recomputed in backward (+1 forward)."""
    SELECTIVE = "selective"
    """Matmul outputs are saved, cheap element-wise ops (norms, activations, rotary) recomputed."""


class Attention(str, Enum):
    """Attention kernel."""

    SDPA = "sdpa"
    """Scaled-dot-product attention with a flash/memory-efficient kernel: O(s) saved state."""
    EAGER = "eager"
    """Plain matmul-softmax-matmul: saves the s×s probabilities per head (O(s²))."""


class Loss(str, Enum):
    """How the LM head and cross-entropy are computed."""

    HF = "hf"
    """transformers' loss: full logits, upcast to fp32, then log-softmax (saved) — T × vocab × 4 bytes,
    several times."""
    FUSED = "fused"
    """Liger as `use_liger_kernel=True` applies it (what emit writes): the fused linear cross-entropy —
    logits computed chunk by chunk and never stored whole, the gradients of the head's input (and
    weight) computed in the forward — plus Liger's RMSNorm, RoPE and SwiGLU/GeGLU kernels."""
    FUSED_CE = "fused-ce"
    """Liger's fused linear cross-entropy alone (RMSNorm, RoPE and the MLP stay transformers')."""
    TRL_FUSED = "trl-fused"
    """TRL's fused LM head (trl/kernels/chunked_logprob.py), run by TRL 1.16's SFT/DPO/GRPO trainers: logits
    in `[min(tokens, 4096) × 32768]` tiles, never whole; fp32 gradients of the head (`activations.head`)."""


class Shard(str, Enum):
    """How model states are split across data-parallel GPUs."""

    NONE = "none"
    """Plain data parallel (DDP): every GPU holds everything."""
    ZERO1 = "zero1"
    """Optimizer states sharded."""
    ZERO2 = "zero2"
    """Optimizer states and gradients sharded."""
    ZERO3 = "zero3"
    """Optimizer states, gradients and weights sharded (DeepSpeed)."""
    FSDP = "fsdp"
    """FSDP full-shard (same memory layout as ZeRO-3, PyTorch-native)."""

    @property
    def shards_optimizer(self) -> bool:
        return self is not Shard.NONE

    @property
    def shards_gradients(self) -> bool:
        return self in (Shard.ZERO2, Shard.ZERO3, Shard.FSDP)

    @property
    def shards_weights(self) -> bool:
        return self in (Shard.ZERO3, Shard.FSDP)


class Offload(str, Enum):
    """What is moved off the GPU."""

    NONE = "none"
    OPTIMIZER = "optimizer"
    """Optimizer states (and the step) live in host memory (ZeRO-Offload)."""
    OPTIMIZER_PARAMS = "optimizer+params"
    """Optimizer states and weights live off the GPU (ZeRO-Infinity); layers are fetched on use."""


class Allocator(str, Enum):
    """PyTorch's CUDA caching-allocator mode (`PYTORCH_CUDA_ALLOC_CONF`)."""

    DEFAULT = "default"
    """Fixed-size segments (cudaMalloc per segment)."""
    EXPANDABLE = "expandable"
    """`expandable_segments:True`: one growing segment per pool, less fragmentation."""

    @property
    def alloc_conf(self) -> str | None:
        """The PYTORCH_CUDA_ALLOC_CONF value that selects this mode (None: the default)."""
        return "expandable_segments:True" if self is Allocator.EXPANDABLE else None


class OffloadTarget(str, Enum):
    CPU = "cpu"
    NVME = "nvme"


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
            if value > MAX_PLAN_VALUE:
                raise PlanError(f"{flag_for(name)} {value} is beyond any real run ({MAX_PLAN_VALUE:,} at most)")
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
        for name in ("eval_keeps_logits", "save_only_model", "low_mem_load", "save_gather"):
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
            raise PlanError("--offload optimizer+params needs --shard zero3 or fsdp (weights are offloaded per shard)")
        if self.optimizer in (Optimizer.ADAMW_8BIT, Optimizer.PAGED_ADAMW_8BIT) and self.offload is not Offload.NONE:
            raise PlanError(
                "--offload with an 8-bit optimizer: DeepSpeed/FSDP offload runs its own CPU Adam; use adamw"
            )

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
}


def flag_for(field_name: str) -> str:
    """The CLI flag that sets plan field `field_name` (micro_batch -> --batch, lora_rank -> --lora-rank)."""
    return "--" + _FIELD_TO_FLAG.get(field_name, field_name).replace("_", "-")


_FIELD_TO_FLAG = {v: k for k, v in FLAG_ALIASES.items()}


def _coerce(name: str, value):
    """Turn recipe/CLI values into field types, strictly, with an error naming the field.

    No silent conversion: `micro_batch: 2.9` or `true` is not 2 or 1, `allow_long: "false"` is
    false, not true (a bool or exactly "true"/"false"); integers may be written as digits ("4", as
    on a command line, or 4.0). YAML's `false` for checkpointing/offload means none, `true` for
    checkpointing full.
    """
    if name in _ENUMS:
        enum = _ENUMS[name]
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
    if name == "lora_targets":
        if isinstance(value, str):
            value = [t.strip() for t in value.split(",")]
        if not isinstance(value, (list, tuple)) or not all(isinstance(t, str) for t in value):
            raise PlanError(
                f"{flag_for(name)} must be module names (a comma-separated string or a list), got {quoted(value)}"
            )
        return tuple(value)
    if name == "save_gather" and value is None:
        return None
    if name in ("allow_long", "kbit_upcast", "eval_keeps_logits", "save_gather", "save_only_model", "low_mem_load"):
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):  # as typed on a command line
            return value.strip().lower() == "true"
        if not isinstance(value, bool):
            raise PlanError(f"{flag_for(name)} must be true or false, got {quoted(value)}")
        return value
    if name in ("lora_alpha", "eval_accumulation_steps") and value is None:
        return None
    if name == "lora_dropout":
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise PlanError(f"--lora-dropout must be a number in [0, 1), got {quoted(value)}")
        try:
            return float(value)
        except ValueError:
            raise PlanError(f"--lora-dropout must be a number in [0, 1), got {quoted(value)}") from None
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
