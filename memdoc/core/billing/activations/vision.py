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

Saved only when gradients flow through the tower (`vision_parts.part_training`): its weights train (full
fine-tuning) or LoRA adapters sit on some of its linears (then frozen linears keep nothing of their input). A frozen
tower (LLaMA-Factory's default; LoRA whose targets miss its linears: the pixel values need no gradient) saves
nothing; its forward is a transient of about one block's tensors, before the language model runs. With gradient
checkpointing every `GradientCheckpointingLayer` block keeps only its input (all the towers above but mllama's,
whose `MllamaVisionEncoderLayer` is a plain `nn.Module`). The projector: Qwen's merger (RMSNorm on the encoder tokens,
then an MLP on merged tokens); the others an MLP-like map on the merged tokens (input and activation input kept).
"""

from __future__ import annotations

from dataclasses import dataclass

from memdoc.core.billing.activations.saved import FP32
from memdoc.core.billing.vision_parts import FROZEN, FULL, PartTraining, part_training
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.plan import Checkpointing, TrainingPlan
from memdoc.core.model.plan_vision import plan_image_tokens
from memdoc.core.model.vision.records import ProjectorShape
from memdoc.core.model.vision.spec import VisionSpec, projector_of


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
    """Gradients flow through the tower (its weights or adapters train)."""
    parts: PartTraining
    """How the tower and projector train (`vision_parts.part_training`)."""
    cross_attention: int = 0
    """Llama-3.2-Vision: the cross-attention layers' saved bytes (`cross_attention.py`), in the phases too."""


def encoder_tokens(model: ModelSpec, plan: TrainingPlan) -> int:
    """The encoder's sequence for the micro-batch: `ImageTokens.encoder` × images per row (+ the video's) × rows."""
    image, video = plan_image_tokens(plan, model.image_family)
    per_row = plan.images_per_sample * image.encoder + (video.encoder if video else 0)
    return plan.micro_batch * per_row


def block_saved(
    vision: VisionSpec,
    tokens: int,
    *,
    dt: int,
    adapted: frozenset[str] | None = None,
    rank: int = 0,
    cast: int = 0,
) -> int:
    """Bytes one encoder block of `vision` saves for N = `tokens` (see the module's doc). `adapted`: None when the
    block's weights train; else the names of its linears with LoRA adapters of rank `rank` over frozen weights —
    a frozen linear keeps nothing of its input and a frozen norm weight no normalised output; an adapter keeps its
    input (`lora_A`) and r-wide output (`lora_B`'s input), as `adapters.lora_saved` bills the language model's:
    `cast` bytes per element of its own copy of the input (peft casts it to the adapter's dtype: fp32 adapters
    over 16-bit weights, 4; under AMP, 2), or 0 for no cast (fp32), where adapters share the block's tensors."""
    n, h, i = tokens, vision.hidden_size, vision.intermediate_size
    nh = n * h

    def trains(*names: str) -> bool:
        return adapted is None or (not cast and any(name in adapted for name in names))

    tower = vision.tower
    lse = FP32 * vision.num_heads * n
    lora = 0
    for name, width, _ in vision.linears() if adapted is not None else ():
        if name in adapted:
            lora += (cast or dt) * n * rank + cast * n * width
    *attention_in, attention_out = tower.attention
    if tower.fused_qkv:  # qkv's input, its output (v is a view), q/k rotated, SDPA's out, the cat
        attention = dt * nh * (trains(*attention_in) + 3 + 2 + 1 + trains(attention_out)) + lse
    else:  # q/k/v's input; q, k, v and SDPA's output (= the output projection's input)
        attention = dt * nh * (trains(*attention_in) + 4) + lse
    if tower.rms_norm:  # fp32 input copy, rsqrt, normalised output (when the weight trains)
        norms = 2 * (FP32 * nh + FP32 * n) + (2 * dt * nh if adapted is None else 0)
    else:  # LayerNorm inputs, fp32 mean and rstd
        norms = 2 * (dt * nh + 2 * FP32 * n)
    *mlp_in, mlp_out = tower.mlp
    if tower.gated_mlp:  # the MLP's input; gate (SiLU's input), SiLU's output and up (both saved by their product);
        mlp = dt * nh * trains(*mlp_in) + dt * n * i * (3 + trains(mlp_out))  # down's input
    else:  # fc1's input, GELU's input, fc2's input
        mlp = dt * nh * trains(*mlp_in) + dt * n * i * (1 + trains(mlp_out))
    return norms + attention + mlp + lora


def _edges(vision: VisionSpec, tokens: int, *, dt: int) -> tuple[int, int, int]:
    """(the patch embedding's input, the final norm's tensors, the rotary tables) for N = `tokens`: the pixels
    (channels × temporal × patch² per token), the final LayerNorm (not Qwen2.5-VL's, not Pixtral's) and the rotary
    cos and sin (fp32: Qwen-VL, Pixtral; the blocks' rotary multiplications save them, checkpointed blocks not)."""
    n, h = tokens, vision.hidden_size
    pixels = dt * n * 3 * vision.temporal_patch_size * vision.patch_size**2
    rotary = 2 * FP32 * n * (h // vision.num_heads) if vision.tower.rotary else 0
    post = dt * n * h + 2 * FP32 * n if vision.tower.final_norm else 0
    return pixels, post, rotary


def projector_saved(model_type: str, vision: VisionSpec, tokens: int, *, dt: int, trained: bool) -> int:
    """What the projector saves for N = `tokens` encoder tokens, its weights trained or not (frozen, the gradient
    passing through to a tower that trains). m = N / merge² merged tokens:
    * Qwen-VL's merger (`Qwen2_5_VLPatchMerger`): RMSNorm `ln_q` on the N tokens (fp32 copy, rsqrt; the normalised
      output when trained), GELU's input, the linears' inputs when trained (m × 4h = N × h each);
    * Gemma 3 (`Gemma3MultiModalProjector`): the average pool's input, its RMSNorm on m tokens (fp32; (1 + w)'s
      fp32 normalised output and the matmul's input when trained);
    * Idefics3's connector and Llama-3.2-Vision's projection: one linear (its input when trained);
    * LLaVA's and Mistral 3's MLP: GELU's input, the linears' inputs when trained."""
    n, h, m = tokens, vision.hidden_size, tokens // max(vision.merge, 1) ** 2
    pin, out = vision.projector_in, vision.projector_out
    shape = projector_of(model_type).shape
    if shape is ProjectorShape.MERGER:
        return FP32 * n * h + FP32 * n + dt * n * h * (3 if trained else 1)
    if shape is ProjectorShape.POOL:
        return dt * n * h + FP32 * m * h + FP32 * m + ((FP32 + dt) * m * h if trained else 0)
    if shape is ProjectorShape.LINEAR:
        return dt * m * pin if trained else 0
    return dt * m * out + (dt * m * (pin + out) if trained else 0)


def outside_blocks_saved(model_type: str, vision: VisionSpec, tokens: int, *, dt: int) -> int:
    """Everything the tower and projector save outside the blocks when all of them train."""
    return sum(_edges(vision, tokens, dt=dt)) + projector_saved(model_type, vision, tokens, dt=dt, trained=True)


def vision_activations(model: ModelSpec, plan: TrainingPlan, encoder: int | None = None) -> VisionActivations | None:
    """The vision encoder's and projector's activations for the plan; None for a text model or text-only rows.

    Gradients reach the tower when it trains (weights or adapters: `vision_parts.part_training`) or, frozen, under
    gradient checkpointing: `gradient_checkpointing_enable` calls `enable_input_require_grads` (the VLM's
    `main_input_name` is input_ids), whose hook makes every sub-model's input embeddings — the vision tower's patch
    embedding among them — output a tensor that requires grad (transformers 5.24 `modeling_utils.py`). The
    projector saves when gradients pass it. `encoder`: one row's encoder tokens when given (a dataset's sample),
    else the plan's images'."""
    vision, parts = model.vision, part_training(model, plan)
    if vision is None or parts is None or not plan.has_vision:
        return None
    dt = plan.precision.compute_bits // 8
    n = plan.micro_batch * encoder if encoder is not None else encoder_tokens(model, plan)
    layers = vision.depth
    checkpointing = plan.checkpointing is not Checkpointing.NONE
    checkpointed = checkpointing and vision.tower.checkpointed
    tower = parts.tower != FROZEN
    adapted = None if parts.tower == FULL else parts.tower_adapted
    cast = 0 if dt == FP32 else (2 if plan.precision.is_amp else FP32)
    block = block_saved(vision, n, dt=dt, adapted=adapted, rank=plan.lora_rank, cast=cast)
    pixels, post, rotary = _edges(vision, n, dt=dt)
    grads = tower or checkpointing  # the tower's output requires grad
    saved = 0
    if grads:
        saved += layers * dt * n * vision.hidden_size + post if checkpointed else layers * block + post + rotary
        saved += pixels if parts.tower == FULL else 0  # the patch embedding's weight trains: it keeps the pixels
    if grads or parts.projector != FROZEN:
        saved += projector_saved(model.model_type, vision, n, dt=dt, trained=parts.projector != FROZEN)
    transient = block_saved(vision, n, dt=dt) if not tower or checkpointed else 0
    return VisionActivations(
        encoder_tokens=n,
        block_saved=block if grads else 0,
        saved=saved,
        transient=transient,
        trained=tower,
        parts=parts,
    )


__all__ = [
    "VisionActivations",
    "block_saved",
    "encoder_tokens",
    "outside_blocks_saved",
    "projector_saved",
    "vision_activations",
]
