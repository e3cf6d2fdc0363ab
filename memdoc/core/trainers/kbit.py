"""What each format does with QLoRA's fp32 upcast (`--kbit-upcast`), as a note beside the config (each format's own
answer: `Format.kbit_notes`, in its folder's `facts.py`).

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


def upcast_mismatch(why: str) -> str:
    """The note of a trainer that does not run the billed fp32 upcast (`--kbit-upcast`)."""
    return (
        f"--kbit-upcast: {why}, so this config trains without the billed fp32 upcast "
        "(less memory than billed); bill it with --no-kbit-upcast"
    )


__all__ = ["upcast_mismatch"]
