"""What the final norm, the LM head and the loss keep: HF's cross-entropy or Liger's fused one."""

from __future__ import annotations

from memdoc.core.billing.activations.kernels import liger_layers
from memdoc.core.billing.activations.saved import FP32, SavedTensors, norm_saved
from memdoc.core.model.families import Norm
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.plan import Loss, Method, TrainingPlan


def head_saved(model: ModelSpec, plan: TrainingPlan, *, dt: int, amp: bool) -> tuple[int, int, int]:
    """(saved, forward transient, backward transient) bytes of final norm, LM head and loss.

    HF `ForCausalLMLoss` upcasts the logits: `logits.float()` (fp32 copy, transient unless the
    logits already are fp32), then `cross_entropy` = log_softmax (fp32 output saved) + nll_loss.
    The 16-bit logits tensor itself lives until the loss is computed. Backward starts with the
    nll gradient and the log_softmax gradient (fp32, T×V each) while the saved log_softmax is
    still alive.
    """
    T = plan.micro_batch * plan.seq_len
    V = model.vocab_size
    h = model.hidden_size
    full = plan.method is Method.FULL
    norm = SavedTensors()
    if model.arch.norm is Norm.LAYER:  # final LayerNorm: its input and per-token statistics
        norm.add("final_norm", (FP32 if amp else dt) * T * h + 2 * FP32 * T)
        if model.config.get("embd_pdrop"):  # GPT-2's embedding dropout mask
            norm.add("embedding_dropout", (2 if amp else dt) * T * h)
    else:
        gemma = model.arch.norm is Norm.GEMMA_RMS
        liger = liger_layers(model, plan)
        norm_saved(norm, "final_norm", T, h, dt=dt, trainable=full, gemma=gemma, amp=amp, liger=liger)
    if plan.loss is not Loss.HF:
        return _fused_head(model, plan, norm.total, dt=dt, amp=amp)
    saved = norm.total + (dt * T * h if full else 0) + FP32 * T * V
    logits_dt = 2 if amp else dt
    if model.arch.logit_softcapping and model.config.get("final_logit_softcapping"):
        saved += logits_dt * T * V  # tanh saves its output
    upcast = 0 if logits_dt == FP32 else FP32 * T * V
    forward_transient = logits_dt * T * V + upcast
    backward_transient = 2 * FP32 * T * V
    return saved, forward_transient, backward_transient


def fused_chunk_tokens(tokens: int, hidden: int, vocab: int) -> int:
    """Liger's chunk: next_power_of_2(ceil(BT / ceil(V / H))) tokens, so one chunk's logits ≈ BT × H."""
    inc_factor = -(-vocab // hidden)
    chunk = -(-tokens // inc_factor)
    return min(tokens, 1 << (chunk - 1).bit_length())


def _fused_head(model: ModelSpec, plan: TrainingPlan, norm_bytes: int, *, dt: int, amp: bool) -> tuple[int, int, int]:
    """Fused linear cross-entropy (Liger `fused_linear_cross_entropy_forward`): no full logits.

    The forward allocates `grad_input = zeros_like(input)` (T × H) and, when the head trains,
    `grad_weight = zeros_like(weight)` (V × H), loops over token chunks computing one chunk's
    logits (chunk × V, turned into their gradient in place) and accumulates both gradients; they
    are what it saves for backward, which only rescales them. Plus an fp32 loss per token.
    """
    T = plan.micro_batch * plan.seq_len
    V, h = model.vocab_size, model.hidden_size
    act_bytes = 2 if amp else dt
    saved = norm_bytes + act_bytes * T * h + FP32 * T
    if plan.method is Method.FULL:
        saved += (plan.precision.param_bits // 8) * V * h  # grad_weight, built in the forward
    chunk = fused_chunk_tokens(T, h, V)
    return saved, act_bytes * chunk * V, 0


__all__ = ["fused_chunk_tokens", "head_saved"]
