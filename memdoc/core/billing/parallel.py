"""Context and tensor parallelism: what one rank holds, and what it sends.

A plan with `--cp` or `--tp` is billed as the plan one rank runs (`rank_share`), plus that rank's buffers and
traffic:

* **Tensor parallelism** (transformers 5.24 `tp_plan="auto"`: `models/llama/configuration_llama.py`
  `LlamaConfig.base_model_tp_plan`, Qwen2 the same; `LlamaForCausalLM._tp_plan`): q/k/v and gate/up are split
  column-wise and o/down row-wise, so a rank holds heads/tp (and kv heads/tp) and intermediate/tp of every
  layer; the LM head is split column-wise (`colwise_gather_output`: vocab/tp rows, the logits gathered whole);
  the embedding and the norms are not in the plan and stay whole on every rank. The rank's model is the model
  with heads, kv heads and the MLP width divided by tp (`tp_rank_model`): its weights, gradients, optimizer
  states and the activations inside attention and the MLP are the rank's; the hidden-wide activations (norms,
  residual stream, the linears' inputs) stay whole, as no sequence parallelism splits them in transformers'
  plan (torchtitan's sequence-parallel norms would split them too: not billed, the bill is an upper bound
  there). Each layer all-reduces its attention and MLP outputs in forward and the column-wise linears' input
  gradients in backward (Megatron-LM, Shoeybi et al. 2019, §3, fuses q/k/v: 4 per layer; torch's styles: 7).
* **Context parallelism**: each rank holds seq/cp of every activation. Ulysses (`deepspeed/sequence/layer.py`
  `DistributedAttention`, `_SeqAllToAll`) all-to-alls q, k and v before attention and the output after it, in
  forward and (the gradients) in backward; attention then sees all tokens and heads/cp, the same number of
  elements as seq/cp × all heads, so the saved q/k/v/output are the rank's seq/cp share; the tensors before the
  all-to-all (q, k, v and the output's permuted copy) are transients of one layer. With fewer kv heads than cp,
  ALST replicates each kv head to cp/kv ranks. Ring attention (torch 2.13
  `distributed/tensor/experimental/_context_parallel/_attention.py` `_templated_ring_attention`, the default
  `_AllGatherRotater`) all-gathers the sequence's k and v once per layer (one T × 2·kv buffer) next to the
  concatenated local k/v it sends and an fp32 output merge (`_SDPAMerger`, `convert_to_f32`); its backward
  gathers again and passes dk/dv, fp32 (`accum_dtype`), round the ring cp times (`_AllToAllRotater`). With the
  default head-tail load balance, every rank but the last runs a partial step whose merge `torch.cat`s the
  output into (B, H, L, D), so o_proj's input is a copy, saved on top of the share (measured on 2 CPU ranks,
  `test_parallel_ranks.py`).
* **Sharding** runs over world / tp GPUs: accelerate's FSDP mesh is `dp_shard_cp` (`parallelism_config.py`
  `ParallelismConfig.dp_shard_cp_dim_names`), DeepSpeed's ZeRO partitions over the sequence-data-parallel group.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass

from memdoc.core.model.families import HeadDim, Layout
from memdoc.core.model.model_spec import ModelSpec, spec_from_config
from memdoc.core.model.plan import Attention, Checkpointing, CpImpl, TrainingPlan
from memdoc.errors import PlanError


@dataclass(frozen=True, kw_only=True)
class RankShare:
    """What one rank of a CP/TP plan runs: its model and plan, and its buffers on top."""

    model: ModelSpec
    """The model one TP rank holds (the model itself without TP)."""
    plan: TrainingPlan
    """The plan one rank runs: seq/cp tokens, world / tp GPUs to shard over, cp = tp = 1."""
    forward_buffers: int
    """Bytes of one layer's CP buffers in flight in forward (all-to-all inputs, the ring's gathered k/v)."""
    backward_buffers: int
    """Bytes of one layer's CP buffers in flight in backward."""
    notes: tuple[str, ...]
    """What the bill says about the split (said once, in the bill's notes)."""
    extra_saved: int
    """Bytes Ulysses saves beyond the rank's seq/cp share, all layers: o_proj's input is the output all-to-all's
    result, no longer a view of the attention's saved output; kv heads replicated when fewer than cp."""


def check_parallel_model(model: ModelSpec, plan: TrainingPlan) -> None:
    """Refuse CP/TP splits the model's heads cannot take, naming the nearest degree that works."""
    heads = model.num_heads // plan.tp
    if plan.tp > 1:
        arch = model.arch
        if arch.layout is not Layout.LLAMA_LIKE or model.is_moe or arch.head_dim is not HeadDim.CONFIG:
            raise PlanError(
                f"--tp with {model.model_type}: memdoc bills transformers' tp_plan for dense Llama-like decoders "
                "(llama, qwen2, mistral, …) only"
            )
        if model.num_heads % plan.tp or model.num_kv_heads % plan.tp or model.intermediate_size % plan.tp:
            raise PlanError(
                f"--tp {plan.tp} must divide {model.id}'s {model.num_heads} heads, {model.num_kv_heads} kv heads "
                f"and MLP width {model.intermediate_size}; nearest: --tp {_nearest(plan.tp, _tp_degrees(model))}"
            )
    if plan.cp > 1 and plan.attention is Attention.EAGER:
        raise PlanError("--cp needs --attention sdpa or flash: Ulysses and ring attention run a fused kernel")
    if plan.cp > 1 and plan.cp_impl is CpImpl.ULYSSES and heads % plan.cp:
        valid = [d for d in range(1, heads + 1) if heads % d == 0]
        raise PlanError(
            f"--cp {plan.cp} --cp-impl ulysses must divide the {heads} attention heads of {model.id} on each "
            f"TP rank; nearest: --cp {_nearest(plan.cp, valid)}, or --cp-impl ring"
        )


def _tp_degrees(model: ModelSpec) -> list[int]:
    return [
        d
        for d in range(1, model.num_kv_heads + 1)
        if not (model.num_heads % d or model.num_kv_heads % d or model.intermediate_size % d)
    ]


def _nearest(value: int, valid: list[int]) -> int:
    """The valid degree closest to `value` (the smaller of two equally close)."""
    return min(valid, key=lambda d: (abs(d - value), d))


_RANK_MODELS: dict[tuple[int, int], tuple[ModelSpec, ModelSpec]] = {}
_LOCK = threading.Lock()


def tp_rank_model(model: ModelSpec, tp: int) -> ModelSpec:
    """The model one TP rank holds (module docstring): heads, kv heads and MLP width / tp, the LM head's rows /
    tp (untied; a tied head shares the whole embedding), everything else whole. Built from the config, so its
    parameter counts and layer layouts are exact; one object per (model, tp), so bills of it are memoised."""
    if tp == 1:
        return model
    key = (id(model), tp)
    with _LOCK:
        hit = _RANK_MODELS.get(key)
        if hit is not None and hit[0] is model:
            return hit[1]
    config = {
        **model.config,
        "num_attention_heads": model.num_heads // tp,
        "num_key_value_heads": model.num_kv_heads // tp,
        "intermediate_size": model.intermediate_size // tp,
        "head_dim": model.head_dim,
    }
    rank = spec_from_config(config, model_id=model.id, source=model.source)
    params = dataclasses.replace(rank.params, head=-(-rank.params.head // tp))
    if model.vision is not None:  # vision parts whole: only the text config has a `base_model_tp_plan` (qwen2_5_vl)
        parts = {k: getattr(model.params, k) for k in ("vision", "projector", "cross_attention")}
        params = dataclasses.replace(params, **parts)
        rank = dataclasses.replace(rank, vision=model.vision, model_type=model.model_type)
    rank = dataclasses.replace(rank, params=dataclasses.replace(params, active=params.total), config_of=model.config_of)
    with _LOCK:
        _RANK_MODELS[key] = (model, rank)
    return rank


def rank_plan(plan: TrainingPlan) -> TrainingPlan:
    """The plan one rank runs: seq/cp tokens (rounded up), sharding over world / tp GPUs, no CP or TP."""
    return plan.replace(seq_len=-(-plan.seq_len // plan.cp), gpus_per_node=plan.gpus_per_node // plan.tp, cp=1, tp=1)


def rank_share(model: ModelSpec, plan: TrainingPlan) -> RankShare:
    """What one rank of `plan` holds (module docstring)."""
    check_parallel_model(model, plan)
    rank_model = tp_rank_model(model, plan.tp)
    local = rank_plan(plan)
    e = plan.precision.compute_bits // 8
    tokens = local.micro_batch * local.seq_len
    q, kv = rank_model.q_dim, rank_model.kv_dim
    forward = backward = extra = 0
    if plan.cp > 1 and plan.cp_impl is CpImpl.ULYSSES:
        # q, k, v before the all-to-all, and the permuted copy `_SeqAllToAll` sends (the largest, q)
        forward = backward = tokens * (2 * q + 2 * kv) * e
        extra = tokens * q * e * model.num_layers
        kv_heads = rank_model.num_kv_heads
        if kv_heads < plan.cp:  # each rank gets one replicated kv head of every token: k and v, saved by attention
            per_rank = tokens * plan.cp * rank_model.head_dim * 2 * e
            extra += (per_rank - tokens * 2 * kv) * model.num_layers
    elif plan.cp > 1:
        gathered = plan.cp * tokens * 2 * kv * e  # the whole sequence's k and v
        sent = tokens * 2 * kv * e  # torch.cat of the local k, v
        merge = tokens * q * 4  # fp32 output accumulator (dq's in backward)
        forward = gathered + sent + merge
        backward = gathered + sent + 2 * tokens * 2 * kv * 4 + merge  # dk/dv sent and received, fp32
        # a rank with a partial step (all but the last, head-tail balanced) merges by torch.cat: o_proj's input a copy
        extra = tokens * q * e * model.num_layers
    return RankShare(
        notes=_notes(plan),
        model=rank_model,
        plan=local,
        forward_buffers=forward,
        backward_buffers=backward,
        extra_saved=extra,
    )


def _notes(plan: TrainingPlan) -> tuple[str, ...]:
    notes = []
    if plan.cp > 1:
        impl = "Ulysses all-to-alls" if plan.cp_impl is CpImpl.ULYSSES else "ring attention"
        notes.append(
            f"context parallel over {plan.cp} GPUs ({impl}): each rank holds {plan.seq_len:,} / {plan.cp} tokens' "
            f"activations; {plan.dp_size} data-parallel replica(s) of {plan.cp * plan.tp} GPUs"
        )
    if plan.tp > 1:
        notes.append(
            f"tensor parallel over {plan.tp} GPUs (transformers' tp_plan): the linears split, the embedding, norms, "
            "hidden-wide activations and logits whole on every rank (sequence-parallel norms, as torchtitan's, "
            "would split those activations too)"
        )
    return tuple(notes)


@dataclass(frozen=True, kw_only=True)
class ParallelTraffic:
    """One rank's CP and TP traffic per optimizer step."""

    tp_bytes: float
    """Bytes sent by the TP all-reduces (and the LM head's all-gather)."""
    cp_bytes: float
    """Bytes sent by the CP all-to-alls or ring."""
    cp_hidden: bool
    """Ring attention overlaps its k/v exchange with the blocks' attention; Ulysses' all-to-alls and TP's
    all-reduces sit between dependent kernels, on the critical path."""


def parallel_traffic(model: ModelSpec, plan: TrainingPlan) -> ParallelTraffic:
    """Bytes one rank sends per optimizer step for CP and TP (ring algorithm factors, as `comm.py`).

    TP: all-reduces of T·h, 2(tp−1)/tp of each: per layer 2 in forward (o_proj, down_proj; +2 with full
    checkpointing's recompute) and one in backward per column-wise linear (q, k, v, gate, up: torch reduces each
    module's input gradient on its own; 5 × 2 layers + 1 counted on 2 CPU ranks, `test_parallel_ranks.py`); the LM
    head's all-gather of T × V, (tp−1)/tp, and the all-reduce of its input's gradient (torch 2.13
    `distributed/tensor/parallel/style.py` `ColwiseParallel`: a replicated input, its gradient summed).
    Ulysses: q, k, v and the output all-to-all in forward and backward (+ forward again with recompute),
    (cp−1)/cp of each rank's share. Ring: the k/v all-gather, (cp−1)/cp of the sequence's k and v, once
    in forward (+1 with recompute) and once in backward, and cp sends of the rank's dk/dv in fp32 (the
    `_AllToAllRotater` of `_templated_ring_attention_backward`, once per ring step).
    """
    rank = tp_rank_model(model, plan.tp)
    local = rank_plan(plan)
    e = plan.precision.compute_bits // 8
    tokens = local.micro_batch * local.seq_len
    recompute = 1 if plan.checkpointing is not Checkpointing.NONE else 0
    tp_bytes = cp_bytes = 0.0
    if plan.tp > 1:
        share = (plan.tp - 1) / plan.tp
        colwise = len(model.layouts[0].linears) - 2  # all but o_proj and down_proj
        per_layer = (2 + colwise + 2 * recompute) * 2 * share * tokens * model.hidden_size * e
        head = share * tokens * model.vocab_size * e + 2 * share * tokens * model.hidden_size * e
        tp_bytes = per_layer * model.num_layers + head
    if plan.cp > 1:
        share = (plan.cp - 1) / plan.cp
        if plan.cp_impl is CpImpl.ULYSSES:
            per_layer = (2 + recompute) * share * tokens * (2 * rank.q_dim + 2 * rank.kv_dim) * e
        else:
            kv_local = tokens * 2 * rank.kv_dim
            per_layer = (2 + recompute) * (plan.cp - 1) * kv_local * e + plan.cp * kv_local * 4
        cp_bytes = per_layer * model.num_layers
    return ParallelTraffic(
        tp_bytes=tp_bytes * plan.grad_accum,
        cp_bytes=cp_bytes * plan.grad_accum,
        cp_hidden=plan.cp_impl is CpImpl.RING,
    )
