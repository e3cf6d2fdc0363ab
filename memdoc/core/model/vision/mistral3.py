"""Mistral 3 (Mistral-Small-3.1): a Pixtral tower, the patch merger and MLP projector, Pixtral's processor.

transformers 5.24 `modeling_mistral3.py` `Mistral3MultiModalProjector`, `configuration_mistral3.py` `Mistral3Config`.
"""

from __future__ import annotations

from memdoc.core.model.vision.llava import MLP_LINEARS, feature_layers
from memdoc.core.model.vision.pixtral import pixtral_rules
from memdoc.core.model.vision.records import Projector, ProjectorShape, TowerSize, Vlm, linear


def _projector(config: dict, t: TowerSize, out: int) -> tuple[int, int, int]:
    """`Mistral3MultiModalProjector`: RMSNorm, `Mistral3PatchMerger` (Linear(h·m², h), no bias), Linear(h × feature
    layers, out) → GELU → Linear(out, out), biased when `multimodal_projector_bias` (default off)."""
    m = int(config.get("spatial_merge_size", 2))
    width = t.hidden * feature_layers(config, -1)
    bias = bool(config.get("multimodal_projector_bias", False))
    return t.hidden + t.hidden * m * m * t.hidden + linear(width, out, bias) + linear(out, out, bias), m, width


VLM = Vlm(
    model_type="mistral3",
    tower="pixtral",
    text_type="mistral",
    projector=Projector(count=_projector, shape=ProjectorShape.MLP, linears=MLP_LINEARS),
    tower_path="vision_tower",
    projector_paths=("multi_modal_projector",),
    tied=True,
    source="configuration_mistral3.py Mistral3Config",
)

RULES = pixtral_rules(14, 2, 1540)
"""mistralai/Mistral-Small-3.1-24B-Instruct-2503: longest_edge 1540, patch 14, spatial_merge_size 2."""
