"""The resizing and tiling rules of the vision-language models' image processors, as pure arithmetic on (height,
width): each function here mirrors one function of transformers 5.24 (`transformers/models/<family>/...`), named in
its docstring, and returns the sizes or counts that function produces without touching a pixel.

Each family's processor rule (`VisionRules.image`, in its module of this package) turns them into the tokens of
one image.
"""

from __future__ import annotations

import math


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """(height, width) -> the resized (height, width), both multiples of `factor` (patch × merge), the area within
    [min_pixels, max_pixels], the aspect kept as closely as possible: transformers 5.24
    `models/qwen2_vl/image_processing_qwen2_vl.py` `smart_resize` (Qwen2-VL, Qwen2.5-VL and Qwen3-VL images)."""
    if max(height, width) / min(height, width) > 200:
        raise ValueError(
            f"absolute aspect ratio must be smaller than 200, got {max(height, width) / min(height, width)}"
        )
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def select_best_resolution(height: int, width: int, pinpoints: tuple[tuple[int, int], ...]) -> tuple[int, int]:
    """The anyres canvas (height, width) among `pinpoints` that keeps the most of the image and wastes the least:
    transformers 5.24 `image_processing_utils.py` `select_best_resolution` (LLaVA-NeXT, LLaVA-OneVision)."""
    best, best_effective, best_wasted = pinpoints[0], 0, float("inf")
    for pin_h, pin_w in pinpoints:
        scale = min(pin_w / width, pin_h / height)
        down_w, down_h = int(width * scale), int(height * scale)
        effective = min(down_w * down_h, width * height)
        wasted = pin_w * pin_h - effective
        if effective > best_effective or (effective == best_effective and wasted < best_wasted):
            best, best_effective, best_wasted = (pin_h, pin_w), effective, wasted
    return best


def anyres_features(
    height: int, width: int, tile: int, tokens_per_tile: int, pinpoints: tuple, max_tiles: int
) -> tuple[int, int]:
    """(features of the unpadded tile grid, newline features) of one LLaVA-OneVision image: transformers 5.24
    `models/llava_onevision/processing_llava_onevision.py` `LlavaOnevisionProcessor._get_number_of_features` and
    `_get_unpadded_features` (the padding bands of the canvas removed, then pooled down when the grid holds more than
    1.1 × `max_tiles` tiles' worth: `vision_aspect_ratio` "anyres_max_9")."""
    best_h, best_w = select_best_resolution(height, width, pinpoints)
    side = int(math.sqrt(tokens_per_tile))
    current_h, current_w = side * (best_h // tile), side * (best_w // tile)
    if width / height > current_w / current_h:
        new_height = int(round(height * (current_w / width), 7))
        current_h -= (current_h - new_height) // 2 * 2
    else:
        new_width = int(round(width * (current_h / height), 7))
        current_w -= (current_w - new_width) // 2 * 2
    unpadded, newlines = current_h * current_w, current_h
    ratio = math.sqrt(current_h * current_w / (max_tiles * side**2))
    if ratio > 1.1:
        unpadded, newlines = int(current_h // ratio) * int(current_w // ratio), int(current_h // ratio)
    return unpadded, newlines


def idefics3_grid(height: int, width: int, longest_edge: int, tile: int, max_side: int = 4096) -> tuple[int, int]:
    """(rows, columns) of the tiles an Idefics3/SmolVLM image is split into ((0, 0): not split, one view): the
    longest edge rescaled to `longest_edge` (up or down, the other edge made even), capped at 4096 px
    (`MAX_IMAGE_SIZE`), each edge rounded up to a multiple of `tile`, then cut into `tile`-px squares: transformers
    5.24 `models/idefics3/image_processing_pil_idefics3.py` `get_resize_output_image_size`,
    `Idefics3ImageProcessorPil.resize_for_vision_encoder` and `split_images` (SmolVLM's copies are the same)."""
    height, width = _rescale_to_max_len(height, width, longest_edge)
    height, width = _scale_below(height, width, max_side)
    aspect = width / height
    if width >= height:
        width = math.ceil(width / tile) * tile
        height = math.ceil(int(width / aspect) / tile) * tile
    else:
        height = math.ceil(height / tile) * tile
        width = math.ceil(int(height * aspect) / tile) * tile
    if height <= tile and width <= tile:
        return 0, 0
    return (height - tile) // tile + 1, (width - tile) // tile + 1


def _rescale_to_max_len(height: int, width: int, max_len: int) -> tuple[int, int]:
    """Idefics3's `_resize_output_size_rescale_to_max_len` (transformers 5.24): the longest edge to `max_len`."""
    aspect = width / height
    if width >= height:
        width, height = max_len, int(max_len / aspect)
        height += height % 2
    else:
        height, width = max_len, int(max_len * aspect)
        width += width % 2
    return max(height, 1), max(width, 1)


def _scale_below(height: int, width: int, max_len: int) -> tuple[int, int]:
    """Idefics3's `_resize_output_size_scale_below_upper_bound` (transformers 5.24): the longest edge ≤ `max_len`."""
    aspect = width / height
    if width >= height and width > max_len:
        width, height = max_len, int(max_len / aspect)
    elif height > width and height > max_len:
        height, width = max_len, int(max_len * aspect)
    return max(height, 1), max(width, 1)


def pixtral_resize(height: int, width: int, longest_edge: int, patch: int) -> tuple[int, int]:
    """(height, width) a Pixtral image is resized to: scaled down (floor) to fit `longest_edge`, never up, then each
    edge rounded up to a multiple of `patch`: transformers 5.24 `models/pixtral/image_processing_pil_pixtral.py`
    `get_resize_output_image_size` and `_num_image_tokens`."""
    ratio = max(height / longest_edge, width / longest_edge)
    if ratio > 1:
        height, width = int(math.floor(height / ratio)), int(math.floor(width / ratio))
    return ((height - 1) // patch + 1) * patch, ((width - 1) // patch + 1) * patch


def pan_and_scan_crops(height: int, width: int, min_crop: int, max_crops: int, min_ratio: float) -> int:
    """How many crops Gemma 3's pan-and-scan adds to one image (0: none; the whole image is always a view too):
    transformers 5.24 `models/gemma3/image_processing_pil_gemma3.py` `Gemma3ImageProcessorPil.pan_and_scan`."""
    long, short = (width, height) if width >= height else (height, width)
    if long / short < min_ratio:
        return 0
    crops = min(int(math.floor(long / min_crop)), int(math.floor(long / short + 0.5)))
    crops = min(max_crops, max(2, crops))
    crop_long = int(math.ceil(long / crops))
    if min(crop_long, short) < min_crop:
        return 0
    return crops
