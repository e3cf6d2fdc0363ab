"""Which parts of a traced VLM train: the vision tower and projector policies of the plan, as the bill reads them.

The plan's `vision_tower` / `projector` values (`auto`, `trained`, `frozen`; `auto` when the plan has no such field)
mean, as in the bill (`core/model/plan_vision.py` `PartPolicy`):

- auto: as TRL's SFTTrainer runs a VLM (`trl/trainer/sft_trainer.py` 1.16 freezes nothing): a full fine-tune trains
  the part; LoRA adapts its linears where peft's own target matching reaches them (peft 0.21
  `check_target_module_exists`: a name suffix; `all-linear`: every `nn.Linear` but the output embedding);
- trained: a full fine-tune trains it; LoRA adapts every linear of it;
- frozen: no gradient (LLaMA-Factory 0.9.5's `freeze_vision_tower`, `freeze_multi_modal_projector`); no adapter.

The parts are found by the module paths of transformers 5.24's VLM classes, as each VLM's record names them
(`Vlm.tower_path`, `Vlm.projector_paths`): the tower `visual` (Qwen-VL), `vision_tower` (SigLIP in Gemma 3 and
LLaVA, Pixtral) or `vision_model` (Idefics3, Mllama); the projector `multi_modal_projector`, `connector` (Idefics3)
or the Qwen-VL tower's own `merger` / `deepstack_merger_list` (counted as the projector).
"""

from __future__ import annotations

import re

from memdoc.core.model.vision.registry import VLMS

TOWERS = tuple(sorted({vlm.tower_path for vlm in VLMS.values()}))
"""Every VLM's tower module path."""
PROJECTORS = tuple(sorted({path for vlm in VLMS.values() for path in vlm.projector_paths}))
"""Every VLM's projector module paths (tried before the towers: Qwen-VL's merger sits inside its tower)."""


def part_of(name: str) -> str:
    """'projector', 'vision_tower' or 'language' for a module path of a VLM."""
    if any(re.search(rf"(^|\.){re.escape(p)}(\.|$)", name) for p in PROJECTORS):
        return "projector"
    if any(re.search(rf"(^|\.){re.escape(t)}(\.|$)", name) for t in TOWERS):
        return "vision_tower"
    return "language"


def policies(plan) -> dict[str, str]:
    """{'vision_tower': policy, 'projector': policy} of the plan ('auto' when it has no such field)."""
    return {part: str(getattr(getattr(plan, part, None), "value", "auto")) for part in ("vision_tower", "projector")}


def freeze_parts(model, plan) -> list[str]:
    """Turn off the gradients of the parts the plan freezes (a full fine-tune); returns the frozen parts."""
    frozen = [part for part, policy in policies(plan).items() if policy == "frozen"]
    if frozen:
        for name, param in model.named_parameters():
            if part_of(name) in frozen:
                param.requires_grad_(False)
    return frozen


def part_targets(model, targets: str | list[str], tower: str, projector: str) -> str | list[str]:
    """peft's `target_modules` for these policies: the plan's own `targets` when both are auto (peft decides, as
    under TRL), else the full paths of the linears to adapt — the language model's and auto parts' by peft's rule,
    every linear of a trained part, none of a frozen one."""
    from torch import nn

    if tower == projector == "auto":
        return targets
    wanted = {"vision_tower": tower, "projector": projector, "language": "auto"}
    output = model.get_output_embeddings()
    names = []
    for name, module in model.named_modules():
        if not isinstance(module, nn.Linear) or module is output:
            continue
        policy = wanted[part_of(name)]
        leaf = name.rsplit(".", 1)[-1]
        if policy == "trained" or (policy == "auto" and (targets == "all-linear" or leaf in targets)):
            names.append(name)
    return names


__all__ = ["freeze_parts", "part_of", "part_targets", "policies"]
