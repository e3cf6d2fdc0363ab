"""What each format does with QLoRA's fp32 upcast (`--kbit-upcast`), as a note beside the config.

peft's `prepare_model_for_kbit_training` upcasts every non-quantised parameter to fp32
(`memdoc/core/billing/kbit.py` has the sources). Per format (the trainers' code, 2026 snapshots):

* hf: the script prepares the model itself — the note says whether to call it;
* trl: `SFTTrainer` (≥ 0.26, trl/trainer/sft_trainer.py `__init__`) never calls it and has no key
  for it; for a 4-bit model it also casts the trainable (LoRA) parameters to bf16;
* axolotl: calls it, then `_configure_embedding_dtypes` (src/axolotl/loaders/model.py) casts
  `*norm*`, `embed_tokens` and `lm_head` back to `torch_dtype` for every adapter — no key keeps them fp32;
* llamafactory: never calls it; `upcast_layernorm` (default false) upcasts the norm weights only.

So only `hf` can run the upcast; for the others `--kbit-upcast` is a mismatch the note names, with
the flag that bills what the config runs.
"""

from __future__ import annotations

from memdoc.core.model.plan import Method, TrainingPlan

_NOT_RUN = {
    "trl": "TRL's SFTTrainer (≥ 0.26) does not call peft's prepare_model_for_kbit_training and has no key for it",
    "axolotl": "Axolotl calls prepare_model_for_kbit_training but then casts norms, embed_tokens and lm_head back "
    "to the compute dtype (for every adapter; no key keeps them fp32)",
    "llamafactory": "LLaMA-Factory never calls prepare_model_for_kbit_training (upcast_layernorm: true would upcast "
    "the norm weights only)",
}


def kbit_prepare_clause(plan: TrainingPlan) -> str:
    """The hf note's QLoRA clause: call `prepare_model_for_kbit_training` exactly when the plan bills its upcast."""
    if plan.method is not Method.QLORA:
        return ""
    if plan.kbit_upcast:
        return (
            " after prepare_model_for_kbit_training(model, use_gradient_checkpointing=...) — its fp32 upcast of "
            "embeddings, LM head and norms is billed (--kbit-upcast)"
        )
    return (
        " — without peft's prepare_model_for_kbit_training, whose fp32 upcast of embeddings, LM head and norms "
        "this plan does not bill (--kbit-upcast bills it)"
    )


def kbit_notes(fmt: str, plan: TrainingPlan) -> list[str]:
    """Notes for `fmt` when the plan's upcast choice is not what that trainer runs (and TRL's adapter cast)."""
    if plan.method is not Method.QLORA:
        return []
    notes = []
    if plan.kbit_upcast and fmt in _NOT_RUN:
        notes.append(
            f"--kbit-upcast: {_NOT_RUN[fmt]}, so this config trains without the billed fp32 upcast "
            "(less memory than billed); bill it with --no-kbit-upcast"
        )
    if fmt == "trl":
        notes.append(
            "TRL casts a 4-bit model's LoRA adapters to bf16 (billed in fp32, peft's default): "
            "adapters, their gradients and AdamW states take about half the billed bytes"
        )
    return notes


__all__ = ["kbit_notes", "kbit_prepare_clause"]
