"""Qwen2.5-VL (and Qwen2-VL's processor): the windowed-attention tower, the patch merger, dynamic resolution.

Tower: transformers 5.24 `modeling_qwen2_5_vl.py` `Qwen2_5_VisionTransformerPretrainedModel`; processor:
`qwen2_vl/image_processing_qwen2_vl.py` `smart_resize` and `Qwen2VLImageProcessor._preprocess`, the video
processor `qwen2_vl/video_processing_qwen2_vl.py` `Qwen2VLVideoProcessor`.
"""

from __future__ import annotations

from memdoc.core.model.vision import tiling
from memdoc.core.model.vision.records import (
    ImageTokens,
    Projector,
    ProjectorShape,
    Tower,
    TowerSize,
    VisionRules,
    Vlm,
    linear,
)


def _count(v: dict) -> TowerSize:
    """Merger excluded: Conv3d patch embed without bias; blocks of two RMSNorms, fused qkv and proj with biases, a
    gated MLP with biases."""
    h, i, depth = int(v.get("hidden_size", 3584)), int(v.get("intermediate_size", 3420)), int(v.get("depth", 32))
    p, t = int(v.get("patch_size", 14)), int(v.get("temporal_patch_size", 2))
    block = 2 * h + linear(h, 3 * h) + linear(h, h) + 2 * linear(h, i) + linear(i, h)
    patch = int(v.get("in_channels", v.get("in_chans", 3))) * t * p * p * h
    return TowerSize(depth, h, int(v.get("num_heads", 16)), i, p, None, patch + depth * block, t)


TOWER = Tower(
    kind="qwen2_5_vl",
    count=_count,
    attention=("qkv", "proj"),  # Qwen2_5_VLVisionAttention
    mlp=("gate_proj", "up_proj", "down_proj"),  # Qwen2_5_VLMLP
    fused_qkv=True,
    rms_norm=True,
    gated_mlp=True,
    rotary=True,
    final_norm=False,
    depth_key="depth",
    full_attention=(7, 15, 23, 31),
    out_hidden=True,
    source="modeling_qwen2_5_vl.py Qwen2_5_VisionTransformerPretrainedModel",
)


def _merger(config: dict, t: TowerSize, out: int) -> tuple[int, int, int]:
    """`Qwen2_5_VLPatchMerger`: RMSNorm, then Linear(h·m², h·m²) → GELU → Linear(h·m², out)."""
    m = int(config["vision_config"].get("spatial_merge_size", 2))
    wide = t.hidden * m * m
    return t.hidden + linear(wide, wide) + linear(wide, out), m, wide


VLM = Vlm(
    model_type="qwen2_5_vl",
    tower="qwen2_5_vl",
    text_type="qwen2_5_vl_text",
    projector=Projector(count=_merger, shape=ProjectorShape.MERGER, linears=("0", "2")),  # Qwen2_5_VLPatchMerger.mlp
    tower_path="visual",
    projector_paths=("visual.merger",),
    tie_from_text=True,
    source="configuration_qwen2_5_vl.py Qwen2_5_VLConfig",
)


def qwen_tokens(height: int, width: int, rules: VisionRules, min_pixels: int, max_pixels: int, frames: int):
    """Qwen2/2.5/3-VL: `smart_resize` to multiples of patch × merge, one patch per `patch`² pixels (per temporal
    patch of 2 frames; an image is one), merged 2×2 into one token (`Qwen2VLImageProcessor._preprocess`, the
    processor's `replace_image_token`: grid_thw.prod() // merge²)."""
    resized_h, resized_w = tiling.smart_resize(height, width, rules.patch * rules.merge, min_pixels, max_pixels)
    temporal = -(-frames // 2)  # the last frame repeated up to an even count; an image is one temporal patch
    patches = temporal * (resized_h // rules.patch) * (resized_w // rules.patch)
    return ImageTokens(text=patches // rules.merge**2, encoder=patches, views=temporal)


def qwen_image(height: int, width: int, rules: VisionRules, _pan: bool) -> ImageTokens:
    """One image, within the image processor's pixel bounds."""
    return qwen_tokens(height, width, rules, rules.min_pixels, rules.max_pixels, frames=1)


def qwen_video(height: int, width: int, frames: int, rules: VisionRules) -> ImageTokens:
    """A video: `Qwen2VLVideoProcessor._preprocess` repeats the last frame up to a multiple of
    `temporal_patch_size` and resizes each frame by `smart_resize` within the video's pixel bounds. Qwen3-VL's
    per-clip token cap (`max_video_tokens`) is not applied: frames beyond it cost less than this says."""
    return qwen_tokens(height, width, rules, rules.video_min_pixels, rules.video_max_pixels, frames=frames)


def qwen_rules(patch: int, pixels: tuple[int, int], video_pixels: tuple[int, int]) -> VisionRules:
    """A Qwen-VL processor: patch edge, image and video pixel bounds; merge 2, temporal patch 2."""
    return VisionRules(
        "qwen",
        qwen_image,
        patch,
        2,
        *pixels,
        video=qwen_video,
        video_min_pixels=video_pixels[0],
        video_max_pixels=video_pixels[1],
        has_pixel_bounds=True,
        type_ids="mm_token_type_ids",
        rope_index=True,
    )


RULES = qwen_rules(14, (3136, 12845056), (100352, 602112))
"""Qwen/Qwen2.5-VL-7B-Instruct preprocessor_config.json: min_pixels 3136, max_pixels 12845056 (28×28×16384; the
class default `Qwen2VLImageProcessor.size` is 28×28×1280), patch 14, merge 2, temporal patch 2; the video processor
`Qwen2VLVideoProcessor.size` 128×28×28 .. 768×28×28. Qwen2-VL's checkpoints ship the same."""
