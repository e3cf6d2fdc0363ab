"""Gemma 3: a SigLIP tower, an average pool and projection, 256 tokens per 896² view, pan-and-scan crops.

transformers 5.24 `modeling_gemma3.py` `Gemma3MultiModalProjector`, `configuration_gemma3.py` `Gemma3Config`,
`image_processing_pil_gemma3.py` `Gemma3ImageProcessorPil`, `processing_gemma3.py` `Gemma3Processor`.
"""

from __future__ import annotations

from memdoc.core.model.vision import tiling
from memdoc.core.model.vision.records import ImageTokens, Projector, ProjectorShape, TowerSize, VisionRules, Vlm


def _projector(config: dict, t: TowerSize, out: int) -> tuple[int, int, int]:
    """`Gemma3MultiModalProjector`: a (vision h × text h) weight and an RMSNorm over vision h; an average pool of
    (patches per side / √mm_tokens_per_image) per side before it."""
    pool = (t.image // t.patch) // round(_tokens_per_image(config) ** 0.5) if t.image else 1
    return t.hidden * out + t.hidden, pool, t.hidden


def _tokens_per_image(config: dict) -> int:
    return int(config.get("mm_tokens_per_image", 256))


VLM = Vlm(
    model_type="gemma3",
    tower="siglip_vision_model",
    text_type="gemma3_text",
    projector=Projector(count=_projector, shape=ProjectorShape.POOL),  # a bare Parameter: no nn.Linear
    tower_path="vision_tower",
    projector_paths=("multi_modal_projector",),
    tied=True,
    tokens_per_image=_tokens_per_image,
    source="configuration_gemma3.py Gemma3Config",
)

PAN_AND_SCAN = (256, 4, 1.2)
"""google/gemma-3-4b-it preprocessor_config.json: pan_and_scan_min_crop_size, _max_num_crops, _min_ratio_to_activate."""


def _image(height: int, width: int, rules: VisionRules, pan: bool) -> ImageTokens:
    """Every view resized to 896², 4096 SigLIP patches pooled to 256 tokens; pan-and-scan adds crops
    (`Gemma3ImageProcessorPil._preprocess`; `Gemma3Processor.image_seq_length`)."""
    crops = tiling.pan_and_scan_crops(height, width, *PAN_AND_SCAN) if pan else 0
    views = 1 + crops
    return ImageTokens(
        text=views * rules.tokens_per_view, encoder=views * (rules.tile // rules.patch) ** 2, views=views
    )


RULES = VisionRules(
    "gemma3", _image, 14, tile=896, tokens_per_view=256, has_pan_and_scan=True, type_ids="token_type_ids"
)
"""google/gemma-3-4b-it: size 896, image_seq_length 256 (SigLIP 64×64 patches average-pooled 4×4), pan-and-scan off
by default (do_pan_and_scan null); when on: min crop 256, at most 4 crops, from an aspect of 1.2."""
