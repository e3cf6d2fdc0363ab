"""LLaVA-1.5 (a CLIP tower, one fixed 336² view) and LLaVA-OneVision (a SigLIP tower, anyres tiles): the MLP projector.

transformers 5.24 `modeling_llava.py` `LlavaMultiModalProjector`, `configuration_llava.py` `LlavaConfig`,
`configuration_llava_onevision.py`, `processing_llava_onevision.py` `LlavaOnevisionProcessor`,
`image_processing_llava_onevision.py` `LlavaOnevisionImageProcessor`.
"""

from __future__ import annotations

from memdoc.core.model.vision import tiling
from memdoc.core.model.vision.records import (
    ImageTokens,
    Projector,
    ProjectorShape,
    TowerSize,
    VisionRules,
    Vlm,
    linear,
)


def feature_layers(config: dict, default: int | list[int]) -> int:
    """How many encoder layers feed the projector (`vision_feature_layer`: one index or a list)."""
    layer = config.get("vision_feature_layer", default)
    return len(layer) if isinstance(layer, list) else 1


def _mlp(config: dict, t: TowerSize, out: int, *, feature_layer: int, newline: bool) -> tuple[int, int, int]:
    """`LlavaMultiModalProjector`: Linear(h × feature layers, out) → GELU → Linear(out, out), biased unless
    `multimodal_projector_bias` is false; LLaVA-OneVision adds its `image_newline` vector (out)."""
    width = t.hidden * feature_layers(config, feature_layer)
    bias = bool(config.get("multimodal_projector_bias", True))
    return linear(width, out, bias) + linear(out, out, bias) + (out if newline else 0), 1, width


def _llava(config: dict, t: TowerSize, out: int) -> tuple[int, int, int]:
    return _mlp(config, t, out, feature_layer=-2, newline=False)


def _onevision(config: dict, t: TowerSize, out: int) -> tuple[int, int, int]:
    return _mlp(config, t, out, feature_layer=-1, newline=True)


MLP_LINEARS = ("linear_1", "linear_2")
"""`LlavaMultiModalProjector`'s linears (Mistral 3's are named the same)."""

VLM = Vlm(
    model_type="llava",
    tower="clip_vision_model",
    text_type="llama",
    projector=Projector(count=_llava, shape=ProjectorShape.MLP, linears=MLP_LINEARS),
    tower_path="vision_tower",
    projector_paths=("multi_modal_projector",),
    tie_from_text=True,
    source="configuration_llava.py LlavaConfig",
)
ONEVISION = Vlm(
    model_type="llava_onevision",
    tower="siglip_vision_model",
    text_type="qwen2",
    projector=Projector(count=_onevision, shape=ProjectorShape.MLP, linears=MLP_LINEARS),
    tower_path="vision_tower",
    projector_paths=("multi_modal_projector",),  # its `image_newline` is a bare Parameter of the model
    tie_from_text=True,
    source="configuration_llava_onevision.py LlavaOnevisionConfig",
)


def _fixed(_height: int, _width: int, rules: VisionRules, _pan: bool) -> ImageTokens:
    """One view resized and cropped to `tile`² (LLaVA-1.5's CLIPImageProcessor): its patches (+ CLS) through the
    encoder, `tokens_per_view` into the text (`LlavaProcessor`, the CLS dropped)."""
    return ImageTokens(
        text=rules.tokens_per_view, encoder=(rules.tile // rules.patch) ** 2 + int(rules.cls_token), views=1
    )


RULES = VisionRules("fixed", _fixed, 14, tile=336, tokens_per_view=576, cls_token=True)
"""llava-hf/llava-1.5-7b-hf: CLIPImageProcessor resize (shortest edge 336) + center crop 336², CLIP's 24×24 patches +
CLS, the CLS dropped (`vision_feature_select_strategy` "default"): 576 tokens whatever the size."""

_PINPOINTS = tuple((384 * a, 384 * b) for a in range(1, 7) for b in range(1, 7))
"""LlavaOnevisionImageProcessor.image_grid_pinpoints: every (h, w) of 1-6 × 384-px tiles."""


def _anyres(height: int, width: int, rules: VisionRules, _pan: bool) -> ImageTokens:
    """The base image plus the tiles of the best pinpoint canvas, each 729 SigLIP patches; the text gets the base's
    729 + the unpadded (and pooled) grid + one newline per row (`LlavaOnevisionProcessor._get_number_of_features`;
    `LlavaOnevisionImageProcessor.get_image_patches`)."""
    unpadded, newlines = tiling.anyres_features(
        height, width, rules.tile, rules.tokens_per_view, _PINPOINTS, rules.max_tiles
    )
    best_h, best_w = tiling.select_best_resolution(height, width, _PINPOINTS)
    views = 1 + (best_h // rules.tile) * (best_w // rules.tile)
    per_view = (rules.tile // rules.patch) ** 2
    return ImageTokens(text=rules.tokens_per_view + unpadded + newlines, encoder=views * per_view, views=views)


ONEVISION_RULES = VisionRules("anyres", _anyres, 14, tile=384, tokens_per_view=729, max_tiles=9)
"""llava-hf/llava-onevision-qwen2-7b-ov-hf: size 384, the default pinpoints, num_image_tokens 729 (SigLIP 27×27, no
CLS), vision_feature_select_strategy "full", vision_aspect_ratio "anyres_max_9"."""
