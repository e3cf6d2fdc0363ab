"""The vision-language keys of each format (issue 26 item 6): what a VLM fine-tune needs beyond the text keys, read
from the installed trainers.

* TRL 1.16 (`trl/trainer/sft_trainer.py` `SFTTrainer.__init__`): a model whose processing class is a
  `ProcessorMixin` is a VLM (`AutoProcessor.from_pretrained`, so `trl sft` needs no key), and a dataset with an
  `image`/`images` column is a vision dataset: `DataCollatorForVisionLanguageModeling` processes the images on the
  fly, dataset preparation is skipped (no `dataset_kwargs` needed), packing and padding-free are refused, and the
  collator truncates the processed row — image tokens included — to `max_length`
  (`_collate_language_modeling`). The reward trainer (`reward_trainer.py`) takes no images.
* LLaMA-Factory 0.9.5: the `template` carries the family's `mm_plugin` (`data/template.py`), which downscales every
  image above `image_max_pixels` (default 768×768) before the processor (`data/mm_plugin.py`
  `BasePlugin._preprocess_image`); `freeze_vision_tower` and `freeze_multi_modal_projector` (default true) and
  `freeze_language_model` (default false) (`hparams/finetuning_args.py`) act on the model types of
  `model/model_utils/visual.py` `COMPOSITE_MODELS`, for full training (`get_forbidden_modules`) and LoRA targets
  (`patch_target_modules`).
* Axolotl 0.19: `processor_type` loads the processor (`loaders/processor.py`), only the causal (SFT) builder uses it
  (`core/builders/causal.py`), `skip_prepare_dataset: true` + `remove_unused_columns: false` keep the raw rows for
  the multimodal collator, `image_size` resizes every image (`processing_strategies.py` `ProcessingStrategy`: an int
  pads to a square, a (w, h) pair resizes), `processor_kwargs` overrides the processor's settings
  (`utils/schemas/model.py`), and `chat_template` picks the processing strategy (`get_processing_strategy`).

memdoc has no plan fields for freezing the vision parts yet. The VLM bill (issue 26 item 3) trains the vision tower
and projector in a full fine-tune and keeps them frozen, without adapters, under LoRA/QLoRA: LLaMA-Factory's freeze
keys are written to match it; TRL and Axolotl have no such keys (their defaults, and where they differ from the
bill, are notes).
"""

from __future__ import annotations

from memdoc.core.model.plan import ALL_LINEAR, Method, TrainingPlan
from memdoc.core.model.plan_post import Task
from memdoc.core.model.plan_vision import PartPolicy, row_tokens
from memdoc.core.model.vision.registry import VLMS
from memdoc.errors import PlanError

LF_VLM_TYPES = frozenset({"qwen2_5_vl", "qwen3_vl", "gemma3", "llava", "mistral3", "mllama"})
"""The VLM model_types of `VLMS` that LLaMA-Factory 0.9.5 trains as composite models (`model/model_utils/visual.py`
`COMPOSITE_MODELS`, with an mm_plugin template); idefics3 and llava_onevision have neither."""

LF_IMAGE_MIN_PIXELS = 32 * 32
"""LLaMA-Factory's `image_min_pixels` default (`hparams/model_args.py` `ProcessorArguments`)."""

TRL_VISION_ROWS = (
    'rows {"images": [an image per {"type": "image"} entry], "messages": [{"role": "user", "content": [{"type": '
    '"image"}, {"type": "text", "text": …}]}, {"role": "assistant", "content": …}]} (or {"image": …}; {"text": …} '
    "rows carry the processor's image tokens themselves)"
)
AXOLOTL_VISION_ROWS = (
    'rows {"messages": [{"role": "user", "content": [{"type": "image", "path"|"url"|"base64": …}, {"type": "text", '
    '"text": …}]}, {"role": "assistant", "content": [{"type": "text", "text": …}]}]}'
)
LF_VISION_ROWS = (
    'declared in data/dataset_info.json with "images": "images" among its columns; each <image> in a message takes '
    "the next image of the row, rendered with `template`"
)


def is_vlm(model_type: str | None) -> bool:
    """Is the emitted model a vision-language model memdoc knows (`memdoc.core.model.vision.registry.VLMS`)?"""
    return model_type in VLMS


def vision_row_length(plan: TrainingPlan, model_type: str) -> int:
    """The language model's row: the plan's text tokens + its images' and video's placeholder tokens
    (`plan_vision.row_tokens`), which every trainer counts against its length limit."""
    return row_tokens(plan, model_type, plan.seq_len)


def _no_packing(plan: TrainingPlan, trainer: str) -> None:
    if plan.packing and plan.has_vision:
        raise PlanError(
            f"--packing with images: {trainer} does not pack multimodal rows",
            hint="drop --packing (bill unpacked rows)",
        )


def trl_vision_keys(plan: TrainingPlan, model_type: str, notes: list[str]) -> dict:
    """The TRL keys of an image plan: `max_length` holds the whole row (text + image tokens), since the vision
    collator truncates after the processor has expanded the images (a cut among an image's tokens fails the model's
    image-feature count); the processor's knobs have no key in `trl sft` (notes)."""
    if not plan.has_vision:
        return {}
    if plan.task is Task.RM:
        raise PlanError(
            "--task rm with images: TRL 1.16's RewardTrainer takes no images", hint="use --format llamafactory"
        )
    _no_packing(plan, "TRL 1.16's SFTTrainer")
    out: dict = {}
    if not plan.task.is_online:
        length = vision_row_length(plan, model_type)
        out["max_length"] = length
        notes.append(
            f"max_length {length} = {plan.seq_len} text tokens + the images' tokens at {plan.image_size}: TRL's "
            "vision collator truncates the processed row, image tokens included"
        )
    knobs = [f"max_pixels {plan.max_pixels}" if plan.max_pixels else "", "min_pixels" if plan.min_pixels else ""]
    knobs += ["pan_and_scan" if plan.pan_and_scan else ""]
    if any(knobs):
        notes.append(
            f"{', '.join(k for k in knobs if k)}: `trl sft` loads the checkpoint's processor as saved "
            "(AutoProcessor.from_pretrained, no key for its settings) — save a processor with them beside a local "
            "copy of the model, or resize the images in the dataset"
        )
    return out


def trl_vision_notes(plan: TrainingPlan, notes: list[str]) -> None:
    """What TRL trains of a VLM by default (no key in `SFTConfig`/`ModelConfig` freezes a part)."""
    if plan.method is Method.FULL:
        notes.append(
            "VLM, full fine-tune: TRL trains every part (vision tower, projector, language model), as billed; it has "
            "no key to freeze the vision tower"
        )
    else:
        notes.append(f"VLM, LoRA: {lora_reach(plan)}")


def lora_reach(plan: TrainingPlan) -> str:
    """Which parts of a VLM the plan's LoRA targets reach when the trainer matches names over the whole model (peft
    `tuners/tuners_utils.py` `_maybe_include_all_linear_layers`: all-linear is every Linear but the output layer),
    against the bill's frozen tower without adapters."""
    if ALL_LINEAR in plan.lora_targets:
        return (
            "all-linear wraps every Linear layer but the output layer, the vision tower's and projector's too: their "
            "activations are then kept for backward (more memory than billed, which has no adapters in the tower); "
            "name language-model modules to match the bill"
        )
    return (
        "target names are matched in every part of the model: where the vision tower has layers of those names (a "
        "CLIP/SigLIP tower has q_proj/k_proj/v_proj) it gets adapters too, which the bill does not count"
    )


def hf_vision_keys(plan: TrainingPlan, model_type: str, notes: list[str]) -> dict:
    """HF TrainingArguments with images: `remove_unused_columns: false`, since the Trainer otherwise drops every
    column the model's forward does not name (`trainer.py` `Trainer._remove_unused_columns`, transformers 5.24) —
    the raw images a collator processes on the fly; the script's collator and the row length are a note."""
    notes.append(
        f"images: your script's collator runs the model's AutoProcessor on each batch; keep each row within "
        f"{vision_row_length(plan, model_type)} tokens ({plan.seq_len} text + the images' tokens), as billed"
    )
    return {"remove_unused_columns": False}


def _lf_frozen(policy: PartPolicy, full: bool) -> bool:
    """LLaMA-Factory's freeze flag for a part: as the plan says, and under `auto` frozen unless fully fine-tuned."""
    return policy is PartPolicy.FROZEN or (policy is PartPolicy.AUTO and not full)


def lf_vision_keys(plan: TrainingPlan, model_type: str, model_id: str, notes: list[str]) -> dict:
    """LLaMA-Factory's VLM keys: the freezing flags as billed (full: every part trained; LoRA: LLaMA-Factory's
    default, tower and projector frozen and kept out of the targets), and with images the pixel
    bounds that keep the billed image size (`image_max_pixels`: the plan's `max_pixels`, else the image's area, so
    LLaMA-Factory's 768×768 default does not shrink it and larger images are downscaled to it)."""
    if model_type not in LF_VLM_TYPES:
        if not plan.has_vision:
            return {}
        raise PlanError(
            f"{model_id} ({model_type}) with images: LLaMA-Factory 0.9.5 has no multimodal template for it",
            hint="use --format trl",
        )
    full = plan.method is Method.FULL
    out: dict = {
        "freeze_vision_tower": _lf_frozen(plan.vision_tower, full),
        "freeze_multi_modal_projector": _lf_frozen(plan.projector, full),
        "freeze_language_model": False,
    }
    if full:
        notes.append(
            "VLM, full fine-tune: freeze_vision_tower and freeze_multi_modal_projector as billed (LLaMA-Factory "
            "freezes both by default; --vision-tower/--projector auto train them, as TRL does)"
        )
    elif PartPolicy.AUTO in (plan.vision_tower, plan.projector):
        notes.append(
            "VLM, LoRA: LLaMA-Factory keeps the frozen tower and projector free of adapters; memdoc billed "
            "--vision-tower/--projector auto (peft's name matches may reach the tower): bill with --vision-tower "
            "frozen --projector frozen for exactly this run"
        )
    if not plan.has_vision:
        return out
    width, height = plan.image_wh
    most = plan.max_pixels or width * height
    out["image_max_pixels"] = most
    out["image_min_pixels"] = min(plan.min_pixels or LF_IMAGE_MIN_PIXELS, most)
    if plan.pan_and_scan:
        out["image_do_pan_and_scan"] = True
    if plan.video_frames:
        out.update(video_max_pixels=width * height, video_maxlen=plan.video_frames)
        notes.append(
            f"video: LLaMA-Factory samples video_fps 2.0 frames per second, at most video_maxlen {plan.video_frames}"
        )
    notes.append(
        f"image_max_pixels {most:,}: LLaMA-Factory downscales every larger image to this area before the processor "
        "(its default 768×768 would shrink the billed images)"
    )
    return out


def axolotl_vision_keys(plan: TrainingPlan, notes: list[str]) -> dict:
    """Axolotl's multimodal keys: the processor, unprocessed rows for its collator, no packing, every image resized
    to the billed size (`image_size`: an int pads a square, [w, h] resizes) and the processor overrides."""
    if plan.task is not Task.SFT and plan.has_vision:
        raise PlanError(
            f"--task {plan.task.value} with images: Axolotl 0.19 loads the processor for SFT only",
            hint="use --format trl or llamafactory",
        )
    _no_packing(plan, "Axolotl 0.19")
    out: dict = {"processor_type": "AutoProcessor", "skip_prepare_dataset": True, "remove_unused_columns": False}
    out["sample_packing"] = False
    if plan.method is Method.FULL:
        notes.append(
            "VLM, full fine-tune: Axolotl trains every part (vision tower, projector, language model), as billed"
        )
    else:
        notes.append(f"VLM, LoRA: {lora_reach(plan)}")
    if not plan.has_vision:
        return out
    if plan.video_frames:
        raise PlanError("--video-frames: Axolotl 0.19's multimodal collator takes images only", hint="use --format trl")
    width, height = plan.image_wh
    out["image_size"] = width if width == height else [width, height]
    kwargs = {"max_pixels": plan.max_pixels, "min_pixels": plan.min_pixels}
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    if plan.pan_and_scan:
        kwargs["do_pan_and_scan"] = True
    if kwargs:
        out["processor_kwargs"] = kwargs
    notes.append(f"image_size: Axolotl resizes every image to {plan.image_size} (the billed size)")
    return out


__all__ = [
    "AXOLOTL_VISION_ROWS",
    "LF_VISION_ROWS",
    "LF_VLM_TYPES",
    "TRL_VISION_ROWS",
    "axolotl_vision_keys",
    "hf_vision_keys",
    "is_vlm",
    "lf_vision_keys",
    "trl_vision_keys",
    "trl_vision_notes",
    "vision_row_length",
]
