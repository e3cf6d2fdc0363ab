"""torchtitan's op-level selective activation checkpointing (`--checkpointing sac-op`): what a layer keeps.

The policy (torchtitan `_apply_ac_to_transformer_block`, `selective_ac_option = "op"`, the `_custom_policy` of
the 2024 releases its published Llama runs used): inside each checkpointed decoder layer, MUST_SAVE the output
of every op in `_save_list` (`aten.mm`, the SDPA kernels, `reduce_scatter_tensor`, `aten.max` for float8), except
every second `aten.mm` (`meta["forward_mm_count"] % 2 == 0`, the counter created afresh per layer by
`selective_checkpointing_context_fn`); PREFER_RECOMPUTE everything else. So the 1st, 3rd, 5th … matmul of a
layer is saved and the 2nd, 4th … recomputed, with every norm, rotary and activation; the checkpoint keeps the
layer's input. In a Llama layer (q, k, v, o, gate, up, down in forward order): q, v, gate and down are saved,
k, o and up recomputed. A biased projection runs `aten.addmm`, which is not in the list: it is recomputed and
does not advance the count; MoE routed experts (`grouped_mm`) likewise.

This differs from memdoc's `selective` (HF-style: every matmul output saved, `layer.selective_saved`).
"""

from __future__ import annotations

from memdoc.core.billing.activations.saved import FP32
from memdoc.core.billing.kbit import stream_bytes
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.params import Linear
from memdoc.core.model.plan import TrainingPlan


def saved_matmuls(linears: tuple[Linear, ...] | list[Linear]) -> tuple[list[Linear], list[Linear]]:
    """(saved, recomputed) projections of one layer, in forward order, by torchtitan's every-other-`mm` rule."""
    saved, recomputed = [], []
    count = 0
    for linear in linears:
        if linear.bias or linear.group == "experts":  # addmm / grouped_mm: not in `_save_list`
            recomputed.append(linear)
            continue
        count += 1
        (recomputed if count % 2 == 0 else saved).append(linear)
    return saved, recomputed


def sac_op_saved(model: ModelSpec, plan: TrainingPlan, index: int, *, mm_dt: int) -> int:
    """Bytes one layer keeps under op-level SAC: its input, the saved matmuls' outputs, SDPA's output and
    logsumexp (fp32 per head and token)."""
    dt = plan.precision.compute_bits // 8
    T = plan.micro_batch * plan.seq_len
    kept = stream_bytes(plan, dt) * T * model.hidden_size  # the checkpointed layer's input
    saved, _ = saved_matmuls(model.layouts[index].linears)
    kept += sum(mm_dt * T * linear.out_features for linear in saved)
    kept += dt * T * model.q_dim + FP32 * plan.micro_batch * model.num_heads * plan.seq_len  # SDPA out + lse
    return kept


def recomputed_linear_share(model: ModelSpec) -> float:
    """Share of the decoder's linear parameters whose matmuls op-level SAC runs again in backward."""
    total = recomputed = 0
    for _, layout, layers in model.layer_groups:
        _, again = saved_matmuls(layout.linears)
        total += layers * layout.params()
        recomputed += layers * sum(linear.params for linear in again)
    return recomputed / total if total else 0.0


__all__ = ["recomputed_linear_share", "sac_op_saved", "saved_matmuls"]
