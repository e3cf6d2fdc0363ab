"""A packed batch in a traced step: flash-attention 2's varlen kernel, emulated on the CPU.

`memdoc emit` writes `attn_implementation: flash_attention_2` next to the packing keys, so a packed step runs
transformers 5.24's flash path: TRL 1.16's padding-free collator (`trl/trainer/sft_trainer.py`
`DataCollatorForLanguageModeling.__call__`, `padding_free=True`) flattens the batch into one row of batch × seq
tokens whose `position_ids` restart per document, and passes the document boundaries as `cu_seq_lens_q/k`
(int32, batch + 1 entries) and `max_length_q/k`; `modeling_flash_attention_utils.py` `_flash_attention_forward`
then reshapes q, k, v to (tokens, heads, head_dim) (a copy of the transposed views) and calls
`flash_attn_varlen_func`. flash-attn cannot run on the CPU, and transformers' SDPA path would build a dense
block-diagonal mask from the packed position_ids (`masking_utils.find_packed_sequence_indices`: tokens² bytes),
which the FA2 run never allocates.

So the trace registers an attention function of its own (`VARLEN`) through transformers' `AttentionInterface`
(`modeling_utils.py`; its mask through `masking_utils.AttentionMaskInterface`, as `flash_attention_mask`: None
without padding) that reshapes q, k, v as transformers' varlen path does, attends per document (SDPA, causal,
one document at a time) and keeps what flash-attn 2's varlen forward keeps. flash-attn
`flash_attn/flash_attn_interface.py` (Dao-AILab/flash-attention): `_flash_attn_varlen_forward(q, k, v,
cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal, …)` returns
`out` (like q) and `softmax_lse` (fp32, (heads, total_q)); `FlashAttnVarlenFunc.forward` saves
`q, k, v, out_padded, softmax_lse` (+ the cu_seqlens and an rng state); its backward allocates `dq, dk, dv`
(`empty_like`) and `_flash_attn_varlen_backward` a `softmax_d` of fp32 (heads, total_q + 128 × batch)
(its registered fake). The boundaries reach the function as Python ints (fake tensors have no values) under
transformers' own kwarg names.
"""

from __future__ import annotations

VARLEN = "memdoc_varlen_fa2"
"""The attention implementation a packed trace runs: flash-attention 2 varlen, emulated (`varlen_attention`)."""


def document_bounds(batch: int, seq: int, document_tokens: int | None) -> tuple[int, ...]:
    """cu_seqlens of `batch` rows of `seq` tokens flattened into one, each row cut into documents of
    `document_tokens` (the last one of a row shorter when it does not divide; None: one document per row)."""
    doc = min(document_tokens or seq, seq)
    bounds = [0]
    for row in range(batch):
        start = row * seq
        bounds += [min(start + end, start + seq) for end in range(doc, seq + doc, doc)]
    return tuple(dict.fromkeys(bounds))


def packed_inputs(ids, bounds: tuple[int, ...]) -> dict:
    """The model's keyword inputs for the flattened row `ids` (1, tokens), as TRL's padding-free collator
    gives them: labels, position_ids restarting at each document, `cu_seq_lens_q/k` and `max_length_q/k`."""
    import torch

    lengths = [end - start for start, end in zip(bounds, bounds[1:])]
    position_ids = torch.cat([torch.arange(n) for n in lengths]).unsqueeze(0)
    return {
        "input_ids": ids,
        "labels": ids,
        "position_ids": position_ids,
        "cu_seq_lens_q": bounds,
        "cu_seq_lens_k": bounds,
        "max_length_q": max(lengths),
        "max_length_k": max(lengths),
    }


def _varlen_function():
    import torch
    from torch.nn.functional import scaled_dot_product_attention

    class VarlenAttention(torch.autograd.Function):
        """flash-attn 2's `FlashAttnVarlenFunc`: the memory it keeps and allocates (see the module docstring)."""

        @staticmethod
        def forward(ctx, q, k, v, bounds, scale):  # type: ignore[override]
            out = torch.empty_like(q)
            for start, end in zip(bounds, bounds[1:]):  # one document at a time: never tokens² of anything
                qd, kd, vd = (x[start:end].transpose(0, 1) for x in (q, k, v))
                doc = scaled_dot_product_attention(qd, kd, vd, is_causal=True, scale=scale, enable_gqa=True)
                out[start:end] = doc.transpose(0, 1)
                del doc
            lse = torch.empty((q.shape[1], q.shape[0]), dtype=torch.float32, device=q.device)
            ctx.save_for_backward(q, k, v, out, lse)
            ctx.documents = len(bounds) - 1
            return out

        @staticmethod
        def backward(ctx, dout):  # type: ignore[override]
            q, k, v, out, lse = ctx.saved_tensors
            dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
            softmax_d = torch.empty((q.shape[1], q.shape[0] + 128 * ctx.documents), dtype=torch.float32)
            del softmax_d
            return dq, dk, dv, None, None

    return VarlenAttention


def varlen_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """transformers' attention-function signature (`integrations/flash_attention.py` `flash_attention_forward`):
    query (batch, heads, seq, head_dim), key/value (batch, kv_heads, seq, head_dim) -> ((batch, seq, heads,
    head_dim), None), attending within the documents of `cu_seq_lens_q` (the whole row when absent)."""
    batch, heads, seq, head_dim = query.shape
    if attention_mask is not None:
        raise ValueError("the varlen emulation runs padding-free batches only (attention_mask must be None)")
    bounds = tuple(kwargs.get("cu_seq_lens_q") or range(0, batch * seq + 1, seq))
    # `_flash_attention_forward` (varlen kwargs): (b, h, s, d) -> (b, s, h, d) -> (b·s, h, d), a copy
    q, k, v = (x.transpose(1, 2).reshape(-1, x.shape[1], x.shape[-1]) for x in (query, key, value))
    out = _VARLEN_FN[0].apply(q, k, v, bounds, scaling)
    return out.view(batch, seq, heads, head_dim), None


_VARLEN_FN: list = []


def register_varlen() -> None:
    """Register `VARLEN` with transformers' attention and mask interfaces (once per process)."""
    if _VARLEN_FN:
        return
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask

    _VARLEN_FN.append(_varlen_function())
    AttentionInterface.register(VARLEN, varlen_attention)
    AttentionMaskInterface.register(VARLEN, flash_attention_mask)


__all__ = ["VARLEN", "document_bounds", "packed_inputs", "register_varlen", "varlen_attention"]
