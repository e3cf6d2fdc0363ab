"""The vision-language plan flags (images, video, the processor's pixel bounds), in their own help panel;
`VISION_OPTIONS` joins `plan_flags.PLAN_OPTIONS`. The fields and their defaults: `core/model/plan_vision.py`."""

from typing import Annotated, Optional

import typer

from memdoc.core.model.plan_vision import PartPolicy

VISION = "Vision-language (images, video)"

ImagesPerSampleOpt = Annotated[
    Optional[int],
    typer.Option(
        "--images-per-sample",
        help="Images per training row; each adds the family's image tokens to the row (a VLM only). "
        "\\[default: 0, text only]",
        rich_help_panel=VISION,
    ),
]
ImageSizeOpt = Annotated[
    Optional[str],
    typer.Option(
        "--image-size",
        help="Each image's size before the processor, WIDTHxHEIGHT in pixels; bill --dataset reads the real ones. "
        "\\[default: 1024x1024]",
        rich_help_panel=VISION,
    ),
]
VideoFramesOpt = Annotated[
    Optional[int],
    typer.Option(
        "--video-frames",
        help="Video frames per row, as sampled, at --image-size (Qwen-VL; frames pair into temporal patches). "
        "\\[default: 0]",
        rich_help_panel=VISION,
    ),
]
MaxPixelsOpt = Annotated[
    Optional[int],
    typer.Option(
        "--max-pixels",
        help="Qwen-VL: the processor's largest resized image area (max_pixels). \\[default: the checkpoint's, "
        "Qwen2.5-VL 12845056]",
        rich_help_panel=VISION,
    ),
]
MinPixelsOpt = Annotated[
    Optional[int],
    typer.Option(
        "--min-pixels",
        help="Qwen-VL: the processor's smallest resized image area (min_pixels). \\[default: the checkpoint's, "
        "Qwen2.5-VL 3136]",
        rich_help_panel=VISION,
    ),
]
PanAndScanOpt = Annotated[
    Optional[bool],
    typer.Option(
        "--pan-and-scan/--no-pan-and-scan",
        help="Gemma 3: crop wide or tall images into up to 4 extra views of 256 tokens (do_pan_and_scan). "
        "\\[default: no]",
        rich_help_panel=VISION,
    ),
]

VisionTowerOpt = Annotated[
    Optional[PartPolicy],
    typer.Option(
        "--vision-tower",
        help="Whether the vision encoder trains: auto as TRL runs a VLM (full fine-tuning trains it, LoRA adapts it "
        "where the targets reach it), trained (LoRA: adapters on all its linears) or frozen (LLaMA-Factory's "
        "freeze_vision_tower). \\[default: auto]",
        rich_help_panel=VISION,
    ),
]
ProjectorOpt = Annotated[
    Optional[PartPolicy],
    typer.Option(
        "--projector",
        help="Whether the projector (merger, connector) trains: auto, trained or frozen, as --vision-tower "
        "(LLaMA-Factory: freeze_multi_modal_projector). \\[default: auto]",
        rich_help_panel=VISION,
    ),
]

VISION_OPTIONS = {
    "images_per_sample": ImagesPerSampleOpt,
    "image_size": ImageSizeOpt,
    "video_frames": VideoFramesOpt,
    "max_pixels": MaxPixelsOpt,
    "min_pixels": MinPixelsOpt,
    "pan_and_scan": PanAndScanOpt,
    "vision_tower": VisionTowerOpt,
    "projector": ProjectorOpt,
}
