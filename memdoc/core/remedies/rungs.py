"""The rungs of the cost-increasing ladder, cheapest first, each carrying its lever.

Order (the seed articles' ladder, with the rungs the field has added since: a fused linear
cross-entropy right after accumulation — free in time, and with 128K+ vocabularies often the
largest single saving — fused AdamW for full fine-tuning (faster than foreach and without its
parameter-sized temporaries), bf16 before checkpointing when fp32 was asked (it saves memory
and time, where checkpointing costs a third of the step), and the 8-bit optimizer between QLoRA
and offload):
⓪ expandable segments (free; taken only when removing the allocator's fragmentation makes it
fit) → ① gradient accumulation (micro-batch 1, same effective batch) → ①a QLoRA without the fp32 upcast
of `--kbit-upcast` (free) → ①b fused cross-entropy → ①c fused
AdamW → ①d bf16 from fp32 → ② activation checkpointing (②b its inputs offloaded to the host) → ③ bf16 from
AMP → ④ LoRA → ④b QLoRA → ⑤ 8-bit paged AdamW → ⑥ optimizer offload → ⑦ ZeRO-3 over the GPUs given, then
context parallelism over a node's GPUs (the long-context rung: a sequence no card holds) → ⑧ weight offload
(ZeRO-3 offload, on one GPU too). A rung that does not apply to the plan (already on, or needs
more GPUs) is skipped. The post-training rungs (`rungs_post.POST_RUNGS`: precomputed reference log-probs, the
vLLM fraction, sleep and server modes, the generation batch, and last the changes of the objective) are placed
by rank after the supervised rungs of theirs (`merge_rungs`); its docstring gives each one's reason.

Each rung carries its place on that ladder (`rank`: the circled number, ①a–①d share ①) and its
lever: the plan fields it sets, with the values that count as the same remedy. The prescription
ranks of the symptom knowledge base (`levers.LADDER_RANK`) and the plan levers `prescribe`
quantifies (`levers.PLAN_LEVERS`) are derived from them, so a new rung is ranked and quantified
where it is added.
"""

from __future__ import annotations

import dataclasses

from memdoc.core.model.plan import (
    Allocator,
    Attention,
    Checkpointing,
    CpImpl,
    Loss,
    Method,
    Offload,
    Optimizer,
    Precision,
    Shard,
    TrainingPlan,
)
from memdoc.core.remedies.rung import Rung
from memdoc.core.remedies.rungs_post import POST_RUNGS, task_action


def _expandable(p: TrainingPlan) -> TrainingPlan | None:
    return p.replace(allocator=Allocator.EXPANDABLE) if p.allocator is Allocator.DEFAULT else None


def _accumulate(p: TrainingPlan) -> TrainingPlan | None:
    if p.micro_batch == 1:
        return None
    return p.replace(micro_batch=1, grad_accum=p.grad_accum * p.micro_batch)


def _no_kbit_upcast(p: TrainingPlan) -> TrainingPlan | None:
    return p.replace(kbit_upcast=False) if p.method is Method.QLORA and p.kbit_upcast else None


def _fused_loss(p: TrainingPlan) -> TrainingPlan | None:
    return p.replace(loss=Loss.FUSED) if p.loss is Loss.HF else None


def _checkpoint(p: TrainingPlan) -> TrainingPlan | None:
    return None if p.checkpointing is Checkpointing.FULL else p.replace(checkpointing=Checkpointing.FULL)


def _activation_offload(p: TrainingPlan) -> TrainingPlan | None:
    """Full checkpointing with its layer inputs in host memory (transformers' `offload`), after checkpointing."""
    if p.activation_offload and p.checkpointing is Checkpointing.FULL:
        return None
    return p.replace(checkpointing=Checkpointing.FULL, activation_offload=True)


def _bf16_from_fp32(p: TrainingPlan) -> TrainingPlan | None:
    return p.replace(precision=Precision.BF16) if p.precision is Precision.FP32 else None


def _bf16(p: TrainingPlan) -> TrainingPlan | None:
    return None if p.precision in (Precision.BF16, Precision.FP16) else p.replace(precision=Precision.BF16)


def _fused_adamw(p: TrainingPlan) -> TrainingPlan | None:
    if p.method is not Method.FULL or p.optimizer is not Optimizer.ADAMW or p.offload is not Offload.NONE:
        return None
    return p.replace(optimizer=Optimizer.ADAMW_FUSED)


def _lora(p: TrainingPlan) -> TrainingPlan | None:
    return p.replace(method=Method.LORA) if p.method is Method.FULL else None


def _qlora(p: TrainingPlan) -> TrainingPlan | None:
    return p.replace(method=Method.QLORA) if p.method is Method.LORA else None


def _eight_bit(p: TrainingPlan) -> TrainingPlan | None:
    if p.optimizer in (Optimizer.ADAMW_8BIT, Optimizer.PAGED_ADAMW_8BIT) or p.offload is not Offload.NONE:
        return None
    return p.replace(optimizer=Optimizer.PAGED_ADAMW_8BIT)


def _offload_optimizer(p: TrainingPlan) -> TrainingPlan | None:
    if p.offload is not Offload.NONE:
        return None
    return p.replace(offload=Offload.OPTIMIZER, optimizer=Optimizer.ADAMW)


def _shard(p: TrainingPlan) -> TrainingPlan | None:
    if p.world_size == 1 or p.shard.shards_weights:
        return None
    return p.replace(shard=Shard.ZERO3)


def _context_parallel(p: TrainingPlan) -> TrainingPlan | None:
    """Split each sequence over the GPUs of a node (ring attention: no condition on the heads); a plan with CP
    or TP already, one GPU per node, or eager attention (CP runs a fused kernel) is left alone."""
    if p.gpus_per_node == 1 or p.cp > 1 or p.tp > 1 or p.attention is Attention.EAGER:
        return None
    return p.replace(cp=p.gpus_per_node, cp_impl=CpImpl.RING)


def _offload_params(p: TrainingPlan) -> TrainingPlan | None:
    if p.offload is Offload.OPTIMIZER_PARAMS:
        return None
    if p.world_size == 1:  # DeepSpeed ZeRO-3 offload runs on one GPU
        return p.replace(shard=Shard.ZERO3, offload=Offload.OPTIMIZER_PARAMS, optimizer=Optimizer.ADAMW)
    if not p.shard.shards_weights:
        return None
    return p.replace(offload=Offload.OPTIMIZER_PARAMS, optimizer=Optimizer.ADAMW)


_HALF_PRECISIONS = ("bf16", "amp-bf16", "fp16", "amp-fp16")
"""bf16 on cards without it is fp16 (`climb`); AMP keeps fp32 master weights (a prescription's choice)."""

_SFT_RUNGS: tuple[Rung, ...] = (
    Rung(
        "expandable",
        "expandable segments in the CUDA allocator (--allocator expandable): less fragmentation",
        _expandable,
        rank=None,  # free and taken only when fragmentation is all that does not fit: a fix, not a rung of cost
        lever={"allocator": ("expandable",)},
    ),
    Rung(
        "accumulate",
        "gradient accumulation: micro-batch 1, same effective batch",
        _accumulate,
        rank=1,
        lever={"micro_batch": ("1", "half", "double")},  # relative: 'half' keeps the effective batch too
    ),
    Rung(
        "no-kbit-upcast",
        "QLoRA without prepare_model_for_kbit_training's fp32 upcast: embeddings, LM head and norms "
        "stay 16-bit (as TRL, Axolotl and LLaMA-Factory run it)",
        _no_kbit_upcast,
        rank=1,
        lever={"kbit_upcast": (False,)},
    ),
    Rung(
        "fused-loss",
        "fused linear cross-entropy (Liger): the logits are never stored whole",
        _fused_loss,
        rank=1,
        lever={"loss": ("fused",)},
    ),
    Rung(
        "fused-adamw",
        "fused AdamW: one kernel, no foreach temporaries",
        _fused_adamw,
        rank=1,
        lever={"optimizer": ("adamw-fused",)},
    ),
    Rung(
        "bf16",
        "bf16 weights, gradients and states",
        _bf16_from_fp32,
        rank=1,
        lever={"precision": _HALF_PRECISIONS},  # free from fp32; a lever two rungs share ranks at the costlier
    ),
    Rung(
        "checkpointing",
        "activation checkpointing on every decoder layer",
        _checkpoint,
        rank=2,
        lever={"checkpointing": ("full", "selective")},
    ),
    Rung(
        "activation-offload",
        "checkpointed layer inputs in pinned host memory (a copy each way over the host link)",
        _activation_offload,
        rank=2,
        lever={"checkpointing": ("full",), "activation_offload": (True,)},
        undo={"activation_offload": (False,)},
    ),
    Rung("bf16", "bf16 weights, gradients and states", _bf16, rank=3, lever={"precision": _HALF_PRECISIONS}),
    Rung("lora", "LoRA adapters instead of full fine-tuning", _lora, rank=4, lever={"method": ("lora",)}),
    Rung("qlora", "QLoRA: 4-bit NF4 base under the adapters", _qlora, rank=4, lever={"method": ("qlora",)}),
    Rung(
        "8bit-optimizer",
        "8-bit paged AdamW (bitsandbytes)",
        _eight_bit,
        rank=5,
        lever={"optimizer": ("paged-adamw-8bit", "adamw-8bit", "adafactor", "sgd", "lion")},  # smaller states
    ),
    Rung(
        "offload-optimizer",
        "optimizer states and step on the CPU (ZeRO-Offload)",
        _offload_optimizer,
        rank=6,
        lever={"offload": ("optimizer",)},  # and AdamW: DeepSpeed's CPU Adam runs the step
        undo={"offload": ("none",)},
    ),
    Rung(
        "shard",
        "ZeRO-3 / FSDP: shard weights, gradients and states over the GPUs",
        _shard,
        rank=7,
        lever={"shard": ("zero3", "fsdp", "zero1", "zero2")},
    ),
    Rung(
        "context-parallel",
        "context parallelism: each sequence split over the node's GPUs (ring attention), seq/N activations each",
        _context_parallel,
        rank=7,
        lever={"cp": ("node",), "cp_impl": ("ring", "ulysses")},  # "node": the GPUs of a node (`quantify`)
    ),
    Rung(
        "offload-params",
        "weights on the CPU too (ZeRO-3 offload; on one GPU as well)",
        _offload_params,
        rank=8,
        lever={"offload": ("optimizer+params",)},
    ),
)
"""The supervised ladder, cheapest first."""


def merge_rungs(sft: tuple[Rung, ...], post: tuple[Rung, ...]) -> tuple[Rung, ...]:
    """One ladder: the post-training rungs after the supervised rungs of their rank (stable by rank; the unranked
    expandable segments first), each shared rung with its per-task actions (`rungs_post.task_action`)."""
    shared = tuple(dataclasses.replace(r, for_task=task_action(r.id) or r.for_task) for r in sft)
    return tuple(sorted((*shared, *post), key=lambda r: r.rank or 0))


RUNGS: tuple[Rung, ...] = merge_rungs(_SFT_RUNGS, POST_RUNGS)
"""The ladder, cheapest first: the supervised rungs with the post-training rungs (`rungs_post`) placed by rank."""
