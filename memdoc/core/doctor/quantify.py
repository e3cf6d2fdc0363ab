"""Quantified prescriptions: what each lever saves on the user's plan, computed with the bill.

A lever is a plan change (`{checkpointing: full}`, `{micro_batch: half}`, …). Applied alone to
the user's plan, the bill gives the bytes it saves (process total before − after) and whether
it alone makes the run fit. The plan levers (`remedies.levers.PLAN_LEVERS`) are derived from the
ladder's rungs, so every rung's lever is one this applies. Levers that are not plan fields
(activation offload, optimizer-in-backward) are not modelled: `saves_bytes` is None and the text
says so.

Sharding alone over one GPU saves nothing ("needs more than one GPU"); ZeRO-3 with the weights offloaded
(ZeRO-Infinity) works on one GPU, as the ladder's `_offload_params` rung (`remedies.rungs`) and
`memdoc plan` use it, so that lever is billed.

Inference symptoms are quantified against the inference bill instead (`quantify_inference`):
batch, context, KV-cache storage, weight format and chunked prefill are its levers.
"""

from __future__ import annotations

from dataclasses import dataclass

from memdoc.core.billing.bill import Bill, compute_bill
from memdoc.core.billing.inference import InferenceBill, InferencePlan, KvCache, Weights, inference_bill
from memdoc.core.doctor.symptoms import Prescription
from memdoc.core.model.gpu import GpuSpec
from memdoc.core.model.lora import fit_lora_targets
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.plan import Offload, TrainingPlan, parse_plan
from memdoc.core.model.plan_post import Vllm, check_post_training_request
from memdoc.core.remedies.levers import INFERENCE_LEVERS, PLAN_LEVERS
from memdoc.core.remedies.rungs_post import fewer_generations, lean_vllm_memory, smallest_generation_batch
from memdoc.errors import PlanError


@dataclass(frozen=True)
class Quantified:
    prescription: Prescription
    saves_bytes: int | None
    """process_total saved on this plan; None when the lever is not a plan change the bill models."""
    fits_alone: bool | None
    """Does this prescription alone make the plan fit? (None without a GPU or a lever)"""
    note: str = ""


def _post_value(plan: TrainingPlan, key: str, value, model: ModelSpec | None, gpu: GpuSpec | None):
    """A post-training lever's relative value as the plan's number (the ladder's rungs, `remedies.rungs_post`):
    completions 'half' (generations: `apply_lever`), the generation batch 'smallest' TRL accepts, the vLLM
    fraction 'lean' (needs the model and the card); None where it does not apply."""
    if key == "completion_len":
        return plan.completion_len // 2 if plan.task.is_online and plan.completion_len >= 64 else None
    if key == "generation_batch":
        return smallest_generation_batch(plan) if plan.task.is_online else None
    if key == "vllm_memory":
        lean = lean_vllm_memory(plan, model, gpu) if model is not None and plan.vllm is Vllm.COLOCATE else None
        return None if lean is None or lean >= plan.vllm_memory or lean > 1 else round(lean, 2)
    return value


_POST_RELATIVE = {
    "completion_len": "half",
    "num_generations": "half",
    "generation_batch": "smallest",
    "vllm_memory": "lean",
}


def apply_lever(
    plan: TrainingPlan, lever: dict, model: ModelSpec | None = None, gpu: GpuSpec | None = None
) -> TrainingPlan | None:
    """The plan with the lever applied; None when the lever is not a plan change, changes nothing or breaks TRL's
    rules (`check_post_training_request`). `model` and `gpu` size the vLLM fraction's 'lean'."""
    if not lever or any(key not in PLAN_LEVERS for key in lever):
        return None
    if lever.get("vllm_sleep") and plan.vllm is not Vllm.COLOCATE:
        return None  # sleep mode is the colocated engine's
    values = plan.to_dict() | {"lora_alpha": plan.lora_alpha}  # as given (to_dict shows the effective 2r)
    for key, value in lever.items():
        if key == "micro_batch":
            if plan.micro_batch == 1:
                return None
            new = {"half": max(1, plan.micro_batch // 2), "1": 1, "double": plan.micro_batch * 2}[str(value)]
            values["grad_accum"] = plan.grad_accum * plan.micro_batch // new
            values["micro_batch"] = new
        elif key == "cp":  # "node": every GPU of a node
            values["cp"] = plan.gpus_per_node if value == "node" else value
        elif key == "seq_len":
            if str(value) != "half":
                return None  # "cap to the data's p99 length" needs the data
            values["seq_len"] = max(1, plan.seq_len // 2)
        elif key == "num_generations" and value == "half":  # with the smaller generation batch it allows: the saving
            fewer = fewer_generations(plan)
            if fewer is None:
                return None
            values["num_generations"], values["generation_batch"] = fewer
        elif _POST_RELATIVE.get(key) == value:
            values[key] = _post_value(plan, key, value, model, gpu)
            if values[key] is None:
                return None
        else:
            values[key] = value
    if lever.get("offload", "none") != "none" and values.get("optimizer") in ("adamw-8bit", "paged-adamw-8bit"):
        values["optimizer"] = "adamw"  # ZeRO-Offload steps with DeepSpeed's CPU Adam
    try:
        new_plan = parse_plan(**values)
        check_post_training_request(new_plan)
    except PlanError:
        return None
    return None if new_plan == plan else new_plan


def quantify(prescriptions, model: ModelSpec, plan: TrainingPlan, gpu: GpuSpec | None) -> tuple[Bill, list[Quantified]]:
    """Bill the plan, then each prescription's lever alone on top of it."""
    base = compute_bill(model, plan, gpu)
    out = []
    for p in prescriptions:
        if (p.lever or {}).get("seq_len") == "cap":  # applicable to any plan, but the cap comes from the data
            out.append(Quantified(p, None, None, "the cap is the data's p99 length: not billed without the data"))
            continue
        changed = apply_lever(plan, p.lever or {}, model, gpu)
        if changed is None:
            out.append(_not_applied(p, PLAN_LEVERS))
            continue
        if (
            changed.shard.value != "none"
            and changed.world_size == 1
            and changed.offload is not Offload.OPTIMIZER_PARAMS
        ):
            out.append(Quantified(p, None, None, "needs more than one GPU"))  # sharding over one GPU saves nothing
            continue
        after = compute_bill(model, fit_lora_targets(changed, model), gpu)
        saved = base.process_total - after.process_total
        if "allocator" not in p.lever:  # a tensor lever is credited with the tensors it cuts, not with
            saved = min(saved, base.peak_allocated - after.peak_allocated)  # the simulated fragmentation it shifts
        note = "saves nothing on this plan" if saved <= 0 else ""
        out.append(Quantified(p, saved, after.fits, note))
    return base, out


INFERENCE_PLAN_LEVERS = ("micro_batch", "seq_len", *INFERENCE_LEVERS)
"""Levers the inference bill models: batch and context (as `micro_batch`/`seq_len`) and its own."""


def _not_applied(p: Prescription, modelled) -> Quantified:
    """A prescription whose lever was not applied, with why: none, not modelled, or nothing to change."""
    if not p.lever:
        return Quantified(p, None, None, "no memory lever")
    if all(key in modelled for key in p.lever):
        return Quantified(p, None, None, "already in this plan or not applicable to it")
    return Quantified(p, None, None, "not a plan change the bill models")


def apply_inference_lever(inference: InferencePlan, lever: dict) -> InferencePlan | None:
    """The inference plan with the lever applied; None when it is not an inference lever or changes nothing."""
    if not lever or any(key not in INFERENCE_PLAN_LEVERS for key in lever):
        return None
    changed = inference
    for key, value in lever.items():
        if key == "micro_batch":
            if str(value) != "half" or inference.batch == 1:
                return None
            changed = changed.replace(batch=max(1, inference.batch // 2))
        elif key == "seq_len":
            if str(value) != "half":
                return None
            changed = changed.replace(context=max(1, inference.context // 2))
        elif key == "kv_cache":
            changed = changed.replace(kv_cache=KvCache(value))
        elif key == "weights":
            changed = changed.replace(weights=Weights(value))
        elif key == "prefill_chunk":
            if inference.chunk <= value:
                return None
            changed = changed.replace(prefill_chunk=value)
    return None if changed == inference else changed


def quantify_inference(
    prescriptions, model: ModelSpec, inference: InferencePlan, gpu: GpuSpec | None
) -> tuple[InferenceBill, list[Quantified]]:
    """Bill the inference plan, then each prescription's lever alone on top of it."""
    base = inference_bill(model, inference, gpu)
    out = []
    for p in prescriptions:
        changed = apply_inference_lever(inference, p.lever or {})
        if changed is None:
            out.append(_not_applied(p, INFERENCE_PLAN_LEVERS))
            continue
        after = inference_bill(model, changed, gpu)
        saved = base.process_total - after.process_total
        out.append(Quantified(p, saved, after.fits, "saves nothing on this plan" if saved <= 0 else ""))
    return base, out
