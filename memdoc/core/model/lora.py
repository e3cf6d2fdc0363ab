"""LoRA targeting in one place: which modules get adapters, the defaults, and the dropout memdoc assumes.

peft matches `target_modules` against the last component of a module's name (`q_proj`, …), or
takes "all-linear" for every `nn.Linear` except the LM head. Fused MoE expert tensors and routers
are not `nn.Linear` modules in transformers, so they are never adapted. Without named targets, peft
uses a per-architecture default (`TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING`): q_proj and
v_proj for most families; `FAMILY_DEFAULT_TARGETS` lists those whose attention names differ.

Pure Python: plans, models and linears are read through their attributes only (no imports of the
types at run time, so `memdoc.core.model.plan` can take its constants from here).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only
    from memdoc.core.model.model_spec import ModelSpec
    from memdoc.core.model.params import Linear
    from memdoc.core.model.plan import TrainingPlan

ALL_LINEAR = "all-linear"
"""The target that adapts every decoder linear (peft's "all-linear")."""

DEFAULT_TARGETS = ("q_proj", "v_proj")
"""peft's default targets for Llama-style attention (and memdoc's plan default)."""

FAMILY_DEFAULT_TARGETS: dict[str, tuple[str, ...]] = {
    "phi3": ("qkv_proj",),
    "gpt2": ("c_attn",),
    "gpt_neox": ("query_key_value",),
    "falcon": ("query_key_value",),
    "bert": ("query", "value"),
    "deepseek_v2": ("q_proj", "kv_b_proj"),
}
"""peft's defaults for the families whose attention has no q_proj/v_proj (DeepSeek-V2's MLA: the
query and the key/value up-projection)."""

_EVERYTHING = "*"
_NOT_ADAPTED_GROUPS = ("experts", "router")


def default_targets(family: str) -> tuple[str, ...]:
    """The adapters peft puts on this architecture family when none are named."""
    return FAMILY_DEFAULT_TARGETS.get(family, DEFAULT_TARGETS)


def adapted_names(plan: TrainingPlan) -> frozenset[str] | None:
    """Module names that get LoRA adapters (None = everything trains: full fine-tuning)."""
    if not plan.is_peft:
        return None
    if ALL_LINEAR in plan.lora_targets:
        return frozenset({_EVERYTHING})
    return frozenset(plan.lora_targets)


def is_trained(linear: Linear, names: frozenset[str] | None) -> bool:
    """Is this linear trained (its weight, or a LoRA adapter on it)? Then it keeps its input for backward.

    `names` is `adapted_names(plan)`.
    """
    if names is None:
        return True
    if linear.group in _NOT_ADAPTED_GROUPS:
        return False  # peft's all-linear targets nn.Linear modules; fused expert tensors are not adapted
    return _EVERYTHING in names or linear.name.split(".")[-1] in names


def is_adaptable(linear: Linear) -> bool:
    """Can peft put an adapter on this linear (an nn.Linear of the decoder)?"""
    return linear.group not in _NOT_ADAPTED_GROUPS


def fit_lora_targets(plan: TrainingPlan, model: ModelSpec) -> TrainingPlan:
    """A LoRA plan whose targets name no module of `model` gets peft's default targets for it.

    The ladder and prescriptions switch plans to LoRA with the default q_proj,v_proj; Phi-3,
    GPT-2, NeoX, Falcon and DeepSeek-V2 name their projections differently.
    """
    if not plan.is_peft or ALL_LINEAR in plan.lora_targets or not model.linear_names:
        return plan
    if set(plan.lora_targets) & model.linear_names:
        return plan
    return plan.replace(lora_targets=model.default_lora_targets)


def peft_target_modules(plan: TrainingPlan) -> str | list[str]:
    """`LoraConfig(target_modules=…)` for this plan: "all-linear" or the list of names."""
    return ALL_LINEAR if ALL_LINEAR in plan.lora_targets else list(plan.lora_targets)


def lora_alpha(plan: TrainingPlan) -> int:
    """The plan's LoRA alpha; unset means 2 × rank (memory-neutral)."""
    return plan.lora_alpha if plan.lora_alpha is not None else 2 * plan.lora_rank


__all__ = [
    "ALL_LINEAR",
    "DEFAULT_TARGETS",
    "FAMILY_DEFAULT_TARGETS",
    "adapted_names",
    "default_targets",
    "fit_lora_targets",
    "is_adaptable",
    "is_trained",
    "lora_alpha",
    "peft_target_modules",
]
