"""Pixtral: the RMSNorm tower with 2-D rotary positions, images at their own size with row breaks.

mistral-community/pixtral-12b is a `llava` with this tower (`registry.CHECKPOINT_RULES`); Mistral 3 builds on it
(`mistral3.py`). transformers 5.24 `modeling_pixtral.py` `PixtralVisionModel`, `configuration_pixtral.py`,
`processing_pixtral.py` `PixtralProcessor`, `image_processing_pil_pixtral.py`.
"""

from __future__ import annotations

from memdoc.core.model.vision import siglip, tiling
from memdoc.core.model.vision.records import ImageTokens, Tower, TowerSize, VisionRules, square

DEFAULTS = siglip.DEFAULTS | {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24}
DEFAULTS |= {"num_attention_heads": 16, "image_size": 1024, "patch_size": 16}
"""`PixtralVisionConfig`'s defaults."""


def _count(v: dict) -> TowerSize:
    """Conv2d patch embed without bias, `ln_pre` RMSNorm, blocks of two RMSNorms, q/k/v/o and a gated MLP, no biases
    (2-D RoPE: no position parameters)."""
    c = DEFAULTS | v
    h, i, layers = int(c["hidden_size"]), int(c["intermediate_size"]), int(c["num_hidden_layers"])
    p = square(c["patch_size"])
    block = 2 * h + 4 * h * h + 3 * h * i
    params = int(c["num_channels"]) * p * p * h + h + layers * block
    return TowerSize(layers, h, int(c["num_attention_heads"]), i, p, square(c["image_size"]), params)


TOWER = Tower(
    kind="pixtral",
    count=_count,
    attention=("q_proj", "k_proj", "v_proj", "o_proj"),  # PixtralAttention
    mlp=("gate_proj", "up_proj", "down_proj"),  # PixtralMLP
    rms_norm=True,
    gated_mlp=True,
    rotary=True,
    final_norm=False,
    source="modeling_pixtral.py PixtralVisionModel",
)


def _image(height: int, width: int, rules: VisionRules, _pan: bool) -> ImageTokens:
    """The image fitted within `longest_edge`, its edges rounded up to the merged grid (`PixtralProcessor.
    _process_images` passes patch × spatial_merge_size to the image processor's `get_resize_output_image_size`); the
    encoder runs on its `patch`-px patches, and the text gets one token per merged patch plus one
    [IMG_BREAK]/[IMG_END] per row (`PixtralProcessor.replace_image_token`)."""
    merged = rules.patch * rules.merge
    resized_h, resized_w = tiling.pixtral_resize(height, width, rules.longest_edge, merged)
    rows, cols = resized_h // merged, resized_w // merged
    patches = (resized_h // rules.patch) * (resized_w // rules.patch)
    return ImageTokens(text=rows * (cols + 1), encoder=patches, views=1)


def pixtral_rules(patch: int, merge: int, longest_edge: int) -> VisionRules:
    """A Pixtral processor: patch edge, spatial merge, longest edge."""
    return VisionRules("pixtral", _image, patch, merge, longest_edge=longest_edge)


RULES = pixtral_rules(16, 1, 1024)
"""mistral-community/pixtral-12b: longest_edge 1024, patch 16, spatial_merge_size 1."""
