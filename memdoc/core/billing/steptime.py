"""Absolute step time of a plan: seconds per optimizer step on one GPU, and tokens/s.

time = Σ over micro-batches (matmuls + memory-bound ops) + optimizer step + exposed communication
+ host transfers. Each term is a count of work from the architecture, divided by a peak rate of
the GPU (`memdoc/data/gpus.yaml`) times an efficiency:

* **Matmuls** (`matmul_flops`), FLOPs per micro-batch of T = batch × seq tokens: every decoder
  linear 2·T·P forward (MoE: the top-k experts a token visits), 2·T·P for the input gradients in
  backward, and 2·T·P for the weight gradients only where weights train (frozen LoRA/QLoRA bases
  need none; Kaplan et al. 2020's 6N is the full case). The LM head is one more linear of h × V
  (computed even when tied). LoRA adds 6·T·r·(in + out) per adapter. Attention: per layer
  4·s²·q_dim per sequence for QKᵀ and PV; SDPA/flash skips the masked half of a causal mask and
  its backward is 2.5 × the forward (FlashAttention-2 recomputes QKᵀ: five matmuls for two);
  eager computes the full square, backward 2 ×. Full checkpointing recomputes each layer's
  forward in backward (+1 forward of the decoder, not the head).
* **Rates per dtype**: bf16/fp16 and autocast run at the bf16/fp16 tensor rate; fp32 runs at the
  FP32 (non-tensor) rate, because torch's default `float32_matmul_precision="highest"` keeps TF32
  tensor cores off (a ×15 difference on an H100). QLoRA: see below.
* **Memory-bound ops** (`memory_bytes`), bytes moved at HBM bandwidth: the element-wise chain of
  an HF decoder layer in eager PyTorch, counted op by op per token — RMSNorm upcasts to fp32
  (to-fp32, pow, mean, multiply, cast back, scale: 28 + 4e bytes per element, e = activation
  bytes), rotary on q and k (multiply, rotate-half's neg+cat, multiply, add: 11e), SwiGLU
  (act + multiply: 5e per intermediate element), two residual adds (3e per hidden element each);
  backward moves twice what forward does, and checkpointing (full or selective) repeats the
  forward. Eager attention adds its scores, mask, fp32 softmax and cast (10e + 8 bytes per score,
  tanh soft-capping 6e more; ×3 with backward). The HF loss upcasts the T × V logits to fp32 and
  takes log-softmax and its gradient (44 bytes per logit); the fused loss streams chunks
  (8 bytes per logit). peft's LoRA path runs its adapters in fp32 (the input is cast to the
  adapter dtype): about 12 bytes per token per adapter input/output element, ×3 with backward.
  Autocast re-casts fp32 weights to bf16 on every forward (6 bytes per weight) and the weight
  gradients back (6 bytes per trainable weight). Gradient accumulation adds each micro-batch's
  gradients into .grad (3 × gradient bytes per micro-batch after the first).
* **Optimizer step** (`optimizer_bytes`): element accesses per parameter × state bytes, at HBM
  bandwidth: foreach AdamW (torch `_multi_tensor_adamw`: weight decay, lerp, mul, addcmul, sqrt,
  div, add, addcdiv) touches 20 param-sized tensors; fused AdamW reads p, g, m, v and writes p,
  m, v (7); bitsandbytes 8-bit AdamW the same 7 with 1-byte states; SGD-momentum 8, Lion 10,
  Adafactor 12 (factored second moment).
* **Communication** (`comm.py`): the bytes each GPU sends per optimizer step by engine (DDP all-reduce,
  ZeRO-1/2 reduce-scatter + all-gather, ZeRO-3/FSDP two all-gathers of every weight and a reduce-scatter
  per micro-batch), over the slowest link: the GPU's NVLink/Infinity Fabric/PCIe peer link inside a node,
  the node's NICs (`--interconnect`) across nodes; half of it hidden behind compute, at most the compute.
* **Host transfers**: offload moves gradients down and updated weights up each step, and with weight
  offload the weights again in forward and backward; the CPU optimizer step moves its states at
  `HOST_MEMORY_GBPS`.

Calibration (`benchmarks/steptime.py`, rows in `benchmarks/data/h200.jsonl`, one H200): the
FLOP and byte counts above are derived, not fitted; three efficiencies are fitted —
`MATMUL_EFFICIENCY` (fraction of the tensor peak large GEMMs reach), `SMALL_MATMUL_DIM` (the
hidden size at which GEMM efficiency halves: thin matrices under-occupy the SMs, η = η_max ·
h/(h + h₀)) and `MEMORY_EFFICIENCY` (fraction of peak HBM bandwidth element-wise kernels reach),
plus `KERNEL_OVERHEAD_S`, the fixed cost of each launched kernel (eager PyTorch launches about
`KERNELS_PER_LAYER` per decoder layer per forward, ×3 with backward; transformers' MoE loops
over the visited experts). Fitted by a grid search (`benchmarks/steptime.py --fit`) minimising
Σ log²(modelled/measured) on 12 of the 18 distinct cases; the 6 in the benchmark's `HELD_OUT`
were not used. Result: η = 0.75, h₀ = 1000, memory 0.70, 2 µs per kernel; modelled/measured on
all 18 cases: median |ratio − 1| 7.5%, worst ×1.34 (GPT-2, whose dropout and gelu_new chain
are only roughly counted); held-out: median 9.2%, worst ×1.21. The FP32 (CUDA-core) path skips
the thin-matrix factor: without tensor cores, GEMMs saturate at far smaller tiles.

**QLoRA** (bitsandbytes NF4 base, LoRA adapters): the compute of the same plan as LoRA, times
`QLORA_TIME_FACTOR`, fitted on published LoRA-vs-QLoRA step times measured on one card with only the
quantisation changed (rows in `benchmarks/data/qlora_speed.yaml`, checked by
`tests/unit/remedies/test_plan_trust.py`):

* Lightning-AI/litgpt `tutorials/resource-tables.md`
  (https://github.com/Lightning-AI/litgpt/blob/main/tutorials/resource-tables.md, updated 2023-10-20):
  one A100-SXM4-40GB, PyTorch 2.1.0, bitsandbytes 0.41.1, `finetune/lora.py` with bf16-true, LoRA
  r = 8 on q and v, micro-batch 1, Alpaca; minutes per 1k iterations, none → bnb.nf4: phi-1.5
  1.62 → 1.77 (×1.09), StableLM-3B-Alpha 1.24 → 1.82 (×1.47), Llama-2-7B 2.36 → 3.68 (×1.56),
  Llama-2-13B 3.19 → 6.38 (×2.00). These four are fitted: geometric mean ×1.50.
* Held out: S. Raschka, "Practical Tips for Finetuning LLMs Using LoRA", Ahead of AI, 2023-11-19
  (https://magazine.sebastianraschka.com/p/practical-tips-for-finetuning-llms): Llama-2-7B, lit-gpt,
  one A100, bf16 LoRA 1.85 h vs QLoRA NF4 2.79 h for the Alpaca run (×1.51), within 1% of the fit.

The ratios grow with the model at micro-batch 1 (a small model's step is dominated by fixed costs),
and at larger micro-batches the fixed dequantisation cost is shared by more tokens, so one constant
is a first fit: its error, `QLORA_TIME_ERROR`, is the median |ratio / factor − 1| of the fitted
rows. Not used: Qwen's README LoRA-vs-Q-LoRA table (A100-80G), whose Q-LoRA runs a GPTQ Int4 model
(auto-gptq kernels), not bitsandbytes NF4.

Not calibrated: offload (no measured rows) and multi-GPU communication (peak link rates; compared with
published multi-GPU throughput in `benchmarks/multigpu.py`, see docs/accuracy.md).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from memdoc.core.billing.activations.offload import offloads
from memdoc.core.billing.activations.sac_op import recomputed_linear_share
from memdoc.core.billing.activations.step import estimate_activations
from memdoc.core.billing.comm import DEFAULT_PEER_GBPS, HIDDEN_COMM_FRACTION, bottleneck, communication
from memdoc.core.billing.parallel import parallel_traffic, rank_share
from memdoc.core.billing.states import model_states
from memdoc.core.billing.vision_bill import text_plan
from memdoc.core.engines.layout import engine_layout
from memdoc.core.model.families import Layout, Mlp, Norm
from memdoc.core.model.gpu import GpuSpec
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.plan import (
    Attention,
    Checkpointing,
    Loss,
    Method,
    Offload,
    Optimizer,
    Precision,
    TrainingPlan,
)

MATMUL_EFFICIENCY = 0.75
"""Fitted: fraction of the dtype's peak that large GEMMs reach (cuBLAS on an H200 under HF eager)."""
SMALL_MATMUL_DIM = 1000.0
"""Fitted: hidden size at which tensor-core GEMM efficiency halves (η · h / (h + h₀))."""
MEMORY_EFFICIENCY = 0.70
"""Fitted: fraction of peak HBM bandwidth element-wise kernels and the optimizer step reach."""
KERNEL_OVERHEAD_S = 2e-6
"""Fitted: fixed cost of one launched kernel, seconds."""
QLORA_TIME_FACTOR = 1.50
"""Fitted on published measurements: QLoRA's compute over the same plan's LoRA compute (bitsandbytes NF4
dequantisation on every use of a frozen weight; see the module docstring and benchmarks/data/qlora_speed.yaml)."""
QLORA_TIME_ERROR = 0.16
"""Median |published ratio / QLORA_TIME_FACTOR − 1| over the fitted rows of benchmarks/data/qlora_speed.yaml."""
KERNELS_PER_LAYER = 40
"""Kernels one HF decoder layer launches in forward (eager: norms alone are 6 each)."""
KERNELS_PER_EXPERT = 6
"""Kernels per visited expert in transformers' expert loop (index, gate-up matmul, act, mul, down matmul, index-add)."""

DEFAULT_TFLOPS = 312.0
"""A100 bf16 dense, when the GPU is given only as a memory size."""
DEFAULT_FP32_TFLOPS = 19.5
"""A100 FP32 (non-tensor)."""
DEFAULT_BANDWIDTH_GBPS = 2039.0
"""A100-80 HBM2e."""
DEFAULT_LINK_GBPS = 25.0
"""PCIe 4.0 x16 as achieved."""
HOST_MEMORY_GBPS = 50.0

_OPTIMIZER_ACCESSES = {
    Optimizer.ADAMW: 20,
    Optimizer.ADAMW_FUSED: 7,
    Optimizer.SGD: 8,
    Optimizer.LION: 10,
    Optimizer.ADAFACTOR: 12,
}


@dataclass(frozen=True)
class StepTime:
    """Modelled seconds of one optimizer step (all micro-batches) on one GPU, by term."""

    compute: float
    """Matmuls, memory-bound element-wise ops and kernel launches of every micro-batch."""
    optimizer: float
    """The optimizer step on the GPU (0 when it runs on the host)."""
    communication: float
    """Exposed inter-GPU communication."""
    host: float
    """Host transfers and the CPU optimizer step under offload."""
    tokens: int
    """Tokens one GPU processes per optimizer step."""
    link: str | None = None
    """The slowest link of the step's collectives, in words (None on one GPU; `comm.bottleneck`)."""
    note: str | None = None
    """What the figure rests on when it is not the calibrated model (post-training: `posttrain.steptime`)."""

    @property
    def seconds(self) -> float:
        return self.compute + self.optimizer + self.communication + self.host

    @property
    def tokens_per_second(self) -> float:
        """Tokens per second per GPU."""
        return self.tokens / self.seconds

    def to_json(self, world_size: int = 1) -> dict:
        """Step seconds and throughput; on more than one GPU also the exposed communication and its link."""
        out = {
            "step_seconds": round(self.seconds, 4),
            "tokens_per_second": round(self.tokens_per_second),
            "tokens_per_second_all_gpus": round(self.tokens_per_second * world_size),
        }
        if world_size > 1:
            out |= {"communication_seconds": round(self.communication, 4), "link": self.link}
        if self.note:
            out["note"] = self.note
        return out


@dataclass(frozen=True)
class _Shape:
    """Per-model sums the time model needs (computed once per model)."""

    linear_params: int
    """Parameters of every decoder linear a token passes through (MoE: top-k experts)."""
    head_params: int
    """h × V: the LM head's matmul (tied or not)."""
    norm_elements: int
    """Σ over layers of normalised elements per token (two norms of h per layer)."""
    rope_elements: int
    """Σ over layers of q_dim + kv_dim."""
    act_elements: int
    """Σ over layers of MLP intermediate elements per token (MoE: top-k experts)."""
    resid_elements: int
    """Σ over layers of 2·h."""
    q_dim_layers: int
    """Σ over layers of q_dim (attention FLOPs scale with it)."""
    heads_layers: int
    """Σ over layers of attention heads (eager score elements scale with it)."""
    act_bytes: int
    """Bytes per intermediate element per activation-byte of the MLP's element-wise chain."""
    layer_norm: bool
    """LayerNorm (one native kernel) instead of HF's eager RMSNorm chain."""
    expert_loops: int
    """Σ over layers of the routed experts one micro-batch visits (transformers loops over them)."""


@functools.lru_cache(maxsize=64)
def _shape(model: ModelSpec) -> _Shape:
    p = model.params
    linear = p.active - p.embedding - p.norms - p.head
    mlp_linear = max(0, linear - p.attention)
    matrices = 2 if model.arch.mlp is Mlp.PLAIN else 3
    layers = model.num_layers
    norms = model.arch.norms_per_layer  # Gemma-2 norms before and after each block
    act = 5 if matrices == 3 else 16 if model.arch.layout is Layout.GPT2 else 2  # act·mul; gelu_new's 8 ops; one gelu
    return _Shape(
        linear_params=linear,
        head_params=model.hidden_size * model.vocab_size,
        norm_elements=norms * model.hidden_size * layers,
        rope_elements=(model.q_dim + model.kv_dim) * layers,
        act_elements=mlp_linear // (matrices * model.hidden_size),
        resid_elements=2 * model.hidden_size * layers,
        q_dim_layers=model.q_dim * layers,
        heads_layers=model.num_heads * layers,
        act_bytes=act,
        layer_norm=model.arch.norm is Norm.LAYER,
        expert_loops=model.num_experts * layers,
    )


def _matmul_rate(model: ModelSpec, plan: TrainingPlan, gpu: GpuSpec | None) -> float:
    """Achieved matmul FLOP/s for this plan's compute dtype on `gpu`."""
    if plan.precision is Precision.FP32:
        peak = (gpu.fp32_tflops if gpu and gpu.fp32_tflops else DEFAULT_FP32_TFLOPS) * 1e12
    elif plan.precision in (Precision.FP16, Precision.AMP_FP16) and gpu and gpu.fp16_tflops:
        peak = gpu.fp16_tflops * 1e12
    else:
        peak = (gpu.bf16_tflops if gpu and gpu.bf16_tflops else (gpu and gpu.fp16_tflops) or DEFAULT_TFLOPS) * 1e12
    if plan.precision is Precision.FP32:
        return peak * MATMUL_EFFICIENCY  # CUDA-core GEMMs saturate with far smaller tiles than tensor cores
    h = model.hidden_size
    return peak * MATMUL_EFFICIENCY * h / (h + SMALL_MATMUL_DIM)


def _full_recompute(model: ModelSpec, plan: TrainingPlan) -> float:
    """Fraction of the decoder's forward that full checkpointing recomputes in backward: the checkpointed layers
    (0, N, 2N, … with `--checkpoint-every N`, so ⌈L/N⌉ of L); 0 without full checkpointing."""
    if plan.checkpointing is not Checkpointing.FULL:
        return 0.0
    layers = model.num_layers
    return -(-layers // plan.checkpoint_every) / layers


def attention_span(plan: TrainingPlan) -> int:
    """Keys each query attends over, on average, in a row: seq unpacked; packed, flash-attention's varlen kernel
    attends within each document (`cu_seqlens`), so a row of documents dᵢ (Σdᵢ = seq) costs Σdᵢ² = seq × Σdᵢ²/Σdᵢ:
    the documents' length-weighted mean (`document_tokens`, at most seq; None: one document per row)."""
    if plan.packing and plan.document_tokens:
        return min(plan.document_tokens, plan.seq_len)
    return plan.seq_len


def _linear_recompute(model: ModelSpec, plan: TrainingPlan) -> float:
    """Fraction of the decoder's linear forward run again in backward: `_full_recompute`, or under op-level SAC
    the matmuls it does not save (`activations/sac_op.py`: every second `mm` of a layer)."""
    if plan.checkpointing is Checkpointing.SAC_OP:
        return recomputed_linear_share(model) + _tiled_recompute(model, plan)
    return _full_recompute(model, plan) + _tiled_recompute(model, plan)


def _tiled_recompute(model: ModelSpec, plan: TrainingPlan) -> float:
    """Share of the decoder's linear forward a tiled MLP (`--tiled-mlp N`) runs once more: its MLP matmuls, which
    DeepSpeed 0.19.8 `ulysses_sp.py` `TiledMLP.backward` reruns under grad after a `no_grad` forward."""
    if plan.tiled_mlp < 2 or model.arch.norm is Norm.LAYER:  # LayerNorm families: billed untiled
        return 0.0
    shape = _shape(model)
    return max(0, shape.linear_params - model.params.attention) / shape.linear_params


def _forward_repeat(model: ModelSpec, plan: TrainingPlan) -> float:
    """Fraction of the forward's element-wise work run again in backward: all of it under selective
    checkpointing (HF's or torchtitan's op-level), the checkpointed layers' share under full checkpointing
    (`_full_recompute`)."""
    if plan.checkpointing in (Checkpointing.SELECTIVE, Checkpointing.SAC_OP):
        return 1.0
    return _full_recompute(model, plan)


def matmul_flops(model: ModelSpec, plan: TrainingPlan, trainable: int) -> float:
    """Matmul FLOPs of one micro-batch: forward, backward and recompute (see module docstring).

    `trainable`: trainable parameters (`model_states(model, plan).trainable_params`)."""
    shape = _shape(model)
    tokens = plan.micro_batch * plan.seq_len
    full = plan.method is Method.FULL
    passes = 3 if full else 2  # forward, input gradients, weight gradients (trainable only)
    recompute = _full_recompute(model, plan)  # SDPA: saved by selective and op-level SAC
    flops = 2 * tokens * shape.linear_params * (passes + _linear_recompute(model, plan))
    flops += 2 * tokens * shape.head_params * passes
    if plan.is_peft:
        flops += 6 * tokens * trainable
    per_sequence = 4 * plan.seq_len * attention_span(plan) * shape.q_dim_layers * plan.micro_batch
    if plan.attention is Attention.SDPA:
        forward = per_sequence / 2  # causal: the masked half is skipped
        flops += forward * (1 + 2.5 + recompute)
    else:
        flops += per_sequence * (1 + 2 + recompute)
    return flops


def memory_bytes(model: ModelSpec, plan: TrainingPlan, trainable: int) -> float:
    """Bytes the memory-bound ops of one micro-batch move (see module docstring)."""
    shape = _shape(model)
    tokens = plan.micro_batch * plan.seq_len
    e = plan.precision.compute_bits // 8
    r = 4 if plan.precision.is_amp else e  # autocast keeps the residual stream in the fp32 of the weights
    forward_per_token = (
        shape.norm_elements * (2 * r if shape.layer_norm else 28 + 4 * r)
        + (0 if shape.layer_norm else shape.rope_elements * 11 * e)
        + shape.act_elements * shape.act_bytes * e
        + shape.resid_elements * 3 * r
    )
    repeats = 3 + _forward_repeat(model, plan)
    total = forward_per_token * tokens * repeats
    if plan.attention is Attention.EAGER:
        per_score = 10 * e + 8 + (6 * e if model.config.get("attn_logit_softcapping") else 0)
        scores = plan.micro_batch * plan.seq_len**2 * shape.heads_layers
        total += scores * per_score * (3 + _full_recompute(model, plan))
    total += tokens * model.vocab_size * (44 if plan.loss is Loss.HF else 8)
    if plan.is_peft:
        total += tokens * (trainable / plan.lora_rank) * 12 * 3
    if plan.precision.is_amp:
        total += (shape.linear_params + shape.head_params) * 6 * (1 + _full_recompute(model, plan))
        total += trainable * 6
    return total


def optimizer_bytes(plan: TrainingPlan, trainable: int) -> float:
    """Bytes the optimizer step moves on the GPU, per optimizer step (see module docstring)."""
    if plan.optimizer in (Optimizer.ADAMW_8BIT, Optimizer.PAGED_ADAMW_8BIT):
        p = plan.precision.param_bits // 8
        return trainable * (3 * p + 4)  # p, g read, p written; m, v read and written (1 byte each)
    state = 4 if plan.is_peft else plan.precision.param_bits // 8  # peft keeps adapters in fp32
    return trainable * state * _OPTIMIZER_ACCESSES[plan.optimizer]


def step_time(model: ModelSpec, plan: TrainingPlan, gpu: GpuSpec | None) -> StepTime:
    """Modelled time of one optimizer step (all micro-batches) on one GPU, by term. A VLM's rows with images: the
    language model at text + image tokens (`vision_bill.text_plan`); the vision encoder's own compute is not timed."""
    if model.vision is not None and plan.has_vision:
        return step_time(model, text_plan(model, plan), gpu)
    if plan.cp > 1 or plan.tp > 1:
        return _parallel_step_time(model, plan, gpu)
    bandwidth = (gpu.memory_bandwidth_gbps if gpu and gpu.memory_bandwidth_gbps else DEFAULT_BANDWIDTH_GBPS) * 1e9
    hbm = bandwidth * MEMORY_EFFICIENCY
    link = (gpu.host_link_gbps if gpu and gpu.host_link_gbps else DEFAULT_LINK_GBPS) * 1e9
    recompute = 1 + 0.5 * _forward_repeat(model, plan)
    tokens_k = plan.micro_batch * plan.seq_len * max(1, model.experts_per_token)
    experts = min(_shape(model).expert_loops, tokens_k * model.num_layers)
    kernels = 3 * (KERNELS_PER_LAYER * model.num_layers + KERNELS_PER_EXPERT * experts) * recompute
    states = model_states(model, plan)
    trainable = states.trainable_params
    micro = (
        matmul_flops(model, plan, trainable) / _matmul_rate(model, plan, gpu)
        + memory_bytes(model, plan, trainable) / hbm
        + kernels * KERNEL_OVERHEAD_S
    )
    grad_add = 3 * states.gradients * (plan.grad_accum - 1) / hbm
    compute = micro * plan.grad_accum + grad_add
    if plan.method is Method.QLORA:
        compute *= QLORA_TIME_FACTOR  # the frozen base's matmuls and FLOPs are LoRA's; NF4 adds dequantisation
    world = plan.world_size
    shard = world if engine_layout(plan).shards_optimizer else 1  # offload without --shard runs as ZeRO-1/2
    optimizer = 0.0 if plan.offload is not Offload.NONE else optimizer_bytes(plan, trainable) / shard / hbm
    collectives = communication(model, plan, gpu, states) if world > 1 else None
    comm = collectives.exposed(compute + optimizer) if collectives else 0.0
    host = 0.0
    if plan.offload is not Offload.NONE:
        host += 2 * states.gradients / shard / link  # grads down, updated 16-bit weights up
        host += 2 * states.optimizer / shard / (HOST_MEMORY_GBPS * 1e9)
    if plan.offload is Offload.OPTIMIZER_PARAMS:
        host += 2 * states.weights / world / link * plan.grad_accum
    if offloads(plan):  # layer inputs down in forward, back in backward, on the compute stream (`offload.py`)
        host += 2 * estimate_activations(model, plan).offloaded / link * plan.grad_accum
    tokens = plan.micro_batch * plan.seq_len * plan.grad_accum
    link = collectives.link if collectives else None
    return StepTime(compute=compute, optimizer=optimizer, communication=comm, host=host, tokens=tokens, link=link)


def _parallel_step_time(model: ModelSpec, plan: TrainingPlan, gpu: GpuSpec | None) -> StepTime:
    """A CP/TP plan's step on one rank: the step of the plan the rank runs (`parallel.rank_share`: its share of
    every linear, seq/cp tokens), plus the attention its queries do against the whole sequence (causal
    attention of s tokens over cp ranks is 1/cp of its FLOPs, not (1/cp)²), plus the CP/TP traffic
    (`parallel.parallel_traffic`) over the group's link: the peer link when cp × tp GPUs fit in a node, else the
    slowest link of the plan. Ring attention hides its traffic as the data-parallel collectives do
    (`comm.HIDDEN_COMM_FRACTION`); TP's all-reduces and Ulysses' all-to-alls are exposed. Tokens per GPU are the
    rank's tokens / tp (the TP ranks of a group process the same tokens)."""
    share = rank_share(model, plan)
    inner = step_time(share.model, share.plan, gpu)
    trainable = model_states(share.model, share.plan).trainable_params
    whole = share.plan.replace(seq_len=plan.seq_len)
    attention = matmul_flops(share.model, whole, trainable) / plan.cp - matmul_flops(share.model, share.plan, trainable)
    compute = inner.compute + attention * plan.grad_accum / _matmul_rate(share.model, share.plan, gpu)
    if plan.cp * plan.tp <= plan.gpus_per_node:
        peer = gpu.peer_link_gbps if gpu is not None and gpu.peer_link_gbps else DEFAULT_PEER_GBPS
        gbps, link = peer, (gpu.gpu_link if gpu is not None and gpu.gpu_link else "PCIe (assumed)") + f", {peer:g} GB/s"
    else:
        gbps, link = bottleneck(plan, gpu)
    traffic = parallel_traffic(model, plan)
    cp_seconds = traffic.cp_bytes / (gbps * 1e9)
    exposed = traffic.tp_bytes / (gbps * 1e9) + cp_seconds
    if traffic.cp_hidden:
        exposed -= min(HIDDEN_COMM_FRACTION * cp_seconds, compute)
    return StepTime(
        compute=compute,
        optimizer=inner.optimizer,
        communication=inner.communication + exposed,
        host=inner.host,
        tokens=inner.tokens // plan.tp,
        link=inner.link or link,
    )


def step_seconds(model: ModelSpec, plan: TrainingPlan, gpu: GpuSpec | None) -> float:
    """Modelled seconds of one optimizer step (all micro-batches) on one GPU."""
    return step_time(model, plan, gpu).seconds
