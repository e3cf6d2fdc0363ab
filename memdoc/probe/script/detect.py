"""The Hugging Face model being trained, and the memdoc plan that describes its step.

Shared by the script runner (`detect_hf`: what the instrumented script ran) and the Trainer
callback (`memdoc.integrations.hf`: the Trainer's model, optimizer and arguments).
"""

from __future__ import annotations

import contextlib
import sys

from memdoc.probe.script.result import ScriptResult
from memdoc.probe.script.session import Session


def find_hf_model(modules) -> tuple[object, object | None] | None:
    """(the PreTrainedModel, the peft wrapper around it or None) among `modules`, or None."""
    if "transformers" not in sys.modules:
        return None
    from transformers import PreTrainedModel

    for root in modules:
        candidates = [root]
        base = getattr(root, "base_model", None)
        if base is not None:
            candidates.append(getattr(base, "model", base))
        for c in candidates:
            if isinstance(c, PreTrainedModel):
                return c, (root if c is not root else None)
    return None


def optimizer_kind(info: dict | None, *, cuda: bool):
    """The plan's `Optimizer` for an optimizer described as {"class", "foreach", "fused"}.

    torch's AdamW with ``foreach=None`` uses the foreach implementation (param-sized step
    temporaries) when its tensors are on CUDA, the single-tensor one on CPU.
    """
    from memdoc.core.model.plan import Optimizer

    if not info:
        return Optimizer.ADAMW
    name = info["class"].lower()
    if "sgd" in name:
        return Optimizer.SGD
    if "adafactor" in name:
        return Optimizer.ADAFACTOR
    if "lion" in name:
        return Optimizer.LION
    if "8bit" in name:
        return Optimizer.PAGED_ADAMW_8BIT if "paged" in name else Optimizer.ADAMW_8BIT
    foreach = info.get("foreach")
    if foreach is None:
        foreach = cuda
    if info.get("fused") or not foreach:
        return Optimizer.ADAMW_FUSED  # no foreach temporaries
    return Optimizer.ADAMW


def detect_plan(
    hf,
    peft_model,
    *,
    autocast: str | None,
    checkpointing: bool,
    optimizer: dict | None,
    input_shape: tuple | None,
    cuda: bool,
    fused_loss: bool = False,
):
    """(TrainingPlan, {field: value} detected) for the model `hf` (wrapped by `peft_model`).

    `autocast` is the autocast dtype of the forward ('bf16', 'fp16') or None; `input_shape` the
    (batch, sequence) of the input ids.
    """
    from memdoc.core.model.plan import Attention, Checkpointing, Loss, TrainingPlan

    params = list((peft_model or hf).named_parameters())
    lora = any("lora_" in n for n, p in params if p.requires_grad)
    four_bit = lora and any(type(p).__name__ == "Params4bit" for _, p in params)
    kwargs: dict = {"precision": _detect_precision(params, lora=lora, four_bit=four_bit, autocast=autocast)}
    if lora:
        kwargs.update(_detect_lora(hf, peft_model, four_bit=four_bit))
    kwargs["checkpointing"] = Checkpointing.FULL if checkpointing else Checkpointing.NONE
    attn = getattr(hf.config, "_attn_implementation", None) or "sdpa"
    kwargs["attention"] = Attention.EAGER if attn == "eager" else Attention.SDPA
    if fused_loss:
        kwargs["loss"] = Loss.FUSED
    kwargs["optimizer"] = optimizer_kind(optimizer, cuda=cuda)
    if input_shape:
        kwargs["micro_batch"], kwargs["seq_len"] = int(input_shape[0]), int(input_shape[1])
    plan = TrainingPlan(**kwargs, allow_long=True)
    detected = {k: (v.value if hasattr(v, "value") else v) for k, v in kwargs.items()}
    return plan, detected


def _detect_precision(params, *, lora: bool, four_bit: bool, autocast: str | None):
    """The plan's Precision from the parameters' dtypes (the frozen base's under LoRA, the adapters'
    under QLoRA) and the forward's autocast: fp32 weights under autocast are amp."""
    from memdoc.core.model.plan import Precision

    frozen_dtypes = {str(p.dtype).replace("torch.", "") for n, p in params if not p.requires_grad}
    train_dtypes = {str(p.dtype).replace("torch.", "") for n, p in params if p.requires_grad}
    weight_dtype = next(iter(frozen_dtypes if lora and frozen_dtypes else train_dtypes or frozen_dtypes), "float32")
    if four_bit:
        weight_dtype = next(iter(train_dtypes), "bfloat16")  # the adapters' dtype; the base is NF4
    if weight_dtype == "float32":
        precision = {"bf16": Precision.AMP_BF16, "fp16": Precision.AMP_FP16}.get(autocast or "", Precision.FP32)
    else:
        precision = Precision.FP16 if weight_dtype == "float16" else Precision.BF16
    if four_bit and precision is Precision.FP32:
        precision = Precision.BF16
    return precision


def _detect_lora(hf, peft_model, *, four_bit: bool) -> dict:
    """The LoRA fields of the plan (method, kbit_upcast, rank, dropout, targets) from peft's config."""
    from memdoc.core.model.plan import DEFAULT_TARGETS, Method

    kwargs: dict = {"method": Method.QLORA if four_bit else Method.LORA}
    if four_bit:  # peft's prepare_model_for_kbit_training leaves the embedding (and the norms, the head) fp32
        embedding = getattr(hf.get_input_embeddings(), "weight", None) if hasattr(hf, "get_input_embeddings") else None
        kwargs["kbit_upcast"] = embedding is not None and str(embedding.dtype) == "torch.float32"
    cfg = None
    with contextlib.suppress(Exception):
        cfg = next(iter(peft_model.peft_config.values()))
    if cfg is not None:
        kwargs["lora_rank"] = int(cfg.r)
        # billed as the script runs it: dropout > 0 keeps one more fp32 copy per adapted input
        kwargs["lora_dropout"] = float(getattr(cfg, "lora_dropout", 0.0) or 0.0)
        targets = cfg.target_modules
        if isinstance(targets, str):
            targets = [targets]
        kwargs["lora_targets"] = tuple(sorted(targets)) if targets else DEFAULT_TARGETS
    return kwargs


def with_task(plan, detected: dict, post: dict, input_shape: tuple | None):
    """(plan, detected) with the TRL trainer's task and knobs (`trl_phases.plan_fields`)."""
    import dataclasses

    from memdoc.probe.script.trl_phases import plan_fields

    fields = plan_fields(post, input_shape)
    plan = dataclasses.replace(plan, **fields)
    detected = detected | {k: (v.value if hasattr(v, "value") else v) for k, v in fields.items()}
    return plan, detected


def model_identity(hf) -> tuple[str, dict]:
    """(model id, config as a dict) of a PreTrainedModel."""
    config = hf.config.to_dict()
    model_id = getattr(hf.config, "_name_or_path", "") or config.get("_name_or_path") or type(hf).__name__
    return model_id, config


def detect_hf(session: Session, result: ScriptResult) -> None:
    """For an HF PreTrainedModel among the roots: config, the detected plan and model id."""
    found = find_hf_model(list(session.roots.values()))
    if found is None:
        return
    hf, peft_model = found
    try:
        plan, detected = detect_plan(
            hf,
            peft_model,
            autocast="bf16" if session.autocast_seen else None,
            checkpointing=bool(session.ckpt_wrapped),
            optimizer=next(iter(session.opt_info.values()), None),
            input_shape=session.first_input_shape,
            cuda=session.uses_cuda,
        )
        if result.post is not None and result.post["task"]:
            plan, detected = with_task(plan, detected, result.post, session.first_input_shape)
    except Exception as exc:  # pragma: no cover
        result.notes.append(f"could not build the detected plan: {exc}")
        return
    model_id, config = model_identity(hf)
    result.hf = {"model_id": model_id, "config": config, "plan": plan, "detected": detected, "class": type(hf).__name__}
