"""Image (and video) -> tokens, per vision-language family, from the processors' rules in transformers 5.24.

`image_tokens(family, width, height)` gives an `ImageTokens`: the placeholder tokens the processor adds to the text
sequence (what `Processor._get_num_multimodal_tokens` calls `num_image_tokens`: the positions the image features
fill, counting Pixtral's row breaks and LLaVA-OneVision's newlines, which are image features too), the vision
encoder's own sequence (its patches before any merge or pooling, summed over the views it runs on), the views, and
for Llama-3.2-Vision the cross-attention states' length instead of text tokens.

`family` is the HF `model_type`. The rules' values (`VisionRules`) are the published checkpoints'
preprocessor_config.json / processor_config.json where they differ from the classes' `__init__` defaults; each
entry of `RULES` names its source. Callers with a checkpoint's own values pass `rules=` (see `rules_for`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from memdoc.core.model import image_tiling as tiling

_ONEVISION_PINPOINTS = tuple((384 * a, 384 * b) for a in range(1, 7) for b in range(1, 7))
"""LlavaOnevisionImageProcessor.image_grid_pinpoints (transformers 5.24): every (h, w) of 1-6 × 384-px tiles."""


@dataclass(frozen=True)
class VisionRules:
    """One family's image-processor settings (the fields a family does not use stay at their defaults)."""

    kind: str
    """Which rule applies: qwen, anyres, gemma3, mllama, idefics3, pixtral or fixed (one view at `tile`²)."""
    patch: int
    """The vision encoder's patch edge in pixels."""
    merge: int = 1
    """Patches merged per edge before the language model (Qwen's merger 2, Mistral-3's patch merger 2)."""
    min_pixels: int = 0
    """Qwen: the smallest resized area (`size["shortest_edge"]`, formerly `min_pixels`)."""
    max_pixels: int = 0
    """Qwen: the largest resized area (`size["longest_edge"]`, formerly `max_pixels`)."""
    tile: int = 0
    """The view's edge: anyres tile 384, Gemma 3 896, Mllama tile 560, Idefics3 `max_image_size` 364/384."""
    longest_edge: int = 0
    """Idefics3/SmolVLM `size["longest_edge"]`; Pixtral's largest image edge."""
    tokens_per_view: int = 0
    """Tokens of one view after pooling/pixel shuffle: Gemma 3 256, Idefics3 169, SmolVLM 81, OneVision 729."""
    max_tiles: int = 0
    """Mllama `max_image_tiles` 4; OneVision's anyres_max_9."""
    cls_token: bool = False
    """The encoder prepends a class token per view (Mllama)."""
    video: bool = False
    """The family takes video (frames in `temporal_patch` pairs)."""
    video_min_pixels: int = 0
    """Qwen video processor `size["shortest_edge"]`."""
    video_max_pixels: int = 0
    """Qwen video processor `size["longest_edge"]`."""

    @property
    def has_pixel_bounds(self) -> bool:
        """The processor resizes within min_pixels/max_pixels (Qwen-VL's dynamic resolution)."""
        return self.kind == "qwen"

    @property
    def has_pan_and_scan(self) -> bool:
        """The processor can crop extra views (Gemma 3's `do_pan_and_scan`)."""
        return self.kind == "gemma3"


QWEN25 = VisionRules("qwen", 14, 2, 3136, 12845056, video=True, video_min_pixels=100352, video_max_pixels=602112)
"""Qwen/Qwen2.5-VL-7B-Instruct preprocessor_config.json: min_pixels 3136, max_pixels 12845056 (28×28×16384; the
class default `Qwen2VLImageProcessor.size` is 28×28×1280), patch 14, merge 2, temporal patch 2; the video processor
`Qwen2VLVideoProcessor.size` 128×28×28 .. 768×28×28 (`qwen2_vl/video_processing_qwen2_vl.py`)."""

RULES: dict[str, VisionRules] = {
    "qwen2_vl": QWEN25,
    "qwen2_5_vl": QWEN25,
    "qwen3_vl": VisionRules(
        "qwen", 16, 2, 65536, 16777216, video=True, video_min_pixels=131072, video_max_pixels=786432
    ),
    # Qwen/Qwen3-VL-8B-Instruct preprocessor_config.json: size 65536 .. 16777216 px, patch 16 (the processor is
    # Qwen2VLImageProcessor); video: `Qwen3VLVideoProcessor.size` 128×32×32 .. 768×32×32.
    "gemma3": VisionRules("gemma3", 14, tile=896, tokens_per_view=256),
    # google/gemma-3-4b-it: size 896, image_seq_length 256 (SigLIP 64×64 patches average-pooled 4×4), pan-and-scan
    # off by default (do_pan_and_scan null); when on: min crop 256, at most 4 crops, from an aspect of 1.2.
    "llava_onevision": VisionRules("anyres", 14, tile=384, tokens_per_view=729, max_tiles=9),
    # llava-hf/llava-onevision-qwen2-7b-ov-hf: size 384, the default pinpoints, num_image_tokens 729 (SigLIP 27×27,
    # no CLS), vision_feature_select_strategy "full", vision_aspect_ratio "anyres_max_9".
    "mllama": VisionRules("mllama", 14, tile=560, max_tiles=4, cls_token=True),
    # meta-llama/Llama-3.2-11B-Vision: size 560×560, max_image_tiles 4; one <|image|> token in the text.
    "idefics3": VisionRules("idefics3", 14, tile=364, longest_edge=1456, tokens_per_view=169),
    # HuggingFaceM4/Idefics3-8B-Llama3: size longest_edge 4×364, max_image_size 364, image_seq_len 169 (26×26 / 2²).
    "smolvlm": VisionRules("idefics3", 14, tile=384, longest_edge=1536, tokens_per_view=81),
    # HuggingFaceTB/SmolVLM2-2.2B-Instruct: size longest_edge 4×384, max_image_size 384, image_seq_len 81 (27² / 3²).
    "pixtral": VisionRules("pixtral", 16, longest_edge=1024),
    # mistral-community/pixtral-12b: longest_edge 1024, patch 16, spatial_merge_size 1.
    "mistral3": VisionRules("pixtral", 14, 2, longest_edge=1540),
    # mistralai/Mistral-Small-3.1-24B-Instruct-2503: longest_edge 1540, patch 14, spatial_merge_size 2.
}
RULES["llava"] = VisionRules("fixed", 14, tile=336, tokens_per_view=576, cls_token=True)
"""HF model_type -> the image-processor settings its published checkpoints ship. `llava`: llava-hf/llava-1.5-7b-hf,
CLIPImageProcessor resize (shortest edge 336) + center crop 336², CLIP's 24×24 patches + CLS, the CLS dropped
(`vision_feature_select_strategy` "default"): 576 tokens whatever the size. Pixtral's checkpoints also load as `llava`,
with a pixtral tower: `image_family` tells them apart."""


CHECKPOINT_RULES: dict[tuple[str, str | int], str] = {("llava", "pixtral"): "pixtral", ("idefics3", 384): "smolvlm"}
"""(model_type, the vision tower's kind or image size) -> the key of `RULES` its checkpoints follow, where the
model_type alone does not say: mistral-community/pixtral-12b is a `llava` with a pixtral tower; SmolVLM v1
(HuggingFaceTB/SmolVLM-Instruct) an `idefics3` with 384-px tiles (SmolVLM's processor rule)."""


def image_family(model_type: str, tower: str | None = None, tile: int | None = None) -> str:
    """The key of `RULES` a VLM's checkpoints follow (`CHECKPOINT_RULES`, else its model_type)."""
    return CHECKPOINT_RULES.get((model_type, tower)) or CHECKPOINT_RULES.get((model_type, tile)) or model_type


GEMMA3_PAN_AND_SCAN = (256, 4, 1.2)
"""google/gemma-3-4b-it preprocessor_config.json: pan_and_scan_min_crop_size, _max_num_crops, _min_ratio_to_activate."""


@dataclass(frozen=True)
class ImageTokens:
    """One image's (or video's) cost in tokens."""

    text: int
    """Placeholder tokens added to the language model's sequence (Mllama: 1, the <|image|> token)."""
    encoder: int
    """The vision encoder's sequence, all views together: patches before merge/pooling (+ CLS, + padding)."""
    views: int
    """Views the encoder runs on: tiles, crops and the overview (Qwen: 1, or the temporal patches of a video)."""
    cross: int = 0
    """Mllama: the cross-attention states' length (keys/values the text attends to), 0 for the others."""


def rules_for(family: str, **overrides) -> VisionRules:
    """The family's published settings with `overrides` (e.g. min_pixels/max_pixels) applied; KeyError if unknown."""
    rules = RULES[family]
    return replace(rules, **{k: v for k, v in overrides.items() if v is not None})


def image_tokens(
    family: str, width: int, height: int, rules: VisionRules | None = None, *, pan_and_scan: bool = False
) -> ImageTokens:
    """One `width`×`height` image of `family` (HF model_type) -> its tokens, by the family's processor rule."""
    rules = rules or RULES[family]
    if width < 1 or height < 1:
        raise ValueError(f"an image is at least 1×1 px, got {width}×{height}")
    if rules.kind == "qwen":
        return _qwen(height, width, rules, rules.min_pixels, rules.max_pixels, frames=1)
    return _BY_KIND[rules.kind](height, width, rules, pan_and_scan)


def video_tokens(family: str, width: int, height: int, frames: int, rules: VisionRules | None = None) -> ImageTokens:
    """A video of `frames` frames at `width`×`height` -> its tokens (Qwen-VL: frames in pairs, the temporal patch;
    transformers 5.24 `qwen2_vl/video_processing_qwen2_vl.py` `Qwen2VLVideoProcessor._preprocess`, which repeats
    the last frame up to a multiple of `temporal_patch_size`, and resizes each frame by `smart_resize` within the
    video's pixel bounds). Qwen3-VL's per-clip token cap (`max_video_tokens`) is not applied: frames beyond it
    cost less than this says."""
    rules = rules or RULES[family]
    if not rules.video:
        raise ValueError(f"{family} takes no video")
    return _qwen(height, width, rules, rules.video_min_pixels, rules.video_max_pixels, frames=frames)


def _qwen(height: int, width: int, rules: VisionRules, min_pixels: int, max_pixels: int, frames: int) -> ImageTokens:
    """Qwen2/2.5/3-VL: `smart_resize` to multiples of patch × merge, one patch per `patch`² pixels (per temporal
    patch of 2 frames; an image is one), merged 2×2 into one token (`Qwen2VLImageProcessor._preprocess`, the
    processor's `replace_image_token`: grid_thw.prod() // merge²)."""
    resized_h, resized_w = tiling.smart_resize(height, width, rules.patch * rules.merge, min_pixels, max_pixels)
    temporal = -(-frames // 2)  # the last frame repeated up to an even count; an image is one temporal patch
    patches = temporal * (resized_h // rules.patch) * (resized_w // rules.patch)
    return ImageTokens(text=patches // rules.merge**2, encoder=patches, views=temporal)


def _anyres(height: int, width: int, rules: VisionRules, _pan: bool) -> ImageTokens:
    """LLaVA-OneVision: the base image plus the tiles of the best pinpoint canvas, each 729 SigLIP patches; the
    text gets the base's 729 + the unpadded (and pooled) grid + one newline per row
    (`LlavaOnevisionProcessor._get_number_of_features`; `LlavaOnevisionImageProcessor.get_image_patches`)."""
    unpadded, newlines = tiling.anyres_features(
        height, width, rules.tile, rules.tokens_per_view, _ONEVISION_PINPOINTS, rules.max_tiles
    )
    best_h, best_w = tiling.select_best_resolution(height, width, _ONEVISION_PINPOINTS)
    views = 1 + (best_h // rules.tile) * (best_w // rules.tile)
    per_view = (rules.tile // rules.patch) ** 2
    return ImageTokens(text=rules.tokens_per_view + unpadded + newlines, encoder=views * per_view, views=views)


def _gemma3(height: int, width: int, rules: VisionRules, pan: bool) -> ImageTokens:
    """Gemma 3: every view resized to 896², 4096 SigLIP patches pooled to 256 tokens; pan-and-scan adds crops
    (`Gemma3ImageProcessorPil._preprocess`; `Gemma3Processor.image_seq_length`)."""
    crops = tiling.pan_and_scan_crops(height, width, *GEMMA3_PAN_AND_SCAN) if pan else 0
    views = 1 + crops
    return ImageTokens(
        text=views * rules.tokens_per_view, encoder=views * (rules.tile // rules.patch) ** 2, views=views
    )


def _mllama(_height: int, _width: int, rules: VisionRules, _pan: bool) -> ImageTokens:
    """Llama-3.2-Vision: the image tiled onto up to 4 tiles of 560² (`get_optimal_tiled_canvas`); pixel_values
    always hold `max_image_tiles` tiles (`pack_images`), so whatever the size the encoder runs on 4 tiles of
    1600 patches + CLS, padded to a multiple of 8
    (`MllamaVisionModel.forward`), and the cross-attention states hold 4 × 1601 per image; the text holds one
    <|image|> token (`MllamaProcessor`)."""
    per_tile = (rules.tile // rules.patch) ** 2 + int(rules.cls_token)
    padded = per_tile + (8 - per_tile % 8) % 8
    return ImageTokens(
        text=1, encoder=rules.max_tiles * padded, views=rules.max_tiles, cross=rules.max_tiles * per_tile
    )


def _idefics3(height: int, width: int, rules: VisionRules, _pan: bool) -> ImageTokens:
    """Idefics3/SmolVLM: split into rows × cols tiles of `max_image_size` plus a global view (or one view), each
    `image_seq_len` tokens after pixel shuffle (`Idefics3Processor`, `get_image_prompt_string`)."""
    rows, cols = tiling.idefics3_grid(height, width, rules.longest_edge, rules.tile)
    views = rows * cols + 1 if rows else 1
    return ImageTokens(
        text=views * rules.tokens_per_view, encoder=views * (rules.tile // rules.patch) ** 2, views=views
    )


def _pixtral(height: int, width: int, rules: VisionRules, _pan: bool) -> ImageTokens:
    """Pixtral / Mistral-3.1: the image fitted within `longest_edge`, its edges rounded up to the merged grid
    (`PixtralProcessor._process_images` passes patch × spatial_merge_size to the image processor's
    `get_resize_output_image_size`); the encoder runs on its `patch`-px patches, and the text gets one token per
    merged patch plus one [IMG_BREAK]/[IMG_END] per row (`PixtralProcessor.replace_image_token`)."""
    merged = rules.patch * rules.merge
    resized_h, resized_w = tiling.pixtral_resize(height, width, rules.longest_edge, merged)
    rows, cols = resized_h // merged, resized_w // merged
    patches = (resized_h // rules.patch) * (resized_w // rules.patch)
    return ImageTokens(text=rows * (cols + 1), encoder=patches, views=1)


def _fixed(_height: int, _width: int, rules: VisionRules, _pan: bool) -> ImageTokens:
    """One view resized and cropped to `tile`² (LLaVA-1.5's CLIPImageProcessor): its patches (+ CLS) through the
    encoder, `tokens_per_view` into the text (`LlavaProcessor`, the CLS dropped)."""
    return ImageTokens(
        text=rules.tokens_per_view, encoder=(rules.tile // rules.patch) ** 2 + int(rules.cls_token), views=1
    )


_BY_KIND = {
    "anyres": _anyres,
    "gemma3": _gemma3,
    "mllama": _mllama,
    "idefics3": _idefics3,
    "pixtral": _pixtral,
    "fixed": _fixed,
}
