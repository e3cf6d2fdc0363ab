"""The vision encoder's and projector's activations in a VLM's training step (issue 26, item 3).

What each encoder block saves for backward, from autograd's rules (`activations/__init__.py`) applied to the
transformers 5.24 vision code, for N encoder tokens (patches of every image and view in the micro-batch):

* Qwen2.5-VL (`modeling_qwen2_5_vl.py` `Qwen2_5_VLVisionBlock`): two RMSNorms (fp32 input copy, rsqrt, the 16-bit
  normalised output the weight multiplies), the fused qkv's input, the whole qkv output (v is a view of it), the
  rotated q and k, SDPA's output per window (attention runs per `cu_seqlens` chunk, then `torch.cat`) and fp32
  logsumexp, the concatenated output `proj` saves, and the gated MLP's gate, SiLU output, up and down input.
  Window and full-attention blocks save the same bytes with SDPA/flash (the chunks only change s² kernels).
* SigLIP / Idefics3 / CLIP (`modeling_siglip.py` `SiglipEncoderLayer`, `modeling_idefics3.py`
  `Idefics3EncoderLayer`, `modeling_clip.py` `CLIPEncoderLayer`): two LayerNorms (input, fp32 mean and rstd on
  CUDA), the shared q/k/v input, q, k, v, SDPA's output (the very storage `out_proj` saves: SDPA writes it
  (b, s, heads, d)-major, and `transpose(1, 2).contiguous()` is a no-op) and logsumexp, fc1's input, GELU's input
  and fc2's input.
* Qwen3-VL (`Qwen3VLVisionBlock`): the LayerNorm block with Qwen's fused qkv, rotary and per-chunk attention.
* Pixtral (`PixtralAttentionLayer`) and Llama-3.2-Vision (`MllamaVisionEncoderLayer`, local and global layers):
  the RMSNorm gated-MLP block and the LayerNorm block with separate q/k/v; not checked against a census yet.

Saved only when gradients flow through the tower: it trains (full fine-tuning). A frozen tower (LoRA on the
language model: peft freezes every base weight, and the pixel values need no gradient) saves nothing; its forward
is a transient of about one block's tensors, before the language model runs. With gradient checkpointing every
`GradientCheckpointingLayer` block keeps only its input (all the towers above but mllama's, whose
`MllamaVisionEncoderLayer` is a plain `nn.Module`). The projector: Qwen's merger (RMSNorm on the encoder tokens,
then an MLP on merged tokens); the others an MLP-like map on the merged tokens (input and activation input kept).
"""

from __future__ import annotations

from dataclasses import dataclass

from memdoc.core.billing.activations.saved import FP32
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.plan import Checkpointing, Method, TrainingPlan
from memdoc.core.model.plan_vision import plan_image_tokens
from memdoc.core.model.vision import VisionSpec

_RMS_GATED = ("qwen2_5_vl", "pixtral")
"""Towers of RMSNorm blocks with a gated (SiLU) MLP; the others have LayerNorm blocks and a two-matrix MLP."""
_QWEN_ATTENTION = ("qwen2_5_vl", "qwen3_vl")
"""Fused qkv, rotary, attention per `cu_seqlens` chunk then `torch.cat` (a new tensor for `proj`)."""
_NOT_CHECKPOINTED = ("mllama",)
"""Encoder layers that are not `GradientCheckpointingLayer`s: gradient checkpointing leaves them whole."""


@dataclass(frozen=True, kw_only=True)
class VisionActivations:
    """The vision side of one step on one GPU."""

    encoder_tokens: int
    """Encoder tokens of the micro-batch: patches of every image, view and video frame."""
    block_saved: int
    """Bytes one encoder block keeps for backward without checkpointing (0 when nothing in it needs gradients)."""
    saved: int
    """Bytes the encoder and projector keep until backward reaches them, with the plan's checkpointing."""
    transient: int
    """The encoder's forward working set on top of `saved`: one block's tensors (before the language model)."""
    trained: bool
    """Gradients flow through the tower (it trains)."""


def encoder_tokens(model: ModelSpec, plan: TrainingPlan) -> int:
    """The encoder's sequence for the micro-batch: `ImageTokens.encoder` × images per row (+ the video's) × rows."""
    image, video = plan_image_tokens(plan, model.model_type)
    per_row = plan.images_per_sample * image.encoder + (video.encoder if video else 0)
    return plan.micro_batch * per_row


def block_saved(vision: VisionSpec, tokens: int, *, dt: int) -> int:
    """Bytes one encoder block of `vision` saves for N = `tokens` when its weights train (see the module's doc)."""
    n, h, i = tokens, vision.hidden_size, vision.intermediate_size
    nh = n * h
    lse = FP32 * vision.num_heads * n
    if vision.kind in _RMS_GATED:
        norms = 2 * (FP32 * nh + FP32 * n + dt * nh)  # fp32 input copy, rsqrt, normalised output
        mlp = dt * nh + 4 * dt * n * i  # input; gate (SiLU's input), SiLU's output, up, down's input
    else:
        norms = 2 * (dt * nh + 2 * FP32 * n)  # LayerNorm inputs, fp32 mean and rstd
        mlp = dt * nh + 2 * dt * n * i  # fc1's input, GELU's input, fc2's input
    if vision.kind in _QWEN_ATTENTION:
        attention = dt * nh + 3 * dt * nh + 2 * dt * nh + 2 * dt * nh + lse  # qkv in, qkv out, q/k rotated, out, cat
    else:
        attention = dt * nh + 3 * dt * nh + dt * nh + lse  # q/k/v input, q, k, v, output (= out_proj's input)
    return norms + attention + mlp


def outside_blocks_saved(vision: VisionSpec, tokens: int, *, dt: int) -> int:
    """The patch embedding's input (the pixels: channels × temporal × patch² per token), the final norm, the
    rotary tables (Qwen-VL, Pixtral: cos and sin, fp32) and the projector, for N = `tokens`."""
    n, h = tokens, vision.hidden_size
    pixels = dt * n * 3 * vision.temporal_patch_size * vision.patch_size**2
    merged = n // max(vision.merge, 1) ** 2
    if vision.kind in _QWEN_ATTENTION:
        rotary = 2 * FP32 * n * (h // vision.num_heads)
        projector = FP32 * n * h + FP32 * n + 3 * dt * n * h  # ln_q, then GELU's and the second linear's inputs
        post = 0
    else:
        rotary = 2 * FP32 * n * (h // vision.num_heads) if vision.kind == "pixtral" else 0
        projector = 2 * dt * merged * vision.projector_in
        post = dt * n * h + 2 * FP32 * n
    return pixels + rotary + post + projector


def vision_activations(model: ModelSpec, plan: TrainingPlan) -> VisionActivations | None:
    """The vision encoder's and projector's activations for the plan; None for a text model or text-only rows."""
    vision = model.vision
    if vision is None or not plan.has_vision:
        return None
    dt = plan.precision.compute_bits // 8
    n = encoder_tokens(model, plan)
    layers = vision.layers + vision.global_layers
    block = block_saved(vision, n, dt=dt)
    trained = plan.method is Method.FULL
    if not trained:
        return VisionActivations(encoder_tokens=n, block_saved=0, saved=0, transient=block, trained=False)
    checkpointed = plan.checkpointing is not Checkpointing.NONE and vision.kind not in _NOT_CHECKPOINTED
    blocks = layers * (dt * n * vision.hidden_size if checkpointed else block)
    saved = blocks + outside_blocks_saved(vision, n, dt=dt)
    return VisionActivations(
        encoder_tokens=n, block_saved=block, saved=saved, transient=block if checkpointed else 0, trained=True
    )


__all__ = ["VisionActivations", "block_saved", "encoder_tokens", "outside_blocks_saved", "vision_activations"]
