"""The plan fields of vision-language fine-tuning: how many images (or video frames) a training row carries, their
size, and the processor's pixel bounds where the family has them (issue 26).

`VisionFields` is a base of `memdoc.core.model.plan.TrainingPlan`, as `plan_post.PostTrainingFields` is: its fields
are plan fields like any other (flags, recipe keys, `--json`). `check_vision_fields` checks their ranges on every
plan; `check_vision_against_model` refuses images for a model that takes none, and processor knobs a family lacks.
The tokens they make are the processor rules' of `memdoc.core.model.vision.registry` (`plan_image_tokens`).

Default image size 1024×1024: the issue's worked example (Qwen2.5-VL-7B, one 1024×1024 image + 512 text tokens),
and the order of a phone photo after the 1024-px downscale common in VLM data pipelines (LLaVA-OneVision's and
ShareGPT-4V's images are mostly ≤ 1024 px on the long side); a dataset (`bill --dataset`) gives the real ones.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from memdoc.core.model.ranges import check_bound
from memdoc.core.model.vision.records import ImageTokens
from memdoc.core.model.vision.registry import RULES, image_tokens, rules_for, video_tokens
from memdoc.errors import PlanError

MAX_IMAGE_EDGE = 65_535
"""The largest image edge in pixels: JPEG's limit (WebP's is 16,383; PNG's larger ones no VLM processor keeps)."""

_SIZE = re.compile(r"^\s*(\d+)\s*[x×X*]\s*(\d+)\s*$")


class PartPolicy(str, Enum):
    """Whether a VLM's vision tower (or projector) trains: `--vision-tower`, `--projector`."""

    AUTO = "auto"
    """As TRL's SFTTrainer runs a VLM (`trl/trainer/sft_trainer.py` 1.16 freezes nothing): full fine-tuning trains
    it; LoRA adapts its linears where the targets reach them (peft 0.21 matches target names on every module, and
    `all-linear` takes every `nn.Linear` but the output embedding: `tuners_utils._maybe_include_all_linear_layers`)."""
    TRAINED = "trained"
    """Full fine-tuning trains its weights; LoRA puts adapters on every linear of it."""
    FROZEN = "frozen"
    """No gradients (LLaMA-Factory 0.9.5's default: `freeze_vision_tower`, `freeze_multi_modal_projector` true)."""


@dataclass(frozen=True, kw_only=True)
class VisionFields:
    """The vision knobs of `TrainingPlan` (ignored with `images_per_sample` 0 and `video_frames` 0)."""

    images_per_sample: int = 0
    """Images per training row (0: text only)."""
    image_size: str = "1024x1024"
    """Each image's (and video frame's) size before the processor, "WxH" in pixels."""
    video_frames: int = 0
    """Video frames per training row, as sampled (0: no video; Qwen-VL families)."""
    max_pixels: int | None = None
    """Qwen-VL: the processor's largest resized area (`max_pixels`, `size["longest_edge"]`); None: the
    checkpoint's. Images only: video keeps the video processor's bounds."""
    min_pixels: int | None = None
    """Qwen-VL: the processor's smallest resized area (`min_pixels`, `size["shortest_edge"]`); None: the
    checkpoint's."""
    pan_and_scan: bool = False
    """Gemma 3: the processor's pan-and-scan crops (`do_pan_and_scan`), up to 4 extra views of a wide image."""
    vision_tower: PartPolicy = PartPolicy.AUTO
    """Whether the vision encoder trains (`PartPolicy`); any VLM, with or without images in the rows."""
    projector: PartPolicy = PartPolicy.AUTO
    """Whether the projector (merger, connector) trains (`PartPolicy`)."""

    @property
    def has_vision(self) -> bool:
        """The rows carry images or video."""
        return self.images_per_sample > 0 or self.video_frames > 0

    @property
    def image_wh(self) -> tuple[int, int]:
        """`image_size` as (width, height)."""
        return parse_image_size(self.image_size)


VISION_COUNTS = ("images_per_sample", "video_frames")
"""Vision fields that are counts from 0."""
VISION_OPTIONAL = ("max_pixels", "min_pixels")
"""Vision fields where None means the checkpoint's processor setting."""
VISION_BOOLS = ("pan_and_scan",)
"""Vision fields that are true or false."""
VISION_POLICIES = ("vision_tower", "projector")
"""Vision fields that are `PartPolicy` values (VLMs only)."""
VISION_ONLY_WITH_IMAGES = ("image_size", "max_pixels", "min_pixels", "pan_and_scan")
"""Fields that mean nothing without images or video (noted as ignored by `plan_checks.inapplicable_flags`)."""


def parse_image_size(value) -> tuple[int, int]:
    """ "WxH" (also "W×H", "W*H") -> (width, height); a one-line PlanError otherwise."""
    match = _SIZE.match(value) if isinstance(value, str) else None
    if match is None:
        raise PlanError(f"--image-size must be WIDTHxHEIGHT in pixels (e.g. 1024x1024), got {value!r}")
    width, height = int(match[1]), int(match[2])
    if not (1 <= width <= MAX_IMAGE_EDGE and 1 <= height <= MAX_IMAGE_EDGE):
        raise PlanError(f"--image-size {value} must have edges from 1 to {MAX_IMAGE_EDGE:,} px (JPEG's largest)")
    return width, height


def check_vision_fields(plan) -> None:
    """The vision fields' own ranges (`plan`: a `TrainingPlan`, which imports this module)."""
    for name, flag in (("images_per_sample", "--images-per-sample"), ("video_frames", "--video-frames")):
        value = getattr(plan, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise PlanError(f"{flag} must be 0 (none) or a positive integer, got {value!r}")
        check_bound(flag, name, value)
    for name, flag in (("max_pixels", "--max-pixels"), ("min_pixels", "--min-pixels")):
        value = getattr(plan, name)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise PlanError(f"{flag} must be a positive number of pixels, got {value!r}")
        check_bound(flag, name, value)
    if plan.max_pixels is not None and plan.min_pixels is not None and plan.min_pixels > plan.max_pixels:
        raise PlanError(f"--min-pixels {plan.min_pixels} is above --max-pixels {plan.max_pixels}")
    if not isinstance(plan.pan_and_scan, bool):
        raise PlanError(f"--pan-and-scan must be true or false, got {plan.pan_and_scan!r}")
    parse_image_size(plan.image_size)


def check_vision_against_model(plan, model_type: str, model_id: str) -> None:
    """Refuse images or video for a model whose processor takes none (`model_type` not in `vision.registry.RULES`),
    video for a family without a video processor, processor knobs the family lacks, and a vision part's policy
    on a text model."""
    rules = RULES.get(model_type)
    for name in VISION_POLICIES:
        if rules is None and getattr(plan, name) is not PartPolicy.AUTO:
            flag = "--" + name.replace("_", "-")
            raise PlanError(f"{flag}: {model_id} is a text model ({model_type}); it has no {name.replace('_', ' ')}")
    if not plan.has_vision:
        return
    what = "--images-per-sample" if plan.images_per_sample else "--video-frames"
    if rules is None:
        raise PlanError(
            f"{what}: {model_id} is a text model ({model_type}); it takes no images",
            hint="pick a vision-language model (memdoc catalog lists them), or leave images out",
        )
    if plan.video_frames and not rules.video:
        raise PlanError(f"--video-frames: {model_id} ({model_type}) takes no video; its processor has none")
    if (plan.max_pixels or plan.min_pixels) and not rules.has_pixel_bounds:
        raise PlanError(f"--max-pixels/--min-pixels apply to Qwen-VL's dynamic resolution, not {model_type}")
    if plan.pan_and_scan and not rules.has_pan_and_scan:
        raise PlanError(f"--pan-and-scan is Gemma 3's processor option, not {model_type}'s")
    try:
        plan_image_tokens(plan, model_type)
    except ValueError as err:  # Qwen's smart_resize refuses an aspect beyond 200:1
        raise PlanError(f"--image-size {plan.image_size}: {err}") from None


def plan_image_tokens(plan, model_type: str) -> tuple[ImageTokens, ImageTokens | None]:
    """(one image's tokens, the video's tokens or None) at the plan's size and processor overrides. A row adds
    `images_per_sample` × the first's `text` to the language model's sequence, plus the video's."""
    rules = rules_for(model_type, max_pixels=plan.max_pixels, min_pixels=plan.min_pixels)
    width, height = plan.image_wh
    image = image_tokens(model_type, width, height, rules, pan_and_scan=plan.pan_and_scan)
    video = video_tokens(model_type, width, height, plan.video_frames, rules) if plan.video_frames else None
    return image, video


def row_tokens(plan, model_type: str, text_tokens: int) -> int:
    """One training row's language-model sequence: its text tokens + the image and video placeholders."""
    if not plan.has_vision:
        return text_tokens
    image, video = plan_image_tokens(plan, model_type)
    return text_tokens + plan.images_per_sample * image.text + (video.text if video else 0)
