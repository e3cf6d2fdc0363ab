"""Which kernels run, as far as they change what is saved: eager attention, Liger's layers."""

from __future__ import annotations

from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.plan import Attention, Loss, TrainingPlan


def liger_layers(model: ModelSpec, plan: TrainingPlan) -> bool:
    """Are the decoder layers Liger's (`--loss fused` = `use_liger_kernel=True`, on a family it patches)?

    `Family.liger_norm`: the model types whose `apply_liger_kernel_to_*`
    (liger_kernel/transformers/monkey_patch.py) swaps RMSNorm, RoPE and the gated MLP.
    """
    return plan.loss is Loss.FUSED and model.arch.liger_norm


def liger_glu(model: ModelSpec, plan: TrainingPlan) -> bool:
    """Is the MLP's activation Liger's SiLU/GELU-mul kernel (saves a and b, writes their gradients in place)?"""
    return liger_layers(model, plan) and model.arch.liger_glu and not model.is_moe


def eager_attention(model: ModelSpec, plan: TrainingPlan) -> bool:
    """Eager attention is what runs: asked for, or the only kernel transformers has (Gemma-2)."""
    return plan.attention is Attention.EAGER or model.arch.eager_only


__all__ = ["eager_attention", "liger_glu", "liger_layers"]
