"""TRL's defaults that depend on the stack (`Stack`): the SFT lengths and the loss path."""

from __future__ import annotations

from dataclasses import dataclass

from memdoc.core.model.plan import Loss
from memdoc.core.model.stack import Stack, trl_fused_lm_head
from memdoc.core.trainers.trl.keys import KEYS


@dataclass(frozen=True)
class TrlSftDefaults:
    """TRL `SFTConfig` defaults that change memory, read from trl/trainer/sft_config.py (TRL 1.16.0)."""

    max_length: int | None = KEYS.row("seq_len").default
    """`max_length`: sequences are truncated to it (None: no truncation); with packing, the block length."""
    packing: bool = KEYS.row("packing").default
    """`packing`: sequences grouped into `max_length` blocks (with `packing_strategy="bfd"`, the default,
    padding-free is switched on as well)."""
    padding_free: bool = KEYS.row("padding_free").default
    """`padding_free`: the batch flattened into one row without padding (FlashAttention only)."""
    loss: Loss = Loss.TRL_FUSED
    """The loss path of `SFTTrainer.compute_loss` with the default `loss_type="nll"`."""


def trl_sft_defaults(stack: Stack) -> TrlSftDefaults:
    """TRL's SFT defaults on this stack.

    Established for TRL 1.16.0 (trl/trainer/sft_config.py: `max_length=1024`, `packing=False`,
    `padding_free=False`, `loss_type="nll"`; trl/trainer/sft_trainer.py computes "nll" through the fused
    LM head). Lengths and packing are taken as 1.16's for every version (not established earlier); the
    loss is TRL's fused head where the stack's TRL has it (`trl_fused_lm_head`), else transformers' own.
    """
    return TrlSftDefaults(loss=Loss.TRL_FUSED if trl_fused_lm_head(stack) else Loss.HF)


__all__ = ["TrlSftDefaults", "trl_sft_defaults"]
