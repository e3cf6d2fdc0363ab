"""LoRA targeting in one place: which modules get adapters, the defaults, and the dropout memdoc assumes.

peft matches `target_modules` against the last component of a module's name (`q_proj`, …), or
takes "all-linear" for every `nn.Linear` except the LM head. Fused MoE expert tensors and routers
are not `nn.Linear` modules in transformers, so they are never adapted. Without named targets, peft
uses a per-architecture default (`TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING`): each family's
`lora_targets` (`memdoc.core.model.families`). The plan's target vocabulary (`ALL_LINEAR`,
`DEFAULT_TARGETS`) is the plan's own (`memdoc.core.model.plan`), and whether a linear can take an
adapter is the linear's (`Linear.adaptable`): this module sits above plan and model.
"""

from __future__ import annotations

from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.params import Linear
from memdoc.core.model.plan import ALL_LINEAR, TrainingPlan

_EVERYTHING = "*"


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
    if not linear.adaptable:
        return False  # peft's all-linear targets nn.Linear modules; fused expert tensors are not adapted
    return _EVERYTHING in names or linear.name.split(".")[-1] in names


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
    "adapted_names",
    "fit_lora_targets",
    "is_trained",
    "lora_alpha",
    "peft_target_modules",
]
