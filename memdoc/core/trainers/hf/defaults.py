"""transformers' defaults for keys a user's config leaves out, per library version (TRL's: `trl/defaults.py`).

A key absent from a config takes the default of the trainer version that will run it (`Stack`).
"""

from __future__ import annotations

from memdoc.core.model.plan import Optimizer
from memdoc.core.model.stack import Stack
from memdoc.core.trainers.hf.keys import KEYS

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
    return KEYS.row("optimizer").write(default_optimizer(stack).value)


__all__ = ["FUSED_ADAMW_DEFAULT_SINCE", "default_optimizer", "hf_default_optim"]
