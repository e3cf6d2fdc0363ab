"""`memdoc.core.model.image_tokens` against the families' own image processors (transformers 5.24, the PIL
backends, offline): each processor is built with the published checkpoint's preprocessor_config values (named in
`image_tokens.RULES`), fed a random uint8 image of a real size, and what it produces is counted: `image_grid_thw`,
the tiles/crops in `pixel_values`, the rows/cols of the split, the processor's own placeholder expansion
(`replace_image_token` / `_get_number_of_features`, called on a stand-in holding only the fields they read, since
the processors need a tokenizer the Hub would supply)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from memdoc.core.model.vision.registry import RULES, image_tokens, rules_for, video_tokens

pytestmark = pytest.mark.slow  # ~10 s: 59 images through the real processors

SIZES = [(1024, 1024), (640, 480), (1920, 1080), (336, 336), (4000, 3000), (200, 3000)]
"""(width, height) of the images fed to every processor: square, VGA, full HD, a CLIP tile, a 12 MP photo, a strip."""


def _image(width: int, height: int) -> np.ndarray:
    """A random RGB image, HWC uint8, as a photo decodes."""
    return np.random.default_rng(width * 7 + height).integers(0, 256, (height, width, 3), dtype=np.uint8)


@pytest.mark.parametrize(
    ("family", "patch", "bounds"), [("qwen2_5_vl", 14, (3136, 12845056)), ("qwen3_vl", 16, (65536, 16777216))]
)
@pytest.mark.parametrize(("width", "height"), [(1024, 1024), (640, 480), (1920, 1080), (336, 336), (200, 3000)])
def test_qwen_grid_thw(family, patch, bounds, width, height):
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    processor = Qwen2VLImageProcessorPil(min_pixels=bounds[0], max_pixels=bounds[1], patch_size=patch, merge_size=2)
    out = processor(images=[_image(width, height)], return_tensors="np")
    t, h, w = (int(v) for v in out["image_grid_thw"][0])
    got = image_tokens(family, width, height)
    assert got.encoder == t * h * w == out["pixel_values"].shape[0]
    assert got.text == t * h * w // processor.merge_size**2  # Qwen2_5_VLProcessor.replace_image_token
    assert got.views == t == 1


@pytest.mark.parametrize(("width", "height"), [(1920, 1080), (640, 480), (4000, 3000)])
def test_qwen_max_pixels_override(width, height):
    """The --max-pixels/--min-pixels overrides go where the processor's min_pixels/max_pixels do."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    processor = Qwen2VLImageProcessorPil(min_pixels=256 * 28 * 28, max_pixels=1280 * 28 * 28)
    t, h, w = (int(v) for v in processor(images=[_image(width, height)], return_tensors="np")["image_grid_thw"][0])
    rules = rules_for("qwen2_5_vl", min_pixels=256 * 28 * 28, max_pixels=1280 * 28 * 28)
    assert image_tokens("qwen2_5_vl", width, height, rules).text == t * h * w // 4


def test_qwen_video_frames_pair_into_temporal_patches():
    """`Qwen2VLVideoProcessor.patchify` (5.24) repeats the last frame up to a multiple of temporal_patch_size 2 and
    makes grid_t = frames / 2; each frame's grid is smart_resize's within 128×28² .. 768×28² px (hand arithmetic:
    the video processor imports torchvision, which this environment lacks). 640×480 -> 476×644 (17×23 grid of
    28 px), 34×46 patches per frame."""
    one = video_tokens("qwen2_5_vl", 640, 480, 1)
    assert video_tokens("qwen2_5_vl", 640, 480, 8).encoder == 4 * 34 * 46
    assert video_tokens("qwen2_5_vl", 640, 480, 9).views == 5
    assert one.encoder == 34 * 46 and one.text == 17 * 23
    with pytest.raises(ValueError):
        video_tokens("gemma3", 640, 480, 8)


@pytest.mark.parametrize("pan_and_scan", [False, True])
@pytest.mark.parametrize(("width", "height"), [(1024, 1024), (1920, 1080), (4000, 3000), (200, 3000), (3000, 900)])
def test_gemma3_views(pan_and_scan, width, height):
    from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil

    processor = Gemma3ImageProcessorPil(
        size={"height": 896, "width": 896},
        do_pan_and_scan=pan_and_scan,
        pan_and_scan_min_crop_size=256,
        pan_and_scan_max_num_crops=4,
        pan_and_scan_min_ratio_to_activate=1.2,
    )
    out = processor(images=[_image(width, height)], return_tensors="np")
    views = out["pixel_values"].shape[0]
    assert views == 1 + int(out["num_crops"][0])
    got = image_tokens("gemma3", width, height, pan_and_scan=pan_and_scan)
    assert got.views == views
    assert got.text == views * 256  # Gemma3Processor(image_seq_length=256) per view
    assert got.encoder == views * (out["pixel_values"].shape[-1] // 14) ** 2  # SigLIP-So400m/14 at 896 px


@pytest.mark.parametrize(("width", "height"), SIZES)
def test_llava_onevision_anyres(width, height):
    from transformers.models.llava_onevision.image_processing_pil_llava_onevision import (
        LlavaOnevisionImageProcessorPil,
    )
    from transformers.models.llava_onevision.processing_llava_onevision import LlavaOnevisionProcessor

    processor = LlavaOnevisionImageProcessorPil()
    out = processor(images=[_image(width, height)], return_tensors="np")
    views = out["pixel_values"].shape[1]
    stand_in = SimpleNamespace(image_processor=processor, num_image_tokens=729, vision_aspect_ratio="anyres_max_9")
    stand_in._get_unpadded_features = lambda *a: LlavaOnevisionProcessor._get_unpadded_features(stand_in, *a)
    text = LlavaOnevisionProcessor._get_number_of_features(stand_in, height, width, 384, 384)
    got = image_tokens("llava_onevision", width, height)
    assert (got.text, got.views, got.encoder) == (text, views, views * 27 * 27)


@pytest.mark.parametrize(("width", "height"), SIZES)
def test_mllama_tiles(width, height):
    from transformers.models.mllama.image_processing_pil_mllama import MllamaImageProcessorPil

    processor = MllamaImageProcessorPil(size={"height": 560, "width": 560}, max_image_tiles=4)
    out = processor(images=[[_image(width, height)]], return_tensors="np")
    tiles_run = out["pixel_values"].shape[2]  # padded to max_image_tiles by pack_images
    per_tile = (560 // 14) ** 2 + 1  # MllamaVisionModel.num_patches: patches + CLS
    got = image_tokens("mllama", width, height)
    assert got.views == tiles_run == 4
    assert got.cross == tiles_run * per_tile
    assert got.encoder == tiles_run * (per_tile + (8 - per_tile % 8) % 8)  # padded to a multiple of 8 in forward
    assert got.text == 1
    assert 1 <= int(out["num_tiles"][0][0]) <= 4


@pytest.mark.parametrize(("family", "edge", "tile", "seq"), [("idefics3", 1456, 364, 169), ("smolvlm", 1536, 384, 81)])
@pytest.mark.parametrize(("width", "height"), [(1024, 1024), (640, 480), (1920, 1080), (336, 336), (200, 3000)])
def test_idefics3_split(family, edge, tile, seq, width, height):
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil
    from transformers.models.idefics3.processing_idefics3 import Idefics3Processor

    processor = Idefics3ImageProcessorPil(
        size={"longest_edge": edge}, max_image_size={"longest_edge": tile}, return_row_col_info=True
    )
    out = processor(images=[[_image(width, height)]], return_tensors="np")
    views = out["pixel_values"].shape[1]
    stand_in = SimpleNamespace(
        fake_image_token="<fake>", global_image_tag="<global-img>", image_token="<image>", image_seq_len=seq
    )
    text = Idefics3Processor.replace_image_token(stand_in, {"rows": out["rows"], "cols": out["cols"]}, 0)
    got = image_tokens(family, width, height)
    assert (got.text, got.views) == (text.count("<image>"), views)
    assert got.encoder == views * (tile // 14) ** 2


@pytest.mark.parametrize(("family", "edge", "patch", "merge"), [("pixtral", 1024, 16, 1), ("mistral3", 1540, 14, 2)])
@pytest.mark.parametrize(("width", "height"), SIZES)
def test_pixtral_rows(family, edge, patch, merge, width, height):
    from transformers.models.pixtral.image_processing_pil_pixtral import PixtralImageProcessorPil

    PixtralProcessor = _pixtral_processor_class()
    processor = PixtralImageProcessorPil(size={"longest_edge": edge}, patch_size={"height": patch, "width": patch})
    # PixtralProcessor._process_images passes patch_size × spatial_merge_size to the image processor
    out = processor(images=[_image(width, height)], patch_size={"height": patch * merge, "width": patch * merge})
    stand_in = SimpleNamespace(
        patch_size=patch, spatial_merge_size=merge, image_token="a", image_break_token="b", image_end_token="c"
    )
    text = PixtralProcessor.replace_image_token(stand_in, out, 0)
    resized_h, resized_w = (int(v) for v in out["image_sizes"][0])
    got = image_tokens(family, width, height)
    assert got.text == len(text)
    assert got.encoder == (resized_h // patch) * (resized_w // patch)


@pytest.mark.parametrize(("width", "height"), SIZES)
def test_llava15_is_one_clip_view(width, height):
    """llava-hf/llava-1.5-7b-hf: CLIPImageProcessor (shortest edge 336, center crop 336²), then `LlavaProcessor`'s
    expansion (`processing_llava.py`: patches + 1 additional token, minus the CLS with strategy "default")."""
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil
    from transformers.models.llava.processing_llava import LlavaProcessor

    processor = CLIPImageProcessorPil(size={"shortest_edge": 336}, crop_size={"height": 336, "width": 336})
    out = processor(images=[_image(width, height)], return_tensors="np")
    height_px, width_px = (int(v) for v in out["pixel_values"][0].shape[-2:])
    stand_in = SimpleNamespace(
        patch_size=14, num_additional_image_tokens=1, vision_feature_select_strategy="default", image_token="a"
    )
    text = LlavaProcessor.replace_image_token(stand_in, out, 0)
    got = image_tokens("llava", width, height)
    assert got.text == len(text) == 576
    assert got.encoder == (height_px // 14) * (width_px // 14) + 1  # CLIP's patches + its CLS


def test_image_family_tells_pixtral_and_smolvlm_apart():
    """Pixtral-12B loads as `llava` with a pixtral tower, SmolVLM v1 as `idefics3` with 384-px tiles: each follows its
    own processor's rule (the catalog's configs)."""
    from memdoc.resolve.models import resolve_model

    families = {
        m: resolve_model(m).image_family
        for m in (
            "mistral-community/pixtral-12b",
            "llava-hf/llava-1.5-7b-hf",
            "HuggingFaceTB/SmolVLM-Instruct",
            "HuggingFaceM4/Idefics3-8B-Llama3",
        )
    }
    assert list(families.values()) == ["pixtral", "llava", "smolvlm", "idefics3"]


def _pixtral_processor_class():
    """`PixtralProcessor` (transformers 5.24): its module imports `get_resize_output_image_size` from the torchvision
    backend, absent here; the PIL backend's copy of the same function stands in for that import only."""
    import importlib
    import sys
    import types

    from transformers.models.pixtral import image_processing_pil_pixtral as pil

    name = "transformers.models.pixtral.image_processing_pixtral"
    if name not in sys.modules:
        try:
            importlib.import_module(name)
        except ImportError:
            sys.modules[name] = types.SimpleNamespace(get_resize_output_image_size=pil.get_resize_output_image_size)
    return importlib.import_module("transformers.models.pixtral.processing_pixtral").PixtralProcessor


def test_every_family_has_rules():
    """The brief's families (HF model_type), each with a rule kind the dispatcher knows."""
    families = {"qwen2_5_vl", "qwen3_vl", "mllama", "gemma3", "llava_onevision", "idefics3", "smolvlm", "llava"}
    assert families | {"pixtral", "mistral3"} <= set(RULES)
    for family in RULES:
        assert image_tokens(family, 640, 480).text >= 1
