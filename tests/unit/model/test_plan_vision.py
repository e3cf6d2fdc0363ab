"""The vision plan fields (`core/model/plan_vision.py`): parsing, ranges, the model check, a row's tokens (hand
arithmetic from the processors' rules, cited per case)."""

from __future__ import annotations

import pytest

from memdoc.core.model.plan import parse_plan
from memdoc.core.model.plan_checks import check_plan_against_model, inapplicable_flags
from memdoc.core.model.plan_values import coerce
from memdoc.core.model.plan_vision import parse_image_size, plan_image_tokens, row_tokens
from memdoc.errors import PlanError


def _check(plan, model_type: str) -> None:
    check_plan_against_model(plan, hidden_size=4096, max_positions=None, model_id="some/model", model_type=model_type)


def test_defaults_are_text_only():
    plan = parse_plan()
    assert (plan.images_per_sample, plan.video_frames, plan.has_vision) == (0, 0, False)
    assert plan.image_wh == (1024, 1024)
    assert row_tokens(plan, "llama", 512) == 512
    _check(plan, "llama")  # no images: any model


@pytest.mark.parametrize(("text", "size"), [("640x480", (640, 480)), (" 1920 × 1080 ", (1920, 1080)), ("3X2", (3, 2))])
def test_image_size_spellings(text, size):
    assert parse_image_size(text) == size
    assert coerce("image_size", text) == f"{size[0]}x{size[1]}"


@pytest.mark.parametrize("bad", ["640", "640x", "x480", "0x480", "70000x10", "-4x4", 1024, None])
def test_bad_image_size_is_a_plan_error(bad):
    with pytest.raises(PlanError, match="--image-size"):
        parse_image_size(bad)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"images_per_sample": -1}, "--images-per-sample must be 0"),
        ({"video_frames": True}, "--video-frames must be an integer"),
        ({"max_pixels": 0}, "--max-pixels must be a positive"),
        ({"min_pixels": 10**6, "max_pixels": 10**5}, "--min-pixels 1000000 is above --max-pixels 100000"),
        ({"images_per_sample": 2**40}, "beyond any real run"),
    ],
)
def test_ranges(flags, message):
    with pytest.raises(PlanError, match=message):
        parse_plan(**flags)


@pytest.mark.parametrize(
    ("flags", "model_type", "message"),
    [
        ({"images_per_sample": 1}, "llama", "is a text model"),
        ({"video_frames": 8}, "qwen3", "is a text model"),
        ({"video_frames": 8}, "gemma3", "takes no video"),
        ({"images_per_sample": 1, "max_pixels": 10**6}, "llava_onevision", "--max-pixels/--min-pixels apply"),
        ({"images_per_sample": 1, "pan_and_scan": True}, "qwen2_5_vl", "--pan-and-scan is Gemma 3's"),
        ({"images_per_sample": 1, "image_size": "60000x100"}, "qwen2_5_vl", "aspect ratio must be smaller than 200"),
    ],
)
def test_the_model_must_take_what_the_plan_gives(flags, model_type, message):
    with pytest.raises(PlanError, match=message):
        _check(parse_plan(**flags), model_type)


def test_size_knobs_without_images_are_noted_as_ignored():
    notes = inapplicable_flags(parse_plan(image_size="640x480"), frozenset({"image_size"}))
    assert notes == ["--image-size does not apply with no images or video (the default): ignored"]
    assert inapplicable_flags(parse_plan(images_per_sample=1), frozenset({"image_size"})) == []


def test_row_tokens_qwen25_worked_example():
    """The issue's example, Qwen2.5-VL, one 1024×1024 image + 512 text tokens: smart_resize rounds each edge to
    round(1024 / 28) × 28 = 1036 (area 1,073,296, within 3136 .. 12,845,056), 74 × 74 patches of 14 px merged 2×2
    into 37 × 37 = 1369 tokens."""
    plan = parse_plan(images_per_sample=1)
    image, video = plan_image_tokens(plan, "qwen2_5_vl")
    assert (image.encoder, image.text, video) == (74 * 74, 1369, None)
    assert row_tokens(plan, "qwen2_5_vl", 512) == 512 + 1369
    assert row_tokens(parse_plan(images_per_sample=3), "qwen2_5_vl", 512) == 512 + 3 * 1369


def test_max_pixels_override_and_video():
    """max_pixels 1280 × 28² (Qwen's documented 'balance' setting): 1024×1024 -> beta = sqrt(1024² / 1,003,520),
    floor(1024 / beta / 28) × 28 = 980 per edge: 35 × 35 = 1225 tokens. A 16-frame video at 640×480 within the video
    processor's 128..768 × 28² px: 476×644 per frame (17 × 23 merged), 8 temporal patches: 8 × 391 tokens."""
    plan = parse_plan(images_per_sample=1, max_pixels=1280 * 28 * 28)
    assert plan_image_tokens(plan, "qwen2_5_vl")[0].text == 35 * 35
    video_plan = parse_plan(video_frames=16, image_size="640x480")
    assert row_tokens(video_plan, "qwen2_5_vl", 100) == 100 + 8 * 17 * 23


def test_gemma3_pan_and_scan_adds_views():
    """1920×1080 with pan-and-scan: aspect 1.78 ≥ 1.2, round(1.78) = 2 crops of 960 px ≥ 256: 3 views × 256."""
    plan = parse_plan(images_per_sample=2, image_size="1920x1080", pan_and_scan=True)
    assert row_tokens(plan, "gemma3", 10) == 10 + 2 * 3 * 256
    assert row_tokens(parse_plan(images_per_sample=2), "gemma3", 10) == 10 + 2 * 256
