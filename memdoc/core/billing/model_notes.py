"""What a bill says about the model and the card before any figure (split out of `bill.py`)."""

from __future__ import annotations

from memdoc.core.billing.reserved import MAX_SIMULATED_LAYERS
from memdoc.core.billing.vision_parts import FROZEN, FULL, part_training
from memdoc.core.model.gpu import GpuSpec
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.plan import Method, MoeExperts, Precision, TrainingPlan


def model_notes(model: ModelSpec, plan: TrainingPlan, gpu: GpuSpec | None) -> list[str]:
    """What the bill says about the model and card before any figure (config borrowed, no bf16, …)."""
    notes = []
    if model.config_of:
        notes.append(f"billed with the config of {model.config_of}: a fine-tuned variant has its base's layer shapes")
    if gpu is not None and not gpu.supports_bf16 and plan.precision in (Precision.FP16, Precision.AMP_FP16):
        notes.append(
            f"{gpu.name} has no bf16 (compute capability {gpu.compute_capability}): it trains in "
            "fp16 (with loss scaling)"
        )
    if model.num_layers > MAX_SIMULATED_LAYERS:
        notes.append(
            f"{model.num_layers:,} layers: the caching allocator is not simulated beyond {MAX_SIMULATED_LAYERS} "
            "(reserved memory counted as allocated, no fragmentation)"
        )
    if not model.arch.has_layout:
        notes.append(
            f"no activation model for model_type {model.model_type!r}: activations estimated for a generic "
            "decoder layer of its sizes (parameters are exact, from the meta device)"
        )
    if model.vision is not None:
        notes.extend(_vision_notes(model, plan))
    if plan.method is Method.QLORA and model.is_moe and plan.moe_experts is MoeExperts.FUSED:
        notes.append(
            "QLoRA leaves the routed experts 16-bit: transformers 5 stores them as fused 3-D tensors, "
            "which bitsandbytes does not quantise (transformers 4.x: --moe-experts linear)"
        )
    elif plan.method is Method.QLORA and model.is_moe:
        notes.append("QLoRA quantises the routed experts to NF4: transformers 4.x builds them of nn.Linear modules")
    return notes


def _trained_parts(model: ModelSpec, plan: TrainingPlan) -> str:
    """Which parts train, in words (`vision_parts.part_training`)."""
    parts = part_training(model, plan)
    assert parts is not None
    words = {FULL: "trains", FROZEN: "frozen"}
    tower = words.get(parts.tower) or "LoRA on its " + ", ".join(sorted(parts.tower_adapted))
    projector = words.get(parts.projector) or "LoRA on its " + ", ".join(sorted(parts.projector_adapted))
    lm = "trains" if plan.method is Method.FULL else "LoRA"
    return f"language model {lm}, vision encoder {tower}, projector {projector}"


def _vision_notes(model: ModelSpec, plan: TrainingPlan) -> list[str]:
    """What a VLM's bill covers: every part's weights (and states when trained); the activations of image rows are
    `vision_bill.vision_notes`'s."""
    p = model.params
    cross = f", cross-attention layers {p.cross_attention / 1e9:.2f}B" if p.cross_attention else ""
    trained = _trained_parts(model, plan)
    return [
        f"vision-language model: weights of the vision encoder ({p.vision / 1e6:,.0f}M), projector "
        f"({p.projector / 1e6:,.1f}M) and language model ({p.language / 1e9:.2f}B{cross}) billed; {trained}",
    ]
