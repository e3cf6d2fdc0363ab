"""A vision-language model's step: the language model's bill at text + image tokens, plus the vision side.

The rows of a VLM step carry image (and video) placeholders: the language model runs at `plan_vision.row_tokens`
tokens per row (the text tokens + `ImageTokens.text` per image), billed as any text step (`text_plan`). The vision
encoder and projector run first; their saved tensors (`activations.vision`) stay until backward reaches the tower,
last: they add to every forward and backward moment. Their forward transient (one block's tensors) is a moment of
its own, before the language model's activations exist. The allocator simulation is the language model's (like
`parallel`'s per-rank bills: `Bill.per_rank`), the vision bytes added on top of its minimum.
"""

from __future__ import annotations

import dataclasses

from memdoc.core.billing.activations.cross_attention import cross_attention_saved
from memdoc.core.billing.activations.vision import VisionActivations, vision_activations
from memdoc.core.billing.vision_parts import FULL
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.plan import TrainingPlan
from memdoc.core.model.plan_vision import plan_image_tokens, row_tokens

GIB = 1024**3


def text_plan(model: ModelSpec, plan: TrainingPlan) -> TrainingPlan:
    """The plan the language model runs: rows of text + image tokens, no images left to bill."""
    return plan.replace(seq_len=row_tokens(plan, model.model_type, plan.seq_len), images_per_sample=0, video_frames=0)


def vision_bill(model: ModelSpec, plan: TrainingPlan, lm, sample: tuple[int, int] | None = None):
    """`lm` (the `Bill` of `text_plan`) with the vision encoder's and projector's activations added to its phases
    (module doc); `plan` the user's plan, kept on the bill. `sample`: (image tokens, encoder tokens) of one row
    when a dataset's sample sets them (`bill --dataset`), else the plan's images make them."""
    va = vision_activations(model, plan, None if sample is None else sample[1])
    assert va is not None
    cross = cross_attention_saved(
        model, lm.plan, plan.images_per_sample * plan_image_tokens(plan, model.model_type)[0].cross
    )
    saved = va.saved + cross
    phases = dict(lm.phases)
    forward = dataclasses.replace(phases["forward"], activations=phases["forward"].activations + saved)
    encoder = dataclasses.replace(phases["forward"], activations=va.saved, other=va.transient)
    phases["forward"] = max((forward, encoder), key=lambda phase: phase.total)
    phases["backward"] = dataclasses.replace(phases["backward"], activations=phases["backward"].activations + saved)
    acts = dataclasses.replace(lm.acts, vision=dataclasses.replace(va, cross_attention=cross))
    notes = lm.notes + tuple(vision_notes(model, plan, acts.vision, None if sample is None else sample[0]))
    return dataclasses.replace(lm, plan=plan, acts=acts, phases=phases, notes=notes, per_rank=lm)


def vision_notes(model: ModelSpec, plan: TrainingPlan, va: VisionActivations, image_part: int | None) -> list[str]:
    """What the bill says about the image tokens (`image_part`: a row's, else the plan's) and vision activations."""
    image, video = plan_image_tokens(plan, model.model_type)
    each = f" ({image.text:,} per {plan.image_size} image)" if image_part is None else " (a dataset's sample)"
    if image_part is None:
        image_part = plan.images_per_sample * image.text + (video.text if video else 0)
    notes = [
        f"rows of {plan.seq_len:,} text + {image_part:,} image tokens: the language model is billed at "
        f"{plan.seq_len + image_part:,} tokens per row{each}"
    ]
    parts = va.parts
    if va.trained:
        how = "trained" if parts.tower == FULL else "LoRA on " + ", ".join(sorted(parts.tower_adapted))
        notes.append(
            f"vision encoder ({how}): {va.encoder_tokens:,} patch tokens per micro-batch, "
            f"{va.saved / GIB:.2f} GiB saved for backward with the projector"
        )
    else:
        kept = f", the projector's {va.saved / GIB:.2f} GiB saved" if va.saved else ""
        notes.append(
            f"vision encoder frozen: {va.encoder_tokens:,} patch tokens run without saving for backward "
            f"({va.transient / GIB:.2f} GiB transient){kept}"
        )
    if image.cross and plan.images_per_sample:
        notes.append(
            f"cross-attention layers attend to {image.cross:,} vision states per image: "
            f"{va.cross_attention / GIB:.2f} GiB saved for backward"
        )
    return notes


__all__ = ["text_plan", "vision_bill", "vision_notes"]
