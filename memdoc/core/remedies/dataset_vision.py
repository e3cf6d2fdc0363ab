"""A vision-language dataset's image tokens per sample (`memdoc bill --dataset` with images): each sample's images
through its family's processor rule (`vision.registry.image_tokens`), their distribution, and the sample whose
text + image tokens peak.

`sample_lengths` is each sample's whole language-model sequence (text + image placeholders): what the VLM bill
fits against the plan. The text counts come from the tokenizer on the sample's text, where each image is its
placeholder (e.g. "<image>", a few tokens) that the processor expands: the expansion is added here, the
placeholder's own tokens stay counted (an overcount of a few tokens per image).
"""

from __future__ import annotations

from dataclasses import dataclass

from memdoc.core.model.vision.records import ImageTokens
from memdoc.core.model.vision.registry import image_tokens, rules_for
from memdoc.core.remedies.dataset_fit import length_stats
from memdoc.errors import DatasetError


@dataclass(frozen=True)
class SampleImages:
    """One sample's images, summed."""

    images: int
    text: int
    """Tokens the images add to the language model's sequence."""
    encoder: int
    """The vision encoder's sequence over the sample's images (patches before merge)."""
    cross: int = 0
    """Llama-3.2-Vision: the cross-attention states' length."""


def _tokens(model_type: str, width: int, height: int, rules, plan, record: int) -> ImageTokens:
    """One image's tokens; an image its processor refuses (Qwen-VL's `smart_resize`: an aspect ratio above 200) is a
    one-line DatasetError naming the record."""
    try:
        return image_tokens(model_type, width, height, rules, pan_and_scan=plan.pan_and_scan)
    except ValueError as exc:
        raise DatasetError(f"record {record}: image {width}x{height}: {exc}") from None


def sample_images(sizes: list[list[tuple[int, int]]], model_type: str, plan) -> list[SampleImages]:
    """Each sample's (width, height) list -> its images' tokens, by the family's processor rule with the plan's
    overrides (`max_pixels`, `min_pixels`, `pan_and_scan`); sizes seen before are not recomputed."""
    rules = rules_for(model_type, max_pixels=plan.max_pixels, min_pixels=plan.min_pixels)
    memo: dict[tuple[int, int], ImageTokens] = {}
    out = []
    for record, sample in enumerate(sizes, start=1):
        tokens = []
        for width, height in sample:
            if (width, height) not in memo:
                memo[width, height] = _tokens(model_type, width, height, rules, plan, record)
            tokens.append(memo[width, height])
        out.append(
            SampleImages(
                images=len(tokens),
                text=sum(t.text for t in tokens),
                encoder=sum(t.encoder for t in tokens),
                cross=sum(t.cross for t in tokens),
            )
        )
    return out


def sample_lengths(text_counts: list[int], images: list[SampleImages]) -> list[int]:
    """Each sample's language-model sequence: its text tokens + its images' placeholder tokens."""
    return [count + image.text for count, image in zip(text_counts, images, strict=True)]


def image_report(text_counts: list[int], images: list[SampleImages], rows: list[int]) -> dict:
    """The `images` object of `bill --dataset`'s JSON: images per sample, the distribution of image tokens per
    sample (max/p99/p50, nearest rank), the encoder's longest sequence, and the sample (its record number in the
    file, from 1: `rows` maps sample -> record index) whose text + image tokens peak."""
    per_sample = [image.text for image in images]
    stats = length_stats(per_sample)
    totals = sample_lengths(text_counts, images)
    peak = max(range(len(totals)), key=totals.__getitem__) if totals else None
    out = {
        "images": sum(image.images for image in images),
        "samples_with_images": sum(1 for image in images if image.images),
        "max_images_per_sample": max((image.images for image in images), default=0),
        "image_tokens_max": stats.max_tokens,
        "image_tokens_p99": stats.p99_tokens,
        "image_tokens_p50": stats.p50_tokens,
        "encoder_tokens_max": max((image.encoder for image in images), default=0),
        "total_tokens_max": max(totals, default=0),
        "total_tokens_p99": length_stats(totals).p99_tokens,
    }
    if peak is not None:
        out["peak"] = {
            "record": rows[peak] + 1,
            "text_tokens": text_counts[peak],
            "image_tokens": images[peak].text,
            "images": images[peak].images,
            "encoder_tokens": images[peak].encoder,
            "total_tokens": totals[peak],
        }
    if any(image.cross for image in images):
        out["cross_attention_tokens_max"] = max(image.cross for image in images)
    return out
