"""What the final norm, the LM head and the loss keep: HF's cross-entropy, Liger's fused one or TRL's fused head."""

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
    if plan.loss is Loss.TRL_FUSED:
        return _trl_fused_head(model, plan, norm.total, dt=dt, amp=amp)
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


TRL_TOKEN_CHUNK = 4096
"""Rows of TRL's tile buffer: `TOKEN_CHUNK_SIZE` in trl/kernels/chunked_logprob.py."""
TRL_VOCAB_CHUNK = 32768
"""Columns of TRL's tile buffer: `_CHUNKED_LOGPROB_CHUNK_SIZE` in trl/trainer/utils.py, whatever the vocabulary."""


def trl_scored_tokens(plan: TrainingPlan) -> int:
    """Tokens TRL's fused head scores: the positions whose next-token label is not -100, batch × (seq − prompt).

    `add_fused_lm_head` (trl/trainer/utils.py, 1.16) drops the last position of each row
    (`last_hidden_state[:, :-1]`, `labels[:, 1:]`) and, on a Triton device (`compact`), gathers only the labelled
    ones (`hidden_states[mask]`). The trainers label the completion only: DPO/KTO mask the prompt
    (`input_ids.masked_fill(completion_mask == 0, -100)`), GRPO/RLOO every position before the last
    `logits_to_keep` (`labels[:, :-logits_to_keep] = -100`). `plan.prompt_len` is that unlabelled prefix
    (`posttrain.rows.policy_plan` sets it: the prompt for the online tasks); None: every position but the last
    (SFT's default, unchanged).
    """
    prompt = max(plan.prompt_len or 1, 1)
    return plan.micro_batch * max(plan.seq_len - prompt, 0)


def trl_tile_bytes(plan: TrainingPlan, tokens: int) -> int:
    """TRL's `mm_buf`: `torch.empty((min(N, 4096), 32768))` in the compute dtype, once in the forward and
    once in the backward of `ChunkedLogProbFunction` (trl/kernels/chunked_logprob.py)."""
    return min(tokens, TRL_TOKEN_CHUNK) * TRL_VOCAB_CHUNK * (plan.precision.compute_bits // 8)


def _trl_fused_head(
    model: ModelSpec, plan: TrainingPlan, norm_bytes: int, *, dt: int, amp: bool
) -> tuple[int, int, int]:
    """TRL's fused LM head (`trl.trainer.utils.add_fused_lm_head`, `ChunkedLogProbFunction`), what it
    allocates and saves with N = `trl_scored_tokens` and the compute dtype `cb` (the autocast dtype, else
    the hidden states' dtype):

    * forward: the scored hidden states are gathered (`hidden_states[mask]`, a copy of N × H in their
      dtype, fp32 under full AMP) and saved with the int64 targets, `log_z` and the entropy (fp32, SFT asks
      for it) and the label mask; transient: the tile buffer (`trl_tile_bytes`), 7 fp32 per-token running
      statistics, and under full AMP the compute-dtype copies of a token chunk and of a vocabulary chunk
      of the fp32 head weight (`.to(compute_dtype)`);
    * backward, before the decoder layers: `grad_hidden` (fp32, N × H), `grad_weight` (fp32, V × H, when
      the head trains), the tile buffer again and the same chunk copies; at its return, `grad_hidden` and
      `grad_weight` cast to the input's and the weight's dtypes while the fp32 ones are alive.
    """
    N, V, h = trl_scored_tokens(plan), model.vocab_size, model.hidden_size
    cb = plan.precision.compute_bits // 8
    hidden_bytes = FP32 if amp else dt
    full = plan.method is Method.FULL
    saved = norm_bytes + hidden_bytes * N * h + (8 + FP32 + FP32 + 1) * N
    chunk_copies = cb * (min(N, TRL_TOKEN_CHUNK) + min(V, TRL_VOCAB_CHUNK)) * h if amp else 0
    tile = trl_tile_bytes(plan, N)
    forward = tile + 7 * FP32 * N + chunk_copies
    param_bytes = plan.precision.param_bits // 8
    fp32_grads = FP32 * N * h + (FP32 * V * h if full else 0)
    casts = (hidden_bytes * N * h if hidden_bytes != FP32 else 0) + (
        param_bytes * V * h if full and param_bytes != FP32 else 0
    )
    return saved, forward, fp32_grads + tile + chunk_copies + casts


__all__ = ["fused_chunk_tokens", "head_saved", "trl_scored_tokens", "trl_tile_bytes"]
