"""Axolotl's answers to the plan's knobs beyond its key table (0.19): packing, CP/TP and ALST's tiled MLP, QLoRA's
upcast, the loss path.

* Packing: `sample_packing: true`, `pad_to_sequence_len: true` (every row `sequence_len` tokens: the billed
  shape), `attn_implementation: flash_attention_2`.
* CP: `context_parallel_size` (`sequence_parallel_degree` is its deprecated name: `utils/schemas/validation.py`
  `check_context_parallel_size`) runs ring-flash-attn and requires `attn_implementation: flash_attention_2`.
* TP: `tensor_parallel_size` is DeepSpeed AutoTP (`utils/schemas/config.py`: "Only supported with DeepSpeed
  AutoTP"), so it needs a ZeRO `--shard`.
* Tiled MLP: `tiled_mlp` / `tiled_mlp_num_shards` (`utils/schemas/config.py`; `monkeypatch/tiled_mlp/patch.py`
  applies DeepSpeed's `TiledMLP` under DeepSpeed, its own copy otherwise).
* QLoRA: Axolotl calls `prepare_model_for_kbit_training`, then `_configure_embedding_dtypes`
  (src/axolotl/loaders/model.py) casts `*norm*`, `embed_tokens` and `lm_head` back to `torch_dtype` for every
  adapter — no key keeps them fp32.
* The loss: Axolotl's trainer (a transformers Trainer) computes the full logits, never TRL's fused LM head.
"""

from __future__ import annotations

from memdoc.core.model.plan import Method, Shard, TrainingPlan
from memdoc.core.trainers.axolotl.keys import KEYS
from memdoc.core.trainers.hf.facts import full_logits_note
from memdoc.core.trainers.kbit import upcast_mismatch
from memdoc.core.trainers.packing import FLASH_NOTE
from memdoc.core.trainers.parallel import parallel_asked
from memdoc.errors import PlanError

NAME = "axolotl"


def packing_keys(plan: TrainingPlan, notes: list[str]) -> dict:
    if not plan.packing:
        return {}
    notes.append(FLASH_NOTE)
    return {KEYS["packing"]: True, KEYS["pad_to_sequence_len"]: True, KEYS["attention"]: "flash_attention_2"}


def check_parallel(plan: TrainingPlan) -> None:
    if not parallel_asked(NAME, plan):
        return
    if plan.tp > 1 and plan.shard not in (Shard.ZERO1, Shard.ZERO2, Shard.ZERO3):
        raise PlanError(
            "--format axolotl writes --tp as tensor_parallel_size, DeepSpeed AutoTP only: add --shard zero1, zero2 "
            "or zero3, or use --format trl with --shard fsdp2"
        )


def add_parallel_keys(plan: TrainingPlan, emitted) -> None:
    if plan.tiled_mlp > 1:
        emitted.config[KEYS["tiled_mlp_on"]] = True
        emitted.config[KEYS["tiled_mlp"]] = plan.tiled_mlp
    if plan.cp > 1:
        emitted.config[KEYS["cp"]] = plan.cp
        emitted.config[KEYS["attention"]] = "flash_attention_2"
        emitted.notes.append(
            "context_parallel_size runs ring-flash-attn, which needs attn_implementation: flash_attention_2 "
            "(billed as SDPA's flash kernel: the same saved tensors)"
        )
    if plan.tp > 1:
        emitted.config[KEYS["tp"]] = plan.tp


NOT_RUN = (
    "Axolotl calls prepare_model_for_kbit_training but then casts norms, embed_tokens and lm_head back to the "
    "compute dtype (for every adapter; no key keeps them fp32)"
)


def kbit_notes(plan: TrainingPlan) -> list[str]:
    return [upcast_mismatch(NOT_RUN)] if plan.method is Method.QLORA and plan.kbit_upcast else []


def loss_note(plan: TrainingPlan) -> str | None:
    return full_logits_note(plan, "Axolotl's trainer (a transformers Trainer) computes")


__all__ = ["add_parallel_keys", "check_parallel", "kbit_notes", "loss_note", "packing_keys"]
