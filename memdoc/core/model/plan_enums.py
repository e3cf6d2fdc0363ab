"""The plan's choices as Enums: each value is the exact string the CLI accepts (`plan.TrainingPlan` fields)."""

from __future__ import annotations

from enum import Enum


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
    SAC_OP = "sac-op"
    """torchtitan's op-level selective checkpointing (`selective_ac_option = "op"`): each decoder layer saves the
    outputs of its SDPA and of every other `aten.mm` in forward order (the 1st, 3rd, … matmul: q, v, gate, down in
    a Llama layer), and recomputes the other matmuls (k, o, up) and every element-wise op in backward."""


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
    """FSDP1 full-shard through accelerate (`FullyShardedDataParallel`, flat parameters)."""
    FSDP2 = "fsdp2"
    """FSDP2 `fully_shard` (per-parameter DTensor shards, a `MixedPrecisionPolicy`), through accelerate."""

    @property
    def shards_optimizer(self) -> bool:
        return self is not Shard.NONE

    @property
    def shards_gradients(self) -> bool:
        return self in (Shard.ZERO2, Shard.ZERO3, Shard.FSDP, Shard.FSDP2)

    @property
    def shards_weights(self) -> bool:
        return self in (Shard.ZERO3, Shard.FSDP, Shard.FSDP2)

    @property
    def is_fsdp(self) -> bool:
        return self in (Shard.FSDP, Shard.FSDP2)


class MasterWeights(str, Enum):
    """The dtype of the weights the optimizer steps (and of its states) under DeepSpeed and FSDP."""

    AUTO = "auto"
    """The engine's default: fp32 master weights and states under DeepSpeed/FSDP; `--precision` under DDP."""
    FP32 = "fp32"
    """fp32 master weights and fp32 optimizer states (numerically safe)."""
    BF16 = "bf16"
    """bf16 master weights, gradients and optimizer states (DeepSpeed `bf16_master_weights_and_grads` +
    `bf16_optimizer_states`; FSDP with accelerate's `mixed_precision: no` on a bf16 model): a numerical risk."""


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


class CpImpl(str, Enum):
    """How context parallelism splits attention over the `--cp` GPUs of one sequence."""

    ULYSSES = "ulysses"
    """DeepSpeed Ulysses / Arctic long-sequence training (`deepspeed/sequence/layer.py` `DistributedAttention`):
    an all-to-all turns each rank's seq/cp tokens × all heads into all tokens × heads/cp before attention, and
    back after; the heads must divide by cp."""
    RING = "ring"
    """Ring attention (torch `torch/distributed/tensor/experimental/_context_parallel/_attention.py`, accelerate's
    `cp_size`, torchtitan CP): each rank keeps its seq/cp queries and passes the key/value blocks round the ring."""
