"""The cost-increasing ladder: remedies applied cheapest first, each on top of the last, until it fits.

Order (the seed articles' ladder, with the rungs the field has added since: a fused linear
cross-entropy right after accumulation — free in time, and with 128K+ vocabularies often the
largest single saving — fused AdamW for full fine-tuning (faster than foreach and without its
parameter-sized temporaries), bf16 before checkpointing when fp32 was asked (it saves memory
and time, where checkpointing costs a third of the step), and the 8-bit optimizer between QLoRA
and offload):
⓪ expandable segments (free; taken only when removing the allocator's fragmentation makes it
fit) → ① gradient accumulation (micro-batch 1, same effective batch) → ①a QLoRA without the fp32 upcast
of `--kbit-upcast` (free) → ①b fused cross-entropy → ①c fused
AdamW → ①d bf16 from fp32 → ② activation checkpointing → ③ bf16 from AMP → ④ LoRA → ④b QLoRA →
⑤ 8-bit paged AdamW → ⑥ optimizer offload → ⑦ ZeRO-3 over the GPUs given → ⑧ weight offload
(ZeRO-3 offload, on one GPU too). A rung that does not apply to the plan (already on, or needs
more GPUs) is skipped. Stop at the first plan that fits: stacking more makes runs slower and
harder to debug — and then drop every remedy the final plan does not need ("enough is enough"):
a remedy taken early (a fused loss) can be made unnecessary by a later one (LoRA). Each rung's
time is `steptime.step_seconds`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from memdoc.core.billing.bill import Bill, compute_bill
from memdoc.core.billing.steptime import step_seconds
from memdoc.core.model.gpu import GpuSpec
from memdoc.core.model.lora import fit_lora_targets
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.plan import (
    Allocator,
    Checkpointing,
    Loss,
    Method,
    Offload,
    Optimizer,
    Precision,
    Shard,
    TrainingPlan,
)
from memdoc.errors import PlanError


@dataclass(frozen=True)
class Rung:
    id: str
    action: str
    apply: Callable[[TrainingPlan], TrainingPlan | None]
    """The plan with this remedy, or None when it does not apply."""


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
    if p.world_size == 1 or p.shard in (Shard.ZERO3, Shard.FSDP):
        return None
    return p.replace(shard=Shard.ZERO3)


def _offload_params(p: TrainingPlan) -> TrainingPlan | None:
    if p.offload is Offload.OPTIMIZER_PARAMS:
        return None
    if p.world_size == 1:  # DeepSpeed ZeRO-3 offload runs on one GPU
        return p.replace(shard=Shard.ZERO3, offload=Offload.OPTIMIZER_PARAMS, optimizer=Optimizer.ADAMW)
    if p.shard not in (Shard.ZERO3, Shard.FSDP):
        return None
    return p.replace(offload=Offload.OPTIMIZER_PARAMS, optimizer=Optimizer.ADAMW)


RUNGS: tuple[Rung, ...] = (
    Rung(
        "expandable",
        "expandable segments in the CUDA allocator (--allocator expandable): less fragmentation",
        _expandable,
    ),
    Rung("accumulate", "gradient accumulation: micro-batch 1, same effective batch", _accumulate),
    Rung(
        "no-kbit-upcast",
        "QLoRA without prepare_model_for_kbit_training's fp32 upcast: embeddings, LM head and norms "
        "stay 16-bit (as TRL, Axolotl and LLaMA-Factory run it)",
        _no_kbit_upcast,
    ),
    Rung("fused-loss", "fused linear cross-entropy (Liger): the logits are never stored whole", _fused_loss),
    Rung("fused-adamw", "fused AdamW: one kernel, no foreach temporaries", _fused_adamw),
    Rung("bf16", "bf16 weights, gradients and states", _bf16_from_fp32),
    Rung("checkpointing", "activation checkpointing on every decoder layer", _checkpoint),
    Rung("bf16", "bf16 weights, gradients and states", _bf16),
    Rung("lora", "LoRA adapters instead of full fine-tuning", _lora),
    Rung("qlora", "QLoRA: 4-bit NF4 base under the adapters", _qlora),
    Rung("8bit-optimizer", "8-bit paged AdamW (bitsandbytes)", _eight_bit),
    Rung("offload-optimizer", "optimizer states and step on the CPU (ZeRO-Offload)", _offload_optimizer),
    Rung("shard", "ZeRO-3 / FSDP: shard weights, gradients and states over the GPUs", _shard),
    Rung("offload-params", "weights on the CPU too (ZeRO-3 offload; on one GPU as well)", _offload_params),
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


DROP_TOLERANCE = 0.05
"""The final pass drops a remedy when the step without it is at most this fraction slower: a
remedy worth less than that (a fused loss on a small vocabulary, 8-bit states) is not worth its
dependency or its risk; one worth more (LoRA under weight offload) stays."""

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
            if (
                candidate is not None
                and candidate.precision in (Precision.BF16, Precision.AMP_BF16)
                and not gpu.supports_bf16
            ):
                # No bf16 on this card (T4, V100): a LoRA plan goes to fp16 instead; a full fine-tune keeps its
                # fp32 master weights (the HF loss scaler refuses pure-fp16 gradients) — the rung may apply after LoRA.
                if not candidate.is_peft:
                    continue
                candidate = candidate.replace(precision=Precision.FP16)
            if candidate is None:
                remaining.remove(rung)
                continue
            bill = compute_bill(model, candidate, gpu)
            # (checked cheapest first: the tensor bill is arithmetic, reserved memory a simulation)
            if rung.id == "expandable":  # free, but only worth a line when fragmentation is what does not fit
                worth = bill.peak_allocated + bill.overhead_bytes <= gpu.memory_bytes and bool(bill.fits)
            else:  # tensor remedies must cut tensors: fragmentation they happen to remove does not pay their cost
                worth = previous.peak_allocated - bill.peak_allocated >= MIN_SAVING * previous.process_total
                worth = worth and previous.process_total > bill.process_total
            if worth:
                saved = previous.process_total - bill.process_total
                remaining.remove(rung)
                seconds = step_seconds(model, candidate, gpu)
                steps.append(
                    LadderStep(
                        rung=rung,
                        plan=candidate,
                        bill=bill,
                        saved_bytes=saved,
                        step_seconds=seconds,
                        relative_time=seconds / base_time,
                    )
                )
                previous = bill
                break
        else:
            break  # no remaining rung saves anything on this plan
    if steps and steps[-1].fits:
        final = _drop_unneeded(model, plan, steps, gpu, base_time)
        if final is not None:
            steps.append(final)
    return steps


def _reverts(plan: TrainingPlan, steps: list[LadderStep]) -> list[tuple[str, dict]]:
    """(rung id, the fields it changed with their values before it) for every rung taken."""
    out, previous = [], plan
    for step in steps:
        before, after = previous.to_dict(), step.plan.to_dict()
        changed = {k: getattr(previous, k) for k in after if after[k] != before[k]}
        out.append((step.rung.id, changed))
        previous = step.plan
    return out


def _drop_unneeded(
    model: ModelSpec, plan: TrainingPlan, steps: list[LadderStep], gpu: GpuSpec, base_time: float
) -> LadderStep | None:
    """A last step without the remedies the final plan does not need, or None when each is needed.

    A remedy is dropped when the plan without it still fits and is at most `DROP_TOLERANCE`
    slower: LoRA that makes a weight-offloaded 70B step five times faster is not "unneeded". Greedy: of the remedies that can go, drop the one that leaves the fastest plan,
    and repeat; what stays is minimal (undoing any one of them no longer fits, or is slower).
    """
    current = steps[-1].plan
    current_bill = steps[-1].bill
    current_seconds = steps[-1].step_seconds
    pending = _reverts(plan, steps)
    dropped: list[str] = []
    while True:
        options = []
        for rung_id, fields in pending:
            try:
                candidate = fit_lora_targets(current.replace(**fields), model)
            except PlanError:
                continue
            if candidate == current:
                continue
            bill = compute_bill(model, candidate, gpu)
            seconds = step_seconds(model, candidate, gpu)
            if seconds <= current_seconds * (1 + DROP_TOLERANCE) and bill.fits:
                options.append((seconds, rung_id, fields, candidate, bill))
        if not options:
            break
        current_seconds, rung_id, fields, current, current_bill = min(options, key=lambda o: o[0])
        dropped.append(rung_id)
        pending = [(r, f) for r, f in pending if r != rung_id]
    if not dropped:
        return None
    rung = Rung("drop-unneeded", "drop what the final plan does not need: " + ", ".join(dropped), lambda p: None)
    seconds = step_seconds(model, current, gpu)
    return LadderStep(
        rung=rung,
        plan=current,
        bill=current_bill,
        saved_bytes=steps[-1].bill.process_total - current_bill.process_total,
        step_seconds=seconds,
        relative_time=seconds / base_time,
    )


def max_fitting(model: ModelSpec, plan: TrainingPlan, gpu: GpuSpec, knob: str) -> int | None:
    """Largest micro-batch ('batch') or sequence length ('seq', multiples of 128 up to the model's context) that fits; None if even 1 does not."""
    field = "micro_batch" if knob == "batch" else "seq_len"
    return largest_value(
        knob, model, plan.allow_long, lambda value: bool(compute_bill(model, plan.replace(**{field: value}), gpu).fits)
    )


def largest_value(knob: str, model: ModelSpec, allow_long: bool, fits: Callable[[int], bool]) -> int | None:
    """The largest batch ('batch') or sequence length ('seq') with fits(value): sequences in multiples
    of 128 tokens (single tokens for a context shorter than that), never past the model's context
    unless `allow_long`; None if even 1 does not fit."""
    context = model.max_positions if knob == "seq" and not allow_long else None
    step = 1 if knob == "batch" or (context is not None and context < 128) else 128
    limit = (context or 1 << 20) // step if knob == "seq" and not allow_long else 1 << 20
    found = largest_fitting(lambda n: fits(n * step), limit)
    return None if found is None else found * step


def largest_fitting(fits: Callable[[int], bool], limit: int) -> int | None:
    """The largest n in 1..limit with fits(n), for a `fits` true up to a boundary (doubling, then
    bisection); None when fits(1) is false."""
    if limit < 1 or not fits(1):
        return None
    low, high = 1, 2
    while high <= limit and fits(high):
        low, high = high, high * 2
    high = min(high, limit + 1)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low
