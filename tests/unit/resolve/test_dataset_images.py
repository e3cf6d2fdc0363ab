"""`bill --dataset` with images: sizes read from files (header only), Parquet-style bytes and width/height fields
(`resolve/dataset_images.py`), and the image-token report (`core/remedies/dataset_vision.py`). Token truths are hand
arithmetic of Qwen2.5-VL's `smart_resize` (28-px factor, merged 2×2): 1024×1024 -> 37×37 = 1369 tokens,
640×480 -> 23×17 = 391, 200×3000 -> 7×107 = 749."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from memdoc.core.model.plan import parse_plan
from memdoc.core.remedies.dataset_vision import image_report, sample_images, sample_lengths
from memdoc.errors import DatasetError
from memdoc.resolve.dataset import TokenCounts, dataset_images
from memdoc.resolve.dataset_images import has_images, image_sizes

Image = pytest.importorskip("PIL.Image")


def _png(path: Path, width: int, height: int) -> Path:
    Image.new("RGB", (width, height)).save(path)
    return path


def _png_bytes(width: int, height: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height)).save(buffer, format="PNG")
    return buffer.getvalue()


def test_sizes_from_files_bytes_and_fields(tmp_path):
    (tmp_path / "img").mkdir()
    _png(tmp_path / "img" / "a.png", 640, 480)
    records = [
        {"messages": [], "images": ["img/a.png", {"bytes": _png_bytes(200, 3000), "path": None}]},
        {"text": "x", "image": {"width": 1024, "height": 1024}},
        {"text": "x", "width": 33, "height": 44},
        {"text": "no image"},
    ]
    assert has_images(records) and not has_images([{"text": "x"}])
    assert image_sizes(records, tmp_path) == [[(640, 480), (200, 3000)], [(1024, 1024)], [(33, 44)], []]


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"images": ["missing.png"]}, "record 1: image .*missing.png not found"),
        ({"images": [{"width": 0, "height": 5}]}, "must be positive integers"),
        ({"images": [7]}, "neither a path, bytes nor width/height"),
        ({"images": [{"bytes": b"not an image"}]}, "cannot read the image"),
    ],
)
def test_bad_image_entries_are_one_line_errors(tmp_path, record, message):
    with pytest.raises(DatasetError, match=message):
        image_sizes([record], tmp_path)


def test_report_and_peak():
    plan = parse_plan()
    sizes = [[(1024, 1024)], [(640, 480), (640, 480)], [], [(200, 3000)]]
    images = sample_images(sizes, "qwen2_5_vl", plan)
    assert [i.text for i in images] == [1369, 2 * 391, 0, 749]
    assert [i.encoder for i in images] == [4 * 1369, 8 * 391, 0, 4 * 749]  # patches before the 2×2 merge
    text = [100, 900, 5000, 10]
    assert sample_lengths(text, images) == [1469, 1682, 5000, 759]
    report = image_report(text, images, rows=[0, 2, 3, 5])
    assert report["peak"] == {
        "record": 4,
        "text_tokens": 5000,
        "image_tokens": 0,
        "images": 0,
        "encoder_tokens": 0,  # the peak's vision encoder sequence, which its bill needs (issue 26 item 3)
        "total_tokens": 5000,
    }
    assert (report["images"], report["samples_with_images"], report["max_images_per_sample"]) == (4, 3, 2)
    assert (report["image_tokens_max"], report["image_tokens_p50"]) == (1369, 749)
    assert report["encoder_tokens_max"] == 4 * 1369


def test_plan_overrides_reach_the_rule():
    """max_pixels 1280 × 28²: 1024×1024 -> 980×980 (35×35 merged tokens)."""
    plan = parse_plan(images_per_sample=1, max_pixels=1280 * 28 * 28)
    assert sample_images([[(1024, 1024)]], "qwen2_5_vl", plan)[0].text == 35 * 35


def test_dataset_images_only_for_a_vision_model(tmp_path):
    records = [{"text": "a", "width": 640, "height": 480}, {"text": ""}, {"text": "b", "width": 1024, "height": 1024}]
    tokens = TokenCounts(counts=[10, 20], field="text", skipped=1, rows=(0, 2))
    path = tmp_path / "train.jsonl"
    assert dataset_images(path, records, tokens, "llama", parse_plan()) == (None, [10, 20])
    report, lengths = dataset_images(path, records, tokens, "qwen2_5_vl", parse_plan())
    assert report["peak"]["record"] == 3 and report["peak"]["total_tokens"] == 20 + 1369
    assert lengths == [10 + 391, 20 + 1369]  # the fit's language-model sequences: text + image tokens
    assert report["peak"]["encoder_tokens"] == 4 * 1369  # 74 × 74 patches before the 2×2 merge
    text_only = TokenCounts([1], "text", 0, (0,))
    assert dataset_images(path, [{"text": "a"}], text_only, "qwen2_5_vl", parse_plan()) == (None, [1])
