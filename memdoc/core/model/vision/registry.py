"""The vision registry: every tower kind, every VLM model_type and every image processor memdoc knows, each a record
of its family's module, and the lookups on them (the kind of a `vision_config`, a model's processor, an image's
tokens). Adding a family adds its module's records here; nothing else lists towers or VLMs.
"""

from __future__ import annotations

from dataclasses import replace

from memdoc.core.model.vision import (
    clip,
    gemma3,
    idefics3,
    llava,
    mistral3,
    mllama,
    pixtral,
    qwen2_5_vl,
    qwen3_vl,
    siglip,
)
from memdoc.core.model.vision.records import ImageTokens, Tower, VisionRules, Vlm
from memdoc.errors import ConfigError

TOWERS: dict[str, Tower] = {
    t.kind: t
    for t in (qwen2_5_vl.TOWER, qwen3_vl.TOWER, siglip.TOWER, idefics3.TOWER, pixtral.TOWER, mllama.TOWER, clip.TOWER)
}
"""Tower kind → its record, in the order `tower_kind` tries the kinds as model_type prefixes."""

VLMS: dict[str, Vlm] = {
    v.model_type: v
    for v in (
        qwen2_5_vl.VLM,
        qwen3_vl.VLM,
        gemma3.VLM,
        llava.ONEVISION,
        llava.VLM,
        idefics3.VLM,
        mistral3.VLM,
        mllama.VLM,
    )
}
"""The VLM model_types memdoc counts, with their config classes' defaults (`configuration_<type>.py`)."""

RULES: dict[str, VisionRules] = {
    "qwen2_vl": qwen2_5_vl.RULES,
    "qwen2_5_vl": qwen2_5_vl.RULES,
    "qwen3_vl": qwen3_vl.RULES,
    "gemma3": gemma3.RULES,
    "llava_onevision": llava.ONEVISION_RULES,
    "mllama": mllama.RULES,
    "idefics3": idefics3.RULES,
    "smolvlm": idefics3.SMOLVLM_RULES,
    "pixtral": pixtral.RULES,
    "mistral3": mistral3.RULES,
    "llava": llava.RULES,
}
"""HF model_type (or a checkpoint line, `CHECKPOINT_RULES`) → the image-processor settings its published checkpoints
ship, each record's docstring naming its source. Pixtral's checkpoints load as `llava` with a pixtral tower."""

CHECKPOINT_RULES: dict[tuple[str, str | int], str] = {("llava", "pixtral"): "pixtral", ("idefics3", 384): "smolvlm"}
"""(model_type, the vision tower's kind or image size) -> the key of `RULES` its checkpoints follow, where the
model_type alone does not say: mistral-community/pixtral-12b is a `llava` with a pixtral tower; SmolVLM v1
(HuggingFaceTB/SmolVLM-Instruct) an `idefics3` with 384-px tiles (SmolVLM's processor rule)."""


def tower_kind(vision: dict, default: str) -> str:
    """The encoder architecture of a `vision_config`: by its model_type, as transformers' AutoModel picks it, else
    `default` (the VLM config class's own vision config)."""
    model_type = str(vision.get("model_type") or default)
    for kind in TOWERS:
        if model_type.startswith(kind):
            return kind
    raise ConfigError(f"vision_config model_type {model_type!r} is not a vision tower memdoc counts")


def tower_of(config: dict) -> Tower:
    """The tower record of a VLM config (its `vision_config`'s model_type, else the VLM's default)."""
    return TOWERS[tower_kind(config.get("vision_config") or {}, VLMS[config["model_type"]].tower)]


def image_family(model_type: str, tower: str | None = None, tile: int | None = None) -> str:
    """The key of `RULES` a VLM's checkpoints follow (`CHECKPOINT_RULES`, else its model_type)."""
    return CHECKPOINT_RULES.get((model_type, tower)) or CHECKPOINT_RULES.get((model_type, tile)) or model_type


def rules_for(family: str, **overrides) -> VisionRules:
    """The family's published settings with `overrides` (e.g. min_pixels/max_pixels) applied; KeyError if unknown."""
    rules = RULES[family]
    return replace(rules, **{k: v for k, v in overrides.items() if v is not None})


def image_tokens(
    family: str, width: int, height: int, rules: VisionRules | None = None, *, pan_and_scan: bool = False
) -> ImageTokens:
    """One `width`×`height` image of `family` (a key of `RULES`) -> its tokens, by the processor's rule."""
    rules = rules or RULES[family]
    if width < 1 or height < 1:
        raise ValueError(f"an image is at least 1×1 px, got {width}×{height}")
    return rules.image(height, width, rules, pan_and_scan)


def video_tokens(family: str, width: int, height: int, frames: int, rules: VisionRules | None = None) -> ImageTokens:
    """A video of `frames` frames at `width`×`height` -> its tokens, by the processor's video rule."""
    rules = rules or RULES[family]
    if rules.video is None:
        raise ValueError(f"{family} takes no video")
    return rules.video(height, width, frames, rules)
