"""The Hugging Face model a script trains, and the memdoc plan that describes its step."""

from __future__ import annotations

import contextlib
import sys

from memdoc.probe.script.result import ScriptResult
from memdoc.probe.script.session import Session


def detect_hf(session: Session, result: ScriptResult) -> None:
    """For an HF PreTrainedModel among the roots: config, the detected plan and model id."""
    if "transformers" not in sys.modules:
        return
    from transformers import PreTrainedModel

    hf = None
    peft_model = None
    for root in session.roots.values():
        candidates = [root]
        base = getattr(root, "base_model", None)
        if base is not None:
            candidates.append(getattr(base, "model", base))
        for c in candidates:
            if isinstance(c, PreTrainedModel):
                hf = c
                if c is not root:
                    peft_model = root
                break
        if hf is not None:
            break
    if hf is None:
        return
    from memdoc.core.model.plan import Attention, Checkpointing, Method, Optimizer, Precision, TrainingPlan

    detected: dict = {}
    params = list((peft_model or hf).named_parameters())
    trainable = [(n, p) for n, p in params if p.requires_grad]
    lora = [n for n, _ in trainable if "lora_" in n]
    frozen_dtypes = {str(p.dtype).replace("torch.", "") for n, p in params if not p.requires_grad}
    train_dtypes = {str(p.dtype).replace("torch.", "") for n, p in trainable}
    weight_dtype = next(iter(frozen_dtypes if lora and frozen_dtypes else train_dtypes or frozen_dtypes), "float32")
    if weight_dtype == "float32":
        precision = Precision.AMP_BF16 if session.autocast_seen else Precision.FP32
    else:
        precision = Precision.FP16 if weight_dtype == "float16" else Precision.BF16
    kwargs: dict = {"precision": precision}
    if lora:
        kwargs["method"] = Method.LORA
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
            kwargs["lora_targets"] = tuple(sorted(targets)) if targets else ("q_proj", "v_proj")
    kwargs["checkpointing"] = Checkpointing.FULL if session.ckpt_wrapped else Checkpointing.NONE
    attn = getattr(hf.config, "_attn_implementation", None) or "sdpa"
    kwargs["attention"] = Attention.EAGER if attn == "eager" else Attention.SDPA
    opt_classes = [info for info in session.opt_info.values()]
    optimizer = Optimizer.ADAMW
    if opt_classes:
        info = opt_classes[0]
        name = info["class"].lower()
        if "sgd" in name:
            optimizer = Optimizer.SGD
        elif "adafactor" in name:
            optimizer = Optimizer.ADAFACTOR
        elif info.get("fused") or not info.get("foreach"):
            optimizer = Optimizer.ADAMW_FUSED  # no foreach temporaries (CPU's default, or fused=True)
    kwargs["optimizer"] = optimizer
    if session.first_input_shape:
        kwargs["micro_batch"], kwargs["seq_len"] = int(session.first_input_shape[0]), int(session.first_input_shape[1])
    kwargs["allow_long"] = True
    try:
        plan = TrainingPlan(**kwargs)
    except Exception as exc:  # pragma: no cover
        result.notes.append(f"could not build the detected plan: {exc}")
        return
    config = hf.config.to_dict()
    model_id = getattr(hf.config, "_name_or_path", "") or config.get("_name_or_path") or type(hf).__name__
    detected = {k: (v.value if hasattr(v, "value") else v) for k, v in kwargs.items() if k != "allow_long"}
    result.hf = {"model_id": model_id, "config": config, "plan": plan, "detected": detected, "class": type(hf).__name__}
