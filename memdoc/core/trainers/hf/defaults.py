"""The trainers' defaults for keys a user's config leaves out, per library version.

A key absent from a config takes the default of the trainer version that will run it (`Stack`).
"""

from __future__ import annotations

from dataclasses import dataclass

from memdoc.core.model.plan import Loss, Optimizer
from memdoc.core.model.stack import Stack, trl_fused_lm_head

# ---------------------------------------------------------------------------------------------
# Stack-dependent defaults (issue 22, "the stack is explicit"): transformers' optimizer, TRL's SFT
# lengths and loss path. The MoE expert layout and TRL's fused LM head are not about configs:
# `memdoc.core.model.stack.moe_experts_layout` and `trl_fused_lm_head`.
# ---------------------------------------------------------------------------------------------

FUSED_ADAMW_DEFAULT_SINCE = ("4.54.0", "2.8")
"""(transformers, torch) from which `TrainingArguments.optim` defaults to `adamw_torch_fused`.

transformers/training_args.py: `default_optim = "adamw_torch"`, then `"adamw_torch_fused"` if
`is_torch_greater_or_equal_than_2_8` — added by huggingface/transformers #37358 ("Defaults to
adamw_torch_fused for Pytorch>=2.8", merged 2025-07-10, first released in v4.54.0). Before it the default
was `adamw_torch` (#25109, July 2023; `adamw_hf` before that, billed here as foreach AdamW too)."""


def default_optimizer(stack: Stack) -> Optimizer:
    """transformers' default `optim` on this stack: fused AdamW (`adamw_torch_fused`, memdoc's `adamw-fused`)
    from transformers 4.54 with torch ≥ 2.8, else `adamw_torch` (memdoc's `adamw-foreach`).

    A library the stack does not know is taken at its newest version (fused AdamW on both counts).
    """
    transformers, torch = FUSED_ADAMW_DEFAULT_SINCE
    new_transformers = stack.version("transformers") is None or stack.at_least("transformers", transformers)
    new_torch = stack.version("torch") is None or stack.at_least("torch", torch)
    return Optimizer.ADAMW_FUSED if new_transformers and new_torch else Optimizer.ADAMW_FOREACH


def hf_default_optim(stack: Stack) -> str:
    """`default_optimizer` as the name `TrainingArguments.optim` takes (`adamw_torch_fused` / `adamw_torch`),
    for readers that map an absent `optim` key through the trainer's own names."""
    return "adamw_torch_fused" if default_optimizer(stack) is Optimizer.ADAMW_FUSED else "adamw_torch"


@dataclass(frozen=True)
class TrlSftDefaults:
    """TRL `SFTConfig` defaults that change memory, read from trl/trainer/sft_config.py (TRL 1.16.0)."""

    max_length: int | None = 1024
    """`max_length`: sequences are truncated to it (None: no truncation); with packing, the block length."""
    packing: bool = False
    """`packing`: sequences grouped into `max_length` blocks (with `packing_strategy="bfd"`, the default,
    padding-free is switched on as well)."""
    padding_free: bool = False
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


__all__ = ["FUSED_ADAMW_DEFAULT_SINCE", "TrlSftDefaults", "default_optimizer", "hf_default_optim", "trl_sft_defaults"]
