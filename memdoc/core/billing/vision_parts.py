"""Which vision parts of a VLM train, and how: the plan's `--vision-tower` / `--projector` (`PartPolicy`) with its
method and LoRA targets -> full weights, adapters on some linears, or frozen.

* Full fine-tuning: `auto` and `trained` train the part's weights (TRL 1.16's SFTTrainer freezes nothing);
  `frozen` leaves them without gradients (LLaMA-Factory 0.9.5 `freeze_vision_tower` / `freeze_multi_modal_projector`,
  true by default there: `hparams/finetuning_args.py`).
* LoRA/QLoRA: every base weight is frozen (peft). `auto` adapts the part's linears whose names the targets hold —
  peft 0.21 matches `target_modules` on every module name's last part (`tuners_utils.check_target_module_exists`),
  so q_proj/v_proj reach SigLIP's, Idefics3's, Pixtral's and Llama-3.2-Vision's attention, and gate_proj/up_proj/
  down_proj Qwen2.5-VL's vision MLP — and `all-linear` takes every `nn.Linear` but the output embedding
  (`_maybe_include_all_linear_layers`), the vision tower's and projector's included. `trained` adapts all the
  part's linears; `frozen` none.

The linears are the transformers 5.24 modules (names as peft sees them), read from each tower's and projector's
record (`memdoc.core.model.vision`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.plan import ALL_LINEAR, Method, TrainingPlan
from memdoc.core.model.plan_vision import PartPolicy
from memdoc.core.model.vision.spec import projector_of

FULL, ADAPTERS, FROZEN = "full", "adapters", "frozen"
"""How a part trains: its weights, LoRA adapters on some of its linears, or not at all."""


def projector_linears(model: ModelSpec) -> list[tuple[str, int, int]]:
    """(name, in, out) of the projector's `nn.Linear`s (Gemma 3's projection is a bare Parameter: none)."""
    vision = model.vision
    assert vision is not None
    return projector_of(model.model_type).linear_shapes(vision.projector_in, vision.projector_out)


@dataclass(frozen=True)
class PartTraining:
    """How the tower and the projector train under a plan."""

    tower: str
    tower_adapted: frozenset[str]
    """The tower's linear names with LoRA adapters (ADAPTERS only)."""
    projector: str
    projector_adapted: frozenset[str]


def _part(policy: PartPolicy, plan: TrainingPlan, linears: list[tuple[str, int, int]]) -> tuple[str, frozenset]:
    names = frozenset(name for name, _, _ in linears)
    if policy is PartPolicy.FROZEN:
        return FROZEN, frozenset()
    if plan.method is Method.FULL:
        return FULL, frozenset()
    if policy is PartPolicy.TRAINED or ALL_LINEAR in plan.lora_targets:
        adapted = names
    else:
        adapted = names & {t.split(".")[-1] for t in plan.lora_targets}
    return (ADAPTERS, adapted) if adapted else (FROZEN, frozenset())


def part_training(model: ModelSpec, plan: TrainingPlan) -> PartTraining | None:
    """How the tower and projector of `model` train under `plan`; None for a text model."""
    if model.vision is None:
        return None
    tower, tower_adapted = _part(plan.vision_tower, plan, model.vision.linears())
    projector, projector_adapted = _part(plan.projector, plan, projector_linears(model))
    return PartTraining(tower, tower_adapted, projector, projector_adapted)


def frozen_vision_params(model: ModelSpec, plan: TrainingPlan) -> int:
    """Full fine-tuning: the vision parameters without gradients (frozen tower and/or projector)."""
    parts = part_training(model, plan)
    if parts is None or plan.method is not Method.FULL:
        return 0
    frozen = model.params.vision if parts.tower == FROZEN else 0
    return frozen + (model.params.projector if parts.projector == FROZEN else 0)


def vision_linear_params(model: ModelSpec) -> int:
    """Weights of the vision tower's and projector's `nn.Linear`s (biases excluded); 0 for a text model."""
    if model.vision is None:
        return 0
    layers = model.vision.depth
    tower = sum(i * o for _, i, o in model.vision.linears())
    return layers * tower + sum(i * o for _, i, o in projector_linears(model))


def vision_adapter_shapes(model: ModelSpec, plan: TrainingPlan) -> Counter:
    """LoRA: {(in, out): count} of the vision linears with adapters (tower blocks × layers, projector once)."""
    parts = part_training(model, plan)
    shapes: Counter = Counter()
    if parts is None or plan.method is Method.FULL:
        return shapes
    layers = model.vision.depth
    for name, i, o in model.vision.linears():
        if name in parts.tower_adapted:
            shapes[(i, o)] += layers
    for name, i, o in projector_linears(model):
        if name in parts.projector_adapted:
            shapes[(i, o)] += 1
    return shapes


__all__ = [
    "ADAPTERS",
    "FROZEN",
    "FULL",
    "PartTraining",
    "frozen_vision_params",
    "part_training",
    "projector_linears",
    "vision_adapter_shapes",
    "vision_linear_params",
]
