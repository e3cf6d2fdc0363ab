"""The keyword inputs of one VLM micro-batch, as the family's processor makes them (transformers 5.24).

`vlm_step_inputs(hf_config, config, plan)` -> (input_ids, the model's keyword inputs): `plan.micro_batch` rows of
`plan.seq_len` text tokens plus, per image, the placeholder tokens where the processor puts them (their count from
`vision.registry.image_tokens`, the same the bill reads), the pixel tensors of the planned `image_size`, and the
index tensors each family's forward reads. Pixels are float32, as every image processor returns them
(`BaseImageProcessor` → `BatchFeature`, no dtype cast); the model casts them itself. Labels are the input ids
(HF's loss; the collator's -100 masks change which positions count, not the loss's memory).

Per processor rule (`vision.records.VisionRules.kind`, the key of the layout and pixel tables below):

- qwen (Qwen2/2.5/3-VL): `pixel_values` (patches, 3 × temporal 2 × patch²) and `image_grid_thw` [1, h/patch,
  w/patch] after `smart_resize` (`Qwen2VLImageProcessor._preprocess`), `mm_token_type_ids` 1 on the image tokens
  (`ProcessorMixin` with `return_mm_token_type_ids`, read by `get_rope_index`); each image as
  <|vision_start|> + image pads + <|vision_end|> (`Qwen2_5_VLProcessor.__call__`).
- gemma3: `pixel_values` (views, 3, 896, 896), each view <start_of_image> + 256 image tokens + <end_of_image>
  (`Gemma3Processor.__call__`), `token_type_ids` 1 on image tokens (the processor's renamed `mm_token_type_ids`:
  Gemma 3 attends bidirectionally within an image in training).
- idefics3 (Idefics3, SmolVLM): `pixel_values` (rows, views, 3, tile, tile) and `pixel_attention_mask` (rows,
  views, tile, tile) all true (`Idefics3ImageProcessor`); the tile and tokens per view are the checkpoint's
  (`vision_config.image_size`, `scale_factor`: SmolVLM 384 px and 81 tokens, Idefics3 364 and 169). The pixels
  are constants: `Idefics3Model.get_image_features` drops all-zero (padding) views by value.
- pixtral (LLaVA with a Pixtral tower, Mistral-3): `pixel_values` (images, 3, h, w) at the resized size and
  `image_sizes` [h, w] (`PixtralImageProcessor`), each row of merged patches followed by [IMG_BREAK], the
  last by [IMG_END] (`PixtralProcessor.replace_image_token`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from memdoc.core.model.plan import TrainingPlan
from memdoc.core.model.vision import tiling
from memdoc.core.model.vision.records import ImageTokens, VisionRules
from memdoc.core.model.vision.registry import image_family, image_tokens, rules_for
from memdoc.errors import ConfigError, PlanError

TEXT_TOKEN = 100
"""The id every text position holds (values do not change memory; any id that is no special token)."""


@dataclass(frozen=True)
class Layout:
    """One image's placeholder ids (with the family's markers), which of them are image tokens, its token counts."""

    ids: list[int]
    is_image: list[bool]
    tokens: ImageTokens


def trace_rules(config: dict, plan: TrainingPlan) -> VisionRules:
    """The processor rules of this checkpoint: the family's published ones with the plan's pixel bounds, and for
    Idefics3 (`VisionRules.tile_from_checkpoint`) the checkpoint's tile and tokens per view
    (`vision_config.image_size`, `scale_factor`: SmolVLM's 384 px, 81 tokens, 4 × 384 longest edge;
    `SmolVLMProcessor`/`Idefics3Processor` defaults for it)."""
    rules = rules_for(_family(config), max_pixels=plan.max_pixels, min_pixels=plan.min_pixels)
    if rules.tile_from_checkpoint:
        tile = int((config.get("vision_config") or {}).get("image_size", rules.tile))
        scale = int(config.get("scale_factor", 2))
        per_view = (tile // rules.patch) ** 2 // scale**2
        rules = replace(rules, tile=tile, longest_edge=4 * tile, tokens_per_view=per_view)
    return rules


def _family(config: dict) -> str:
    """The key of `vision.registry.RULES` this checkpoint follows (a `llava` with a pixtral tower is Pixtral's)."""
    vision = config.get("vision_config") or {}
    return image_family(config["model_type"], vision.get("model_type"), vision.get("image_size"))


def _check_traceable(config: dict, rules: VisionRules, plan: TrainingPlan) -> None:
    if plan.video_frames:
        raise PlanError("diagnose traces images, not --video-frames yet; memdoc bill estimates the video's tokens")
    if rules.kind not in _LAYOUTS:
        raise ConfigError(
            f"diagnose cannot trace images for {config['model_type']} yet (Qwen-VL, Gemma 3, Idefics3/SmolVLM "
            "and Pixtral/Mistral-3 it can); memdoc bill estimates it, and --images-per-sample 0 traces its text"
        )


def vlm_step_inputs(model, config: dict, plan: TrainingPlan, notes: list[str]) -> tuple:
    """(input_ids, keyword inputs) of one micro-batch with `plan.images_per_sample` images per row. Call inside
    `probe.fake_index.index_fake_mode()`: the ids and index tensors are constants there, the pixels fake."""
    import torch

    hf_config = model.config
    rules = trace_rules(config, plan)
    _check_traceable(config, rules, plan)
    width, height = plan.image_wh
    tokens = image_tokens(_family(config), width, height, rules, pan_and_scan=plan.pan_and_scan)
    layout = _LAYOUTS[rules.kind](hf_config, tokens, rules, width, height)
    n, rows = plan.images_per_sample, plan.micro_batch
    row = layout.ids * n + [TEXT_TOKEN] * plan.seq_len
    image = layout.is_image * n + [False] * plan.seq_len
    marks = max(len(layout.ids) - tokens.text, 0)  # markers beyond the image's tokens (Pixtral's breaks are in them)
    if marks:  # the family's begin/end markers are text tokens of the row
        row, image = row[: len(row) - n * marks], image[: len(image) - n * marks]
    ids = torch.tensor([row] * rows)
    inputs = {"input_ids": ids, "labels": ids}
    inputs |= _PIXELS[rules.kind](hf_config, tokens, rules, (width, height), (rows, n))
    type_ids = torch.tensor([[int(x) for x in image]] * rows)
    if rules.type_ids:
        inputs[rules.type_ids] = type_ids
    if rules.rope_index:
        inputs["position_ids"] = _qwen_positions(model, inputs)
    notes.append(
        f"images: {n} per row at {width}×{height} → {tokens.text} image tokens each (encoder {tokens.encoder} "
        f"patches, {tokens.views} view(s)); rows of {plan.seq_len} text + {n * tokens.text} image tokens, pixel "
        f"inputs as {config['model_type']}'s processor makes them"
    )
    return ids, inputs


def _qwen_positions(model, inputs: dict):
    """Qwen-VL's 3-D rope positions, computed by the model's own `get_rope_index` on the real ids (what its forward
    does when given none, `Qwen2_5_VLModel.compute_3d_position_ids`; its `torch.tensor` of deltas cannot run on
    fake tensors), as a constant input."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    from memdoc.probe.fake_index import constant

    owner = next(m for m in model.modules() if hasattr(type(m), "get_rope_index"))
    real = {k: inputs[k].constant for k in ("input_ids", "mm_token_type_ids", "image_grid_thw")}
    with unset_fake_temporarily():
        positions, _ = owner.get_rope_index(
            real["input_ids"], real["mm_token_type_ids"], image_grid_thw=real["image_grid_thw"]
        )
    return constant(lambda: positions)


def _qwen_layout(conf, tokens: ImageTokens, _rules, _w, _h) -> Layout:
    ids = [conf.vision_start_token_id] + [conf.image_token_id] * tokens.text + [conf.vision_end_token_id]
    return Layout(ids, [False] + [True] * tokens.text + [False], tokens)


def _gemma3_layout(conf, tokens: ImageTokens, _rules, _w, _h) -> Layout:
    per_view = tokens.text // tokens.views
    one = [conf.boi_token_id] + [conf.image_token_id] * per_view + [conf.eoi_token_index]
    flags = [False] + [True] * per_view + [False]
    return Layout(one * tokens.views, flags * tokens.views, tokens)


def _idefics3_layout(conf, tokens: ImageTokens, _rules, _w, _h) -> Layout:
    return Layout([conf.image_token_id] * tokens.text, [True] * tokens.text, tokens)


def _pixtral_layout(conf, tokens: ImageTokens, rules: VisionRules, width: int, height: int) -> Layout:
    merged = rules.patch * rules.merge
    resized_h, resized_w = tiling.pixtral_resize(height, width, rules.longest_edge, merged)
    rows, cols = resized_h // merged, resized_w // merged
    ids: list[int] = []
    for _ in range(rows):
        ids += [conf.image_token_id] * cols + [TEXT_TOKEN + 1]  # [IMG_BREAK] / [IMG_END]: text tokens
    flags = ([True] * cols + [False]) * rows
    return Layout(ids, flags, tokens)


def _qwen_pixels(conf, tokens: ImageTokens, rules: VisionRules, size: tuple[int, int], batch: tuple[int, int]) -> dict:
    import torch

    (width, height), images = size, batch[0] * batch[1]
    vision = conf.vision_config
    resized_h, resized_w = tiling.smart_resize(
        height, width, rules.patch * rules.merge, rules.min_pixels, rules.max_pixels
    )
    grid = [1, resized_h // rules.patch, resized_w // rules.patch]
    width_in = vision.in_channels * vision.temporal_patch_size * vision.patch_size**2
    return {
        "pixel_values": torch.randn(images * tokens.encoder, width_in),
        "image_grid_thw": torch.tensor([grid] * images),
    }


def _gemma3_pixels(conf, tokens: ImageTokens, rules: VisionRules, _size, batch: tuple[int, int]) -> dict:
    import torch

    return {"pixel_values": torch.randn(batch[0] * batch[1] * tokens.views, 3, rules.tile, rules.tile)}


def _idefics3_pixels(conf, tokens: ImageTokens, rules: VisionRules, _size, batch: tuple[int, int]) -> dict:
    import torch

    from memdoc.probe.fake_index import INDEX_NUMEL_LIMIT, constant

    rows, views = batch[0], batch[1] * tokens.views
    if rows * views * 3 * rules.tile**2 > INDEX_NUMEL_LIMIT:
        raise PlanError(
            f"diagnose traces at most {INDEX_NUMEL_LIMIT:,} Idefics3/SmolVLM pixel values per micro-batch (its views "
            f"are told apart by their values): {rows} rows × {views} views of {rules.tile}² is more",
            hint="trace --batch 1 (the bill scales with the batch), or use memdoc bill",
        )
    return {  # constants: Idefics3Model.get_image_features tells real views from padding by their values
        "pixel_values": constant(lambda: torch.ones(rows, views, 3, rules.tile, rules.tile)),
        "pixel_attention_mask": torch.ones((rows, views, rules.tile, rules.tile), dtype=torch.bool),
    }


def _pixtral_pixels(
    conf, tokens: ImageTokens, rules: VisionRules, size: tuple[int, int], batch: tuple[int, int]
) -> dict:
    import torch

    (width, height), images = size, batch[0] * batch[1]
    merged = rules.patch * rules.merge
    resized_h, resized_w = tiling.pixtral_resize(height, width, rules.longest_edge, merged)
    return {
        "pixel_values": torch.randn(images, 3, resized_h, resized_w),
        "image_sizes": torch.tensor([[resized_h, resized_w]] * images),
    }


_LAYOUTS = {"qwen": _qwen_layout, "gemma3": _gemma3_layout, "idefics3": _idefics3_layout, "pixtral": _pixtral_layout}
_PIXELS = {"qwen": _qwen_pixels, "gemma3": _gemma3_pixels, "idefics3": _idefics3_pixels, "pixtral": _pixtral_pixels}

__all__ = ["trace_rules", "vlm_step_inputs"]
