"""Model states: weights, gradients and optimizer states, in bytes, before sharding and offload.

Dtype rules (what HF Trainer / peft / bitsandbytes actually allocate):
* pure bf16/fp16: weights, gradients and optimizer states in 16 bit (no master copy);
* fp32: everything 4 bytes; AMP (`amp-*`): fp32 weights (they are the master copy), fp32 grads,
  fp32 states — the 16-bit copies made by autocast are activations (`activations.weight_copies`);
* full fine-tuning under DeepSpeed or FSDP (any sharding or offload): the engine's layout
  (`core/engines/layout.py`): DeepSpeed keeps 16-bit working weights and gradients, fp32 master weights
  + fp32 states as the optimizer's (12 bytes/param for AdamW) and an fp32 gradient in the step — the
  layout behind DeepSpeed's `estimate_zero2/3_model_states_mem_needs`; accelerate's FSDP keeps fp32
  flat parameters, gradients and states (16 bytes/param), stepped by the engine's own Adam (no foreach
  temporaries);
* LoRA: the frozen base in the compute dtype; adapters in fp32 (peft's default
  `autocast_adapter_dtype=True` upcasts 16-bit adapters), so their grads and states are fp32;
* QLoRA: every base `nn.Linear` of the decoder in NF4 — 4 bits per weight, one 8-bit absmax per
  64-weight block, and one fp32 absmax per 256 of those (bitsandbytes double quantisation:
  0.5 + 1/64 + 4/16384 bytes per weight), MoE experts too when they are `nn.Linear`s (transformers 4.x,
  `--moe-experts linear`); embeddings, norms, the LM head, biases and (transformers 5)
  fused MoE experts stay 16-bit (`qlora_weight_bytes`), or become fp32 with `kbit_upcast`
  (peft's `prepare_model_for_kbit_training`, `kbit.upcast_weight_bytes`).
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from memdoc.core.billing.kbit import linear_experts, quantised_params, upcast_weight_bytes
from memdoc.core.billing.vision_parts import frozen_vision_params, vision_adapter_shapes
from memdoc.core.engines.layout import Engine, engine_layout
from memdoc.core.model.lora import adapted_names, is_trained
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.plan import Attention, Checkpointing, Loss, Method, Optimizer, TrainingPlan

NF4_BYTES_PER_WEIGHT = 0.5 + 1 / 64 + 4 / (64 * 256)
"""4-bit code + 8-bit absmax per 64 weights + fp32 second-level absmax per 256 blocks."""

BNB_BLOCK = 256
"""bitsandbytes 8-bit optimizers quantise states block-wise, one fp32 absmax per 256 values."""
BNB_MIN_8BIT_SIZE = 4096
"""bitsandbytes keeps 32-bit states for tensors smaller than this (`min_8bit_size`)."""


@dataclass(frozen=True, kw_only=True)
class ModelStates:
    """Weights, gradients and optimizer states of the whole model (unsharded), in bytes."""

    weights: int
    gradients: int
    optimizer: int
    optimizer_step_temp: int
    """Transient bytes inside `optimizer.step()` (foreach AdamW: one state-sized buffer)."""
    trainable_params: int
    largest_layer_params: int
    """Parameters of the largest decoder layer (all-gather unit under ZeRO-3/FSDP)."""


Shapes = Counter
"""(rows, cols) of tensors → how many such tensors (layers repeat: counts, not lists of L entries)."""


def _lora_params(model: ModelSpec, plan: TrainingPlan) -> tuple[int, Shapes]:
    """(adapter parameter count, {(in, out): count} of adapted matrices) for the plan's targets."""
    targets = adapted_names(plan)
    shapes: Shapes = Counter()
    for _, layout, layers in model.layer_groups:
        for linear in layout.linears:
            if is_trained(linear, targets):
                shapes[(linear.in_features, linear.out_features)] += layers
    shapes += vision_adapter_shapes(model, plan)  # a VLM's tower and projector linears the targets reach
    return sum(plan.lora_rank * (a + b) * k for (a, b), k in shapes.items()), shapes


def qlora_weight_bytes(model: ModelSpec, base_bytes: int, *, experts: bool = False) -> int:
    """Weights of a 4-bit model: NF4 for what bitsandbytes quantises, 16-bit for the rest.

    transformers replaces `nn.Linear` (and GPT-2's Conv1D) modules only
    (`integrations/bitsandbytes.py: replace_with_bnb_linear`); since transformers 5 the routed
    experts of MoE models are fused 3-D parameters, not `nn.Linear`, so they stay 16-bit — as do
    the linears' biases, routers, embeddings, norms and the LM head (`kbit.quantised_params`). With
    `experts` (transformers 4.x: `nn.ModuleList` of expert MLPs of `nn.Linear`s) the experts are NF4 too.
    """
    quantised = quantised_params(model, experts=experts)
    return int(quantised * NF4_BYTES_PER_WEIGHT) + (model.params.total - quantised) * base_bytes


def trainable_params(model: ModelSpec, plan: TrainingPlan) -> int:
    """Trainable parameters: all for full fine-tuning (a VLM's frozen vision parts aside), the adapters for LoRA."""
    if plan.method is Method.FULL:
        return model.params.total - frozen_vision_params(model, plan)
    return _lora_params(model, plan)[0]


def _optimizer_bytes(plan: TrainingPlan, shapes: Shapes, state_bytes: int) -> tuple[int, int]:
    """(state bytes, step temporaries) for tensors of `shapes` (rows, cols) whose states are `state_bytes` wide.

    AdamW (torch): exp_avg + exp_avg_sq; the foreach path builds one sqrt(exp_avg_sq) buffer of
    the whole group (torch/optim/adamw.py `_multi_tensor_adam`), fused does not.
    8-bit AdamW (bitsandbytes): 2 uint8 states + fp32 absmax per 256 values; 32-bit below 4096.
    SGD (momentum 0.9), Lion: one state. Adafactor: factored second moment (row + column) for
    matrices, full for vectors; no first moment (transformers' default beta1=None).
    """
    numels = Counter()
    for (r, c), k in shapes.items():
        numels[r * c] += k
    n = sum(numel * k for numel, k in numels.items())
    opt = plan.optimizer
    if opt in (Optimizer.ADAMW, Optimizer.ADAMW_FUSED):
        temp = n * state_bytes if opt is Optimizer.ADAMW else 0
        return 2 * n * state_bytes, temp
    if opt in (Optimizer.ADAMW_8BIT, Optimizer.PAGED_ADAMW_8BIT):
        total = 0
        for numel, k in numels.items():
            if numel < BNB_MIN_8BIT_SIZE:
                total += k * 2 * numel * 4
            else:
                total += k * 2 * (numel + 4 * math.ceil(numel / BNB_BLOCK))
        return total, 0
    if opt in (Optimizer.SGD, Optimizer.LION):
        return n * state_bytes, n * state_bytes if opt is Optimizer.LION else 0
    if opt is Optimizer.ADAFACTOR:
        factored = sum(k * (r + c if c > 1 and r > 1 else r * c) for (r, c), k in shapes.items())
        return factored * state_bytes, max(numels) * state_bytes
    raise AssertionError(opt)


def _param_shapes(model: ModelSpec, frozen: int = 0) -> Shapes:
    """{(rows, cols): count} of the model's trained parameter tensors; biases and norms as vectors (n, 1); the rest
    (a VLM's vision parts among it) as one vector, less `frozen` parameters (`vision_parts.frozen_vision_params`)."""
    out: Shapes = Counter()
    for _, layout, layers in model.layer_groups:
        for linear in layout.linears:
            out[(linear.out_features, linear.in_features)] += layers * linear.copies
            if linear.bias:
                out[(linear.out_features, 1)] += layers * linear.copies
        out[(layout.norm_params, 1)] += layers
    out[(model.vocab_size, model.params.embedding // model.vocab_size)] += 1
    if model.params.head:
        out[(model.vocab_size, model.params.head // model.vocab_size)] += 1
    rest = (
        model.params.total - frozen - sum(r * c * k for (r, c), k in out.items())
    )  # final norm, position embeddings, head bias
    if rest:
        out[(rest, 1)] += 1
    return out


@dataclass(frozen=True, kw_only=True)
class ParameterTensors:
    """Element counts of the model's parameter tensors in creation order, unsharded.

    `layers[i]`: decoder layer i (its linears, biases, then its norms as one vector; transformers 5
    stores routed experts fused, one 3-D tensor per projection); `trainable[i]`: the tensors of
    layer i that train (all for full fine-tuning, LoRA's lora_A (r × in) and lora_B (out × r)
    otherwise). Used by the allocator's event stream (`step_events`).
    """

    embedding: int
    layers: list[list[int]]
    head: int
    other: int
    """Final norm, position embeddings, head bias."""
    trainable: list[list[int]]


T = TypeVar("T")


def per_layout(model: ModelSpec, compute: Callable[[int, Any], T]) -> list[T]:
    """`compute(i, layout)` for each decoder layer i, computed once per distinct layout (at its first layer) and
    shared by the layers of an equal layout. A layout is hashed once per distinct object: `model.layouts[i]`
    is one object for every layer of a one-layout model, and a layout's hash walks all its linears."""
    by_id: dict[int, tuple[Any, T]] = {}  # (the layout itself, kept alive so that its id stays its own; value)
    by_layout: dict[Any, T] = {}
    out = []
    for i in range(model.num_layers):
        layout = model.layouts[i]
        if id(layout) not in by_id:
            if layout not in by_layout:
                by_layout[layout] = compute(i, layout)
            by_id[id(layout)] = (layout, by_layout[layout])
        out.append(by_id[id(layout)][1])
    return out


def _layout_numels(layout) -> list[int]:
    """Element counts of one decoder layer's parameter tensors: each linear's weight (and bias), expert
    copies as one tensor per expert unless grouped, then the norms."""
    numels = []
    for linear in layout.linears:
        copies = 1 if linear.group == "experts" else linear.copies
        numels.extend([linear.out_features * linear.in_features * linear.copies // copies] * copies)
        if linear.bias:
            numels.extend([linear.out_features * linear.copies // copies] * copies)
    numels.append(layout.norm_params)
    return numels


def parameter_tensors(model: ModelSpec, plan: TrainingPlan) -> ParameterTensors:
    """The plan's parameter tensors per layer (see `ParameterTensors`); each distinct layer layout is
    counted once (a layer's tensors depend on its layout alone)."""
    layers = [list(numels) for numels in per_layout(model, lambda _, layout: _layout_numels(layout))]
    other = model.params.total - model.params.embedding - model.params.head - sum(map(sum, layers))
    if plan.method is Method.FULL:
        trainable = layers
    else:
        targets = adapted_names(plan)
        adapters = per_layout(
            model,
            lambda _, layout: [
                n
                for linear in layout.linears
                if is_trained(linear, targets)
                for n in (plan.lora_rank * linear.in_features, linear.out_features * plan.lora_rank)
            ],
        )
        trainable = [list(row) for row in adapters]
    return ParameterTensors(
        embedding=model.params.embedding,
        layers=layers,
        head=model.params.head,
        other=max(other, 0),
        trainable=trainable,
    )


def model_states(model: ModelSpec, plan: TrainingPlan) -> ModelStates:
    """Unsharded weights / grads / optimizer states of the plan, in bytes.

    Memoised on the plan with its activation-only fields (batch, sequence, accumulation,
    checkpointing, attention, loss) set to their defaults: states do not depend on them, and
    `memdoc plan` bills hundreds of plans that differ only there.
    """
    key = plan.replace(
        micro_batch=1, seq_len=1, grad_accum=1, checkpointing=Checkpointing.NONE, attention=Attention.SDPA, loss=Loss.HF
    )
    return _model_states(model, key)


@functools.lru_cache(maxsize=1024)
def _model_states(model: ModelSpec, plan: TrainingPlan) -> ModelStates:
    param_bytes = plan.precision.param_bits // 8
    compute_bytes = plan.precision.compute_bits // 8
    largest_layer = max(l.params() + l.norm_params for _, l, _ in model.layer_groups)
    layout = engine_layout(plan)
    if plan.method is Method.FULL and layout.engine is not Engine.DDP:
        # the engine's layout (`core/engines/layout.py`): the master copy is billed with the optimizer
        # states (it is the optimizer's); the step's fp32 gradient is a step temporary (DeepSpeed)
        frozen = frozen_vision_params(model, plan)
        total = model.params.total - frozen
        states, _ = _optimizer_bytes(plan, _param_shapes(model, frozen), layout.state_bits // 8)
        return ModelStates(
            weights=model.params.total * layout.weight_bits // 8,
            gradients=total * layout.grad_bits // 8,
            optimizer=total * layout.master_bits // 8 + states,
            optimizer_step_temp=total * layout.step_grad_bits // 8,
            trainable_params=total,
            largest_layer_params=largest_layer,
        )
    if plan.method is Method.FULL:
        frozen = frozen_vision_params(model, plan)
        states, temp = _optimizer_bytes(plan, _param_shapes(model, frozen), param_bytes)
        return ModelStates(
            weights=model.params.total * param_bytes,
            gradients=(model.params.total - frozen) * param_bytes,
            optimizer=states,
            optimizer_step_temp=temp,
            trainable_params=model.params.total - frozen,
            largest_layer_params=largest_layer,
        )
    adapters, shapes = _lora_params(model, plan)
    adapter_shapes: Shapes = Counter()
    for (a, b), k in shapes.items():
        adapter_shapes[(plan.lora_rank, a)] += k
        adapter_shapes[(b, plan.lora_rank)] += k
    base_bytes = compute_bytes
    if plan.method is Method.QLORA:
        weights = qlora_weight_bytes(model, base_bytes, experts=linear_experts(plan)) + upcast_weight_bytes(model, plan)
    else:
        weights = model.params.total * base_bytes
    states, temp = _optimizer_bytes(plan, adapter_shapes, 4)
    return ModelStates(
        weights=weights + adapters * 4,
        gradients=adapters * 4,
        optimizer=states,
        optimizer_step_temp=temp,
        trainable_params=adapters,
        largest_layer_params=largest_layer,
    )
