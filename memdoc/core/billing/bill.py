"""The bill: itemised per-GPU memory of one steady-state training step, per phase.

A step has three phases and memory peaks in one of them:
* forward — states (+ grads of the previous step: none, `zero_grad(set_to_none=True)`),
  the saved activations of every layer, and the loss's fp32 logits transients;
* backward — its start holds every saved activation plus the fp32 gradients of the logits;
  as it proceeds, gradients appear while activations are freed (one layer's recompute and
  gradient buffers on top); its end holds every gradient;
* optimizer — weights, gradients, states and the optimizer's step temporaries.

`peak_allocated` (≈ `torch.cuda.max_memory_allocated`) is the largest phase sum. Two further
figures are documented assumptions, not measurements:
* `peak_reserved` (≈ `max_memory_reserved`) = peak_allocated × (1 + ALLOCATOR_OVERHEAD): the
  caching allocator rounds blocks up (2 MiB segments for large tensors) and fragments; the
  fsdp_qlora benchmark (references.md P7) measured reserved/allocated = 10.22/9.16 = 1.116, and
  torchtune's LoRA runs sit at 1.05–1.15; we take 1.08.
* `process_total` (≈ nvidia-smi) = peak_reserved + CUDA_CONTEXT_BYTES: the CUDA context, kernels
  and cuBLAS/cuDNN workspaces. HF's perf docs measured 1,343 MB on a V100 (CUDA 11, eager module
  loading); CUDA ≥ 11.7 loads kernels lazily, and 600–800 MiB is typical now. We take 768 MiB.

Sharding divides what it shards by the GPU count (ZeRO-1 states, ZeRO-2 + grads, ZeRO-3/FSDP
+ weights) and adds all-gather buffers (two unsharded layers: current + prefetch). Offload moves
states (and with ZeRO-3, weights) to host memory: the `host` column.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from memdoc.core.billing.activations import Activations, estimate_activations
from memdoc.core.model.gpu import GpuSpec
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.plan import Method, Offload, Shard, TrainingPlan
from memdoc.core.billing.states import ModelStates, model_states
from memdoc.units import MiB

ALLOCATOR_OVERHEAD = 0.08
"""peak_reserved / peak_allocated − 1 (see module docstring)."""
CUDA_CONTEXT_BYTES = 768 * MiB
"""CUDA context + library workspaces outside PyTorch's allocator (see module docstring)."""

PHASES = ("forward", "backward", "optimizer")
ITEMS = ("weights", "gradients", "optimizer", "activations", "other")


@dataclass(frozen=True, kw_only=True)
class PhaseBill:
    """Per-GPU bytes at the peak of one phase."""

    weights: int
    gradients: int
    optimizer: int
    activations: int
    """Tensors saved for backward (incl. logits/loss tensors kept for backward)."""
    other: int
    """Transients: fp32 logits upcast and their gradients, recompute and gradient buffers,
    optimizer-step temporaries, all-gather buffers, AMP weight copies."""

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer + self.activations + self.other

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in ITEMS} | {"total": self.total}


@dataclass(frozen=True, kw_only=True)
class Bill:
    """The itemised memory bill of one plan on one GPU type."""

    model: ModelSpec
    plan: TrainingPlan
    gpu: GpuSpec | None
    states: ModelStates
    acts: Activations
    phases: dict[str, PhaseBill]
    host: dict[str, int] = field(default_factory=dict)
    """Bytes per line item offloaded to host RAM (or NVMe, per `plan.offload_to`), per GPU."""
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def host_bytes(self) -> int:
        return sum(self.host.values())

    @property
    def peak_phase(self) -> str:
        return max(PHASES, key=lambda p: self.phases[p].total)

    @property
    def peak(self) -> PhaseBill:
        return self.phases[self.peak_phase]

    @property
    def peak_allocated(self) -> int:
        return self.peak.total

    @property
    def peak_reserved(self) -> int:
        return int(self.peak_allocated * (1 + ALLOCATOR_OVERHEAD))

    @property
    def process_total(self) -> int:
        return self.peak_reserved + CUDA_CONTEXT_BYTES

    @property
    def headroom_bytes(self) -> int | None:
        return None if self.gpu is None else self.gpu.memory_bytes - self.process_total

    @property
    def fits(self) -> bool | None:
        return None if self.gpu is None else self.headroom_bytes >= 0


def _sharded(value: int, shard: bool, world: int) -> int:
    return -(-value // world) if shard else value


def _gather_bytes(model: ModelSpec, plan: TrainingPlan, states: ModelStates) -> int:
    """Unsharded weights in flight under ZeRO-3/FSDP (0 otherwise).

    One unit is gathered while the next is prefetched (DeepSpeed's estimator counts 4 bytes ×
    largest layer: two 16-bit units). DeepSpeed gathers module by module, so the embedding and
    LM head are units of their own (with 128K+ vocabularies, the largest); FSDP2's root unit
    (embeddings, final norm, head) stays gathered for the whole step.
    """
    if not plan.shard.shards_weights:
        return 0
    bytes_per_param = plan.precision.compute_bits // 8
    if plan.shard is Shard.FSDP:
        root = (model.params.embedding + model.params.head) * bytes_per_param * (plan.world_size - 1) // plan.world_size
        return 2 * states.largest_layer_params * bytes_per_param + root
    unit = max(states.largest_layer_params, model.params.embedding, model.params.head)
    return 2 * unit * bytes_per_param


def compute_bill(model: ModelSpec, plan: TrainingPlan, gpu: GpuSpec | None = None) -> Bill:
    """The per-GPU bill of `plan` on `model` (pure arithmetic, no torch)."""
    states = model_states(model, plan)
    acts = estimate_activations(model, plan)
    world = plan.world_size
    shard = plan.shard
    weights = _sharded(states.weights, shard.shards_weights, world)
    grads = _sharded(states.gradients, shard.shards_gradients, world)
    optim = _sharded(states.optimizer, shard.shards_optimizer, world)
    step_temp = _sharded(states.optimizer_step_temp, shard.shards_optimizer, world)
    host: dict[str, int] = {}
    notes = []
    if model.family == "unknown":
        notes.append(f"no activation model for model_type {model.model_type!r}: activations estimated for a generic "
                     "decoder layer of its sizes (parameters are exact, from the meta device)")
    if plan.method is Method.QLORA and model.is_moe:
        notes.append("QLoRA leaves the routed experts 16-bit: transformers 5 stores them as fused 3-D tensors, "
                     "which bitsandbytes does not quantise")
    if plan.offload is not Offload.NONE:
        host.update(optimizer=optim, gradients=grads)
        optim = grads = step_temp = 0
        notes.append("gradients, fp32 master weights, optimizer states and the step live on the host (ZeRO-Offload); "
                     "DeepSpeed's reduce buckets on the GPU are not counted")
    if plan.offload is Offload.OPTIMIZER_PARAMS:
        host["weights"] = weights
        weights = 0
        notes.append("weights live on the host; each layer is fetched to the GPU when used (ZeRO-Infinity)")
    gather = _gather_bytes(model, plan, states)
    grad_gather = (
        2 * states.largest_layer_params * (plan.precision.param_bits // 8)
        if shard.shards_gradients and plan.method is Method.FULL
        else 0
    )
    saved = acts.layers_saved + acts.head_saved
    # Gradient accumulation: micro-batches 2..N run forward and backward with the gradients of the
    # earlier ones resident (AccumulateGrad adds into `.grad` in place). The step's peak is that of
    # a later micro-batch: the first one's phases plus every gradient (fake-tensor traces of
    # `diagnose --accum N`: Llama-3.2-1B AMP 2 × 1024 +4.60 GiB, its fp32 gradients).
    resident = grads if plan.grad_accum > 1 else 0
    forward = PhaseBill(
        weights=weights,
        gradients=resident,
        optimizer=optim,
        activations=saved,
        other=acts.loss_forward_peak + acts.weight_copies + gather,
    )
    # Backward peaks at one of three moments:
    # * its start: every saved activation plus the fp32 gradients of the logits;
    # * the first decoder layer it reaches: the layers' saved tensors, that layer's recompute
    #   (checkpointing) and gradient buffers, and the LM head's gradient (full fine-tuning);
    # * its end: every gradient but the embedding's, which arrives last: its dense vocab × hidden
    #   gradient is built, then stored (or, accumulating, added into the resident one). A tied
    #   embedding is one leaf used twice: autograd holds the head's gradient in the leaf's input
    #   buffer from the head's backward on, and sums the two before storing them — three such
    #   tensors in flight at the end (fake-tensor traces of Llama-3.2-1B, tied, and Llama-2-7B, untied).
    param_bytes = plan.precision.param_bits // 8
    head_grad = embed = 0
    if plan.method is Method.FULL:
        head_grad = _sharded(model.params.head * param_bytes, shard.shards_gradients, world)
        embed = _sharded(model.params.embedding * param_bytes, shard.shards_gradients, world)
    waiting = embed if model.tie_embeddings else 0  # the head's share of a tied leaf's gradient, in the buffer
    in_flight = 3 * embed if model.tie_embeddings else embed
    candidates = [
        PhaseBill(weights=weights, gradients=resident, optimizer=optim, activations=saved,
                  other=acts.loss_backward_peak + acts.weight_copies + gather),
        PhaseBill(weights=weights, gradients=max(head_grad, resident), optimizer=optim, activations=acts.layers_saved,
                  other=acts.layer_backward_peak + acts.weight_copies + grad_gather + gather),
        PhaseBill(weights=weights, gradients=grads if resident else max(grads - embed, 0), optimizer=optim, activations=0,
                  other=max(acts.layer_backward_peak + waiting, in_flight) + grad_gather + gather),
    ]
    if acts.partial is not None:
        # --checkpoint-every N: the highest checkpointed layer recomputes on top of the layers below
        # it, with the gradients of the layers above it (and of the head) already there
        below, recompute, above = acts.partial
        above_grads = 0
        if plan.method is Method.FULL:
            above_params = sum(model.layouts[i].params() + model.layouts[i].norm_params
                               for i in range(model.num_layers - above, model.num_layers))
            above_grads = _sharded(above_params * param_bytes, shard.shards_gradients, world)
        buffers = acts.layer_backward_peak  # no recompute at the top: the gradient buffers only
        candidates.append(PhaseBill(weights=weights, gradients=max(head_grad + above_grads, resident), optimizer=optim,
                                    activations=below, other=recompute + buffers + acts.weight_copies + grad_gather + gather))
    if resident:
        # accumulating, an untied LM head's new gradient is a tensor of its own until added into
        # the resident one, while every layer's activations are still saved (trace, Llama-2-7B)
        candidates.append(PhaseBill(weights=weights, gradients=resident, optimizer=optim, activations=acts.layers_saved,
                                    other=head_grad + acts.weight_copies + grad_gather + gather))
    backward = max(candidates, key=lambda phase: phase.total)
    optimizer = PhaseBill(weights=weights, gradients=grads, optimizer=optim, activations=0, other=step_temp)
    return Bill(
        model=model,
        plan=plan,
        gpu=gpu,
        states=states,
        acts=acts,
        phases={"forward": forward, "backward": backward, "optimizer": optimizer},
        host=host,
        notes=tuple(notes),
    )


def bill_json(bill: Bill) -> dict:
    """The documented --json shape of a bill (bytes; per_gpu at the peak phase)."""
    peak = bill.peak
    return {
        "model": {
            "id": bill.model.id,
            "params": bill.model.params.total,
            "trainable_params": bill.states.trainable_params,
        },
        "gpu": None
        if bill.gpu is None
        else {"name": bill.gpu.name, "memory_bytes": bill.gpu.memory_bytes, "count": bill.plan.world_size},
        "plan": bill.plan.to_dict(),
        "per_gpu": {
            **{k: getattr(peak, k) for k in ITEMS},
            "peak_allocated": bill.peak_allocated,
            "peak_reserved": bill.peak_reserved,
            "process_total": bill.process_total,
        },
        "phases": {name: phase.to_dict() for name, phase in bill.phases.items()},
        "host_bytes": bill.host_bytes,
        "host_bytes_per_node": bill.host_bytes * bill.plan.gpus_per_node,
        "host": {"device": bill.plan.offload_to.value, **bill.host} if bill.host else None,
        "peak_phase": bill.peak_phase,
        "fits": bill.fits,
        "headroom_bytes": bill.headroom_bytes,
        "notes": list(bill.notes),
    }
