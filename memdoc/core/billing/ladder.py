"""The cost-increasing ladder: remedies applied cheapest first, each on top of the last, until it fits.

Order (the seed articles' ladder, with two rungs the field has added since: a fused linear
cross-entropy right after accumulation — free in time, and with 128K+ vocabularies often the
largest single saving — and the 8-bit optimizer between QLoRA and offload):
① gradient accumulation (micro-batch 1, same effective batch) → ①b fused cross-entropy → ② activation checkpointing →
③ bf16 → ④ LoRA → ④b QLoRA → ⑤ 8-bit paged AdamW → ⑥ optimizer offload → ⑦ ZeRO-3 over the
GPUs given → ⑧ weight offload. A rung that does not apply to the plan (already on, or needs more
GPUs) is skipped. Stop at the first plan that fits: stacking more makes runs slower and harder
to debug.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from memdoc.core.billing.bill import Bill, compute_bill
from memdoc.core.model.gpu import GpuSpec
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.plan import ALL_LINEAR, Checkpointing, Loss, Method, Offload, Optimizer, Precision, Shard, TrainingPlan
from memdoc.core.billing.steptime import step_seconds
from memdoc.errors import PlanError


def fit_lora_targets(plan: TrainingPlan, model: ModelSpec) -> TrainingPlan:
    """A LoRA plan whose targets name no module of `model` gets peft's default targets for it.

    The ladder and prescriptions switch plans to LoRA with the default q_proj,v_proj; Phi-3,
    GPT-2, NeoX, Falcon and DeepSeek-V2 name their projections differently.
    """
    if not plan.is_peft or ALL_LINEAR in plan.lora_targets or not model.linear_names:
        return plan
    if set(plan.lora_targets) & model.linear_names:
        return plan
    return plan.replace(lora_targets=model.default_lora_targets)


@dataclass(frozen=True)
class Rung:
    id: str
    action: str
    apply: Callable[[TrainingPlan], TrainingPlan | None]
    """The plan with this remedy, or None when it does not apply."""


def _accumulate(p: TrainingPlan) -> TrainingPlan | None:
    if p.micro_batch == 1:
        return None
    return p.replace(micro_batch=1, grad_accum=p.grad_accum * p.micro_batch)


def _fused_loss(p: TrainingPlan) -> TrainingPlan | None:
    return p.replace(loss=Loss.FUSED) if p.loss is Loss.HF else None


def _checkpoint(p: TrainingPlan) -> TrainingPlan | None:
    return None if p.checkpointing is Checkpointing.FULL else p.replace(checkpointing=Checkpointing.FULL)


def _bf16(p: TrainingPlan) -> TrainingPlan | None:
    return None if p.precision in (Precision.BF16, Precision.FP16) else p.replace(precision=Precision.BF16)


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
    if p.world_size == 1 or p.shard in (Shard.ZERO3, Shard.FSDP):
        return None
    return p.replace(shard=Shard.ZERO3)


def _offload_params(p: TrainingPlan) -> TrainingPlan | None:
    if p.offload is Offload.OPTIMIZER_PARAMS or p.shard not in (Shard.ZERO3, Shard.FSDP):
        return None
    return p.replace(offload=Offload.OPTIMIZER_PARAMS, optimizer=Optimizer.ADAMW)


RUNGS: tuple[Rung, ...] = (
    Rung("accumulate", "gradient accumulation: micro-batch 1, same effective batch", _accumulate),
    Rung("fused-loss", "fused linear cross-entropy (Liger): the logits are never stored whole", _fused_loss),
    Rung("checkpointing", "activation checkpointing on every decoder layer", _checkpoint),
    Rung("bf16", "bf16 weights, gradients and states", _bf16),
    Rung("lora", "LoRA adapters instead of full fine-tuning", _lora),
    Rung("qlora", "QLoRA: 4-bit NF4 base under the adapters", _qlora),
    Rung("8bit-optimizer", "8-bit paged AdamW (bitsandbytes)", _eight_bit),
    Rung("offload-optimizer", "optimizer states and step on the CPU (ZeRO-Offload)", _offload_optimizer),
    Rung("shard", "ZeRO-3 / FSDP: shard weights, gradients and states over the GPUs", _shard),
    Rung("offload-params", "weights on the CPU too (ZeRO-Infinity)", _offload_params),
)


@dataclass(frozen=True)
class LadderStep:
    """One rung applied on top of the previous ones."""

    rung: Rung
    plan: TrainingPlan
    bill: Bill
    saved_bytes: int
    """process_total of the previous step minus this one's."""
    step_seconds: float
    """Modelled seconds per optimizer step on one GPU (`steptime.step_seconds`)."""
    relative_time: float
    """Modelled step time relative to the user's plan (1.0 = unchanged)."""

    @property
    def fits(self) -> bool:
        return bool(self.bill.fits)

    def to_json(self) -> dict:
        return {
            "rung": self.rung.id,
            "action": self.rung.action,
            "plan": self.plan.to_dict(),
            "peak_allocated": self.bill.peak_allocated,
            "process_total": self.bill.process_total,
            "saved_bytes": self.saved_bytes,
            "step_seconds": round(self.step_seconds, 4),
            "relative_time": round(self.relative_time, 3),
            "fits": self.fits,
        }


MIN_SAVING = 0.01
"""A rung is taken only if it cuts the process total by at least this fraction: a remedy that saves
nothing on this plan (checkpointing when the optimizer step sets the peak) only costs time."""


def _apply(rung: Rung, plan: TrainingPlan, model: ModelSpec) -> TrainingPlan | None:
    try:
        candidate = rung.apply(plan)
    except PlanError:
        return None
    return None if candidate is None else fit_lora_targets(candidate, model)


def climb(model: ModelSpec, plan: TrainingPlan, gpu: GpuSpec) -> list[LadderStep]:
    """Apply the rungs cheapest first, each on top of the last, until the plan fits `gpu`.

    Each round takes the cheapest remaining rung that saves at least `MIN_SAVING`; a rung that
    saves nothing yet stays a candidate, since a later rung can make it pay (checkpointing after
    LoRA has moved the peak from the optimizer step into backward).
    """
    base_time = step_seconds(model, plan, gpu)
    previous = compute_bill(model, plan, gpu)
    steps: list[LadderStep] = []
    remaining = list(RUNGS)
    while remaining and not previous.fits:
        for rung in list(remaining):
            candidate = _apply(rung, previous.plan, model)
            if candidate is None:
                remaining.remove(rung)
                continue
            bill = compute_bill(model, candidate, gpu)
            saved = previous.process_total - bill.process_total
            if saved >= MIN_SAVING * previous.process_total:
                remaining.remove(rung)
                seconds = step_seconds(model, candidate, gpu)
                steps.append(LadderStep(rung=rung, plan=candidate, bill=bill, saved_bytes=saved, step_seconds=seconds,
                                        relative_time=seconds / base_time))
                previous = bill
                break
        else:
            break  # no remaining rung saves anything on this plan
    return steps


def max_fitting(model: ModelSpec, plan: TrainingPlan, gpu: GpuSpec, knob: str) -> int | None:
    """Largest micro-batch ('batch') or sequence length ('seq', multiples of 128) that fits; None if even 1 does not."""
    field = "micro_batch" if knob == "batch" else "seq_len"
    step = 1 if knob == "batch" else 128

    def fits(value: int) -> bool:
        return bool(compute_bill(model, plan.replace(**{field: value * step}), gpu).fits)

    if not fits(1):
        return None
    limit = (model.max_positions or 1 << 20) // step if knob == "seq" and not plan.allow_long else 1 << 20
    low, high = 1, 2
    while high <= limit and fits(high):
        low, high = high, high * 2
    high = min(high, limit + 1)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low * step
