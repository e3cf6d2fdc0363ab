"""The bill: itemised per-GPU memory of one steady-state training step, per phase.

A step has three phases and memory peaks in one of them:
* forward — states (+ grads of the previous step: none, `zero_grad(set_to_none=True)`),
  the saved activations of every layer, and the loss's fp32 logits transients;
* backward — its start holds every saved activation plus the fp32 gradients of the logits;
  as it proceeds, gradients appear while activations are freed (one layer's recompute and
  gradient buffers on top); its end holds every gradient;
* optimizer — weights, gradients, states and the optimizer's step temporaries.

`peak_allocated` (≈ `torch.cuda.max_memory_allocated`) is the largest phase sum. The
allocator-true figures come from running the run's allocation sequence (`step_events`) through a
simulation of PyTorch's caching allocator (`allocator`, `reserved`):
* `peak_reserved` (≈ `max_memory_reserved`): the simulated reserved peak on an unconstrained device,
  i.e. `peak_allocated` + `fragmentation_bytes` (the simulation's reserved − allocated peaks);
* `process_total` (≈ nvidia-smi) = peak_reserved + the process's memory outside the allocator
  (CUDA context, kernels, cuBLAS workspaces): `GpuSpec.process_overhead_bytes` where measured,
  else PROCESS_OVERHEAD_BYTES;
* `min_memory_bytes`: the smallest card that runs it (the allocator replayed at that capacity, with its
  release-and-retry before OOM); `fit`: the one fit rule (`verdict.fit_answer`) — that minimum against
  the card with its error band; `fits`: it runs at all (the minimum is within the card's memory).

Sharding divides what it shards by the GPU count (ZeRO-1 states, ZeRO-2 + grads, ZeRO-3/FSDP
+ weights) and adds all-gather buffers (two unsharded layers: current + prefetch). Offload moves
states (and with ZeRO-3, weights) to host memory: the `host` column.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import cached_property

from memdoc.core.billing.activations import Activations, estimate_activations
from memdoc.core.billing.activations.offload import OFFLOAD_NOTE
from memdoc.core.billing.bill_json import bill_json
from memdoc.core.billing.memo import memoized_bill
from memdoc.core.billing.model_notes import model_notes
from memdoc.core.billing.parallel import rank_share
from memdoc.core.billing.posttrain.phases import PostTerms, post_phases, post_terms
from memdoc.core.billing.posttrain.rows import policy_model, policy_plan
from memdoc.core.billing.reserved import MAX_SIMULATED_LAYERS, ReservedVerdict, reserved_verdict, unsimulated
from memdoc.core.billing.states import ModelStates, model_states
from memdoc.core.billing.step_events import training_events
from memdoc.core.billing.verdict import MIN_MEMORY_ERROR, Fit, FitAnswer, bounded_fit, fit_answer
from memdoc.core.billing.vision_bill import text_plan, vision_bill
from memdoc.core.billing.vocabulary import LINE_ITEMS, SCORING_AFTER_FORWARD, STEP_PHASES
from memdoc.core.engines.buffers import add_engine_buffers, step_grad_bytes
from memdoc.core.engines.host import host_items, nvme_items
from memdoc.core.engines.layout import Engine, engine_layout
from memdoc.core.model.gpu import GpuSpec
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.plan import Allocator, Method, TrainingPlan
from memdoc.core.model.plan_post import Task

PROCESS_OVERHEAD_BYTES = 804_061_184
"""A training process's device memory outside PyTorch's allocator (CUDA context, kernels, cuBLAS
workspaces), when the GPU table has no measurement of its own: NVML used − `max_memory_reserved`
on an H200 (torch 2.11, CUDA 13; gpu-measurements/h200.jsonl) was 766.8 MiB in 17 of 20 runs and
750.8 MiB in the other three (fp32 and eager-attention runs); the CUDA context alone 620.8 MiB."""


def process_overhead_bytes(gpu: GpuSpec | None) -> int:
    """The process's device memory outside the allocator: the GPU's measured figure, else PROCESS_OVERHEAD_BYTES."""
    measured = None if gpu is None else gpu.process_overhead_bytes
    return PROCESS_OVERHEAD_BYTES if measured is None else measured


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
        return {k: getattr(self, k) for k in LINE_ITEMS} | {"total": self.total}


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
    """Host RAM per GPU (rank) by item — weights, gradients, optimizer (master + states), buffers (pinned
    staging and step buffers) — as the engine holds it with offload (`core/engines/host.py`)."""
    nvme: dict[str, int] = field(default_factory=dict)
    """Bytes per GPU swapped to NVMe by item (ZeRO-3 `offload_optimizer.device: nvme`)."""
    buffers: dict[str, int] = field(default_factory=dict)
    """The engine's buffers on each GPU by name (reduce buckets, fp32 step gradient, unpartitioned small
    parameters), already inside the phases' items (`core/engines/buffers.py`)."""
    notes: tuple[str, ...] = field(default_factory=tuple)
    per_rank: Bill | None = None
    """With --cp/--tp: the bill of the plan one rank runs (`parallel.rank_share`), whose allocator this one reads."""
    policy: Bill | None = None
    """Post-training (`plan.task` not sft): the supervised bill of the policy's own step (`posttrain.rows`)."""
    post: PostTerms | None = None
    """Post-training: what the task adds to the policy's step (`posttrain.phases`)."""

    @property
    def host_bytes(self) -> int:
        """Host RAM per GPU (rank)."""
        return sum(self.host.values())

    @property
    def host_bytes_per_node(self) -> int:
        """Host RAM per node: every GPU of a node keeps its own offloaded partition there."""
        return self.host_bytes * self.plan.gpus_per_node

    @property
    def engine(self) -> str:
        """The engine that runs the plan (`core/engines/layout.py` `Engine`)."""
        return engine_layout(self.plan).engine.value

    @property
    def phase_names(self) -> tuple[str, ...]:
        """The plan's phases in step order (`STEP_PHASES`; DPO/KTO: `SCORING_AFTER_FORWARD`)."""
        after = self.post is not None and self.post.scoring_after_forward
        return tuple(p for p in (SCORING_AFTER_FORWARD if after else STEP_PHASES) if p in self.phases)

    @property
    def peak_phase(self) -> str:
        return max(self.phase_names, key=lambda p: self.phases[p].total)

    @property
    def peak(self) -> PhaseBill:
        return self.phases[self.peak_phase]

    @property
    def peak_allocated(self) -> int:
        return self.peak.total

    @cached_property
    def allocator(self) -> ReservedVerdict:
        """The simulated caching allocator over this plan's run (see `reserved`)."""
        expandable = self.plan.allocator is Allocator.EXPANDABLE
        if self.per_rank is not None:  # the CP buffers on top count in `min_memory_bytes`, not in the simulation
            return self.per_rank.allocator
        if self.policy is not None and self.policy.per_rank is not None:
            return self.policy.allocator  # post-training under CP/TP: the rank's policy step only
        if self.model.num_layers > MAX_SIMULATED_LAYERS:
            return unsimulated(self.peak_allocated, expandable=expandable)
        if self.policy is not None:  # post-training: the policy's run with the task's tensors (`step_events`)
            return reserved_verdict(training_events(self.policy, self.post), expandable=expandable)
        return reserved_verdict(training_events(self), expandable=expandable)

    @property
    def fragmentation_bytes(self) -> int:
        return self.allocator.fragmentation_bytes

    @property
    def peak_reserved(self) -> int:
        return self.peak_allocated + self.fragmentation_bytes

    @property
    def overhead_bytes(self) -> int:
        """Device memory of the process outside the allocator (see PROCESS_OVERHEAD_BYTES)."""
        return process_overhead_bytes(self.gpu)

    @property
    def process_total(self) -> int:
        return self.peak_reserved + self.overhead_bytes

    @property
    def headroom_bytes(self) -> int | None:
        return None if self.gpu is None else self.gpu.memory_bytes - self.process_total

    @cached_property
    def fits(self) -> bool | None:
        """Runs at all per the one fit rule: the minimum memory is within the card's (`fit`, `FitAnswer.fits`);
        a step can run with a process total over the card because the allocator releases its cache and
        retries before an OOM. Decided from the minimum's bounds when they agree (`bounded_fit`)."""
        return None if self.gpu is None else self._fit_class[1]

    @property
    def comfortable(self) -> bool | None:
        """Fits with more headroom than the minimum memory's error band (`Fit.COMFORTABLE`). Either bound
        alone can settle it (peak allocated + overhead ≤ the minimum ≤ the process total), so a search
        asking only this skips the minimum's bisection more often than `fit_kind` can."""
        if self.gpu is None:
            return None
        cap = self.gpu.memory_bytes
        if not fit_answer(self.peak_allocated + self.overhead_bytes, cap).comfortable:
            return False
        return fit_answer(self.process_total, cap).comfortable or self._fit_class[0] is Fit.COMFORTABLE

    @property
    def fit_kind(self) -> Fit | None:
        """Comfortable, close call or does not fit (`fit.fit`, from the minimum's bounds when they decide it)."""
        return None if self.gpu is None else self._fit_class[0]

    @cached_property
    def _fit_class(self) -> tuple[Fit, bool]:
        """(fit, fits) of the one rule, without the minimum's bisection when its bounds decide it: the minimum
        lies between peak allocated + overhead and the process total (`min_memory_bytes`)."""
        assert self.gpu is not None
        cap, low = self.gpu.memory_bytes, self.peak_allocated + self.overhead_bytes
        if fit_answer(low, cap).fit is Fit.NO:  # the tensors alone are over by more than the band: no simulation
            return Fit.NO, False
        bounded = bounded_fit(low, self.process_total, cap)
        return bounded if bounded is not None else (self.fit.fit, self.fit.fits)

    @cached_property
    def fit(self) -> FitAnswer | None:
        """The one fit rule (`verdict.fit_answer`): the minimum memory against the card, with its error band."""
        return None if self.gpu is None else fit_answer(self.min_memory_bytes, self.gpu.memory_bytes)

    @cached_property
    def min_memory_bytes(self) -> int:
        """The smallest device memory (torch-visible) on which the run completes: to 0.5%, or to half the
        minimum's error band (`MIN_MEMORY_ERROR` / 2, 5%) when the tensors alone are over the card by more than
        the band: the answer is "does not fit" whatever the minimum, which is then only reported ("smallest GPU
        that runs it"), inside its own ±10%."""
        far = (
            self.gpu is not None
            and fit_answer(self.peak_allocated + self.overhead_bytes, self.gpu.memory_bytes).fit is Fit.NO
        )
        return (
            self.allocator.min_memory_bytes(round(2 / MIN_MEMORY_ERROR) if far else 200)
            + self.overhead_bytes
            + (self.peak_allocated - self.allocator.peak_allocated)
        )


def _sharded(value: int, shard: bool, world: int) -> int:
    return -(-value // world) if shard else value


def _gather_bytes(model: ModelSpec, plan: TrainingPlan, states: ModelStates) -> int:
    """Unsharded weights in flight under ZeRO-3/FSDP (0 otherwise), in the engine's gather dtype.

    One unit is gathered while the next is prefetched (DeepSpeed's estimator counts 4 bytes ×
    largest layer: two 16-bit units). DeepSpeed gathers module by module, so the embedding and
    LM head are units of their own (with 128K+ vocabularies, the largest); FSDP2's root unit
    (embeddings, final norm, head) stays gathered for the whole step.
    """
    layout = engine_layout(plan)
    if not layout.shards_weights:
        return 0
    bytes_per_param = layout.gather_bits // 8
    if layout.engine.is_fsdp:
        root = (model.params.embedding + model.params.head) * bytes_per_param * (plan.world_size - 1) // plan.world_size
        return 2 * states.largest_layer_params * bytes_per_param + root
    unit = max(states.largest_layer_params, model.params.embedding, model.params.head)
    return 2 * unit * bytes_per_param


@dataclass(frozen=True, kw_only=True)
class _StepTerms:
    """The per-GPU terms every phase of the step shares: model states after sharding and offload,
    the gradients resident while accumulating, and the all-gather buffers."""

    weights: int
    gradients: int
    optimizer: int
    step_temp: int
    """The optimizer step's temporaries."""
    resident: int
    """Gradients held across micro-batches (gradient accumulation), else 0."""
    gather: int
    """Unsharded weights in flight (`_gather_bytes`)."""
    grad_gather: int
    """Unsharded gradients of two layers in flight before their reduce-scatter (ZeRO-2/3, full fine-tuning)."""
    buckets: int = 0
    """DeepSpeed's gradient-reduction buckets (`engines.buffers.reduce_buckets`): backward and the step."""

    def phase(self, *, gradients: int, activations: int, other: int) -> PhaseBill:
        """A phase with this step's weights and optimizer states."""
        return PhaseBill(
            weights=self.weights, gradients=gradients, optimizer=self.optimizer, activations=activations, other=other
        )


def _step_terms(
    model: ModelSpec, plan: TrainingPlan, states: ModelStates, bill: dict[str, dict[str, int]], notes: list[str]
) -> _StepTerms:
    """Shard the model states over the GPUs as the plan's engine does (`core/engines/layout.py`), move the
    offloaded ones to the host (`bill["host"]`, `bill["nvme"]`, saying so in `notes`), add the engine's buffers
    (`bill["buffers"]`) and the gathered weights and gradients in flight."""
    layout, world = engine_layout(plan), plan.world_size
    weights = _sharded(states.weights, layout.shards_weights, world)
    grads = _sharded(states.gradients, layout.shards_gradients, world)
    optim = _sharded(states.optimizer, layout.shards_optimizer, world)
    step_temp = _sharded(states.optimizer_step_temp, layout.shards_optimizer, world)
    buffers = bill["buffers"]
    if plan.method is Method.FULL and layout.engine is not Engine.DDP:
        partition = _sharded(states.trainable_params, True, world)
        step_temp = step_grad_bytes(plan, layout, partition)
        if step_temp:
            buffers["fp32 step gradient"] = step_temp
        if layout.offload_optimizer:
            plain = _sharded(states.optimizer - states.trainable_params * layout.master_bits // 8, True, world)
            bill["host"].update(host_items(plan, layout, partition, plain))
            bill["nvme"].update(nvme_items(plan, layout, partition, plain))
    elif layout.offload_optimizer:  # LoRA/QLoRA: the adapters' states and gradients, as the optimizer holds them
        bill["host"].update(optimizer=optim, gradients=grads)
    persistent, buckets = add_engine_buffers(model, plan, layout, bill["buffers"], bill["host"])
    if layout.offload_optimizer:
        optim = grads = step_temp = 0
        notes.append(
            "gradients, master weights, optimizer states and the step live on the host (ZeRO-Offload); "
            "the reduce buckets stay on the GPU"
        )
    if layout.offload_params:
        if plan.method is not Method.FULL:  # full fine-tuning: in `host_items`
            bill["host"]["weights"] = weights
        weights = 0
        notes.append("weights live on the host; each layer is fetched to the GPU when used (ZeRO-Infinity)")
    grad_gather = 2 * states.largest_layer_params * layout.reduce_bits // 8 if layout.shards_gradients else 0
    # Gradient accumulation: micro-batches 2..N run forward and backward with the gradients of the
    # earlier ones resident (AccumulateGrad adds into `.grad` in place). The step's peak is that of
    # a later micro-batch: the first one's phases plus every gradient (fake-tensor traces of
    # `diagnose --accum N`: Llama-3.2-1B AMP 2 × 1024 +4.60 GiB, its fp32 gradients).
    return _StepTerms(
        weights=weights + persistent,
        gradients=grads,
        optimizer=optim,
        step_temp=step_temp,
        # ZeRO-3's 16-bit gradient partitions are one buffer allocated in __init__ (stage3.py
        # `grad_partitions_flat_buffer`): resident through the whole step, like accumulated gradients
        resident=grads if plan.grad_accum > 1 or layout.engine is Engine.ZERO3 else 0,
        gather=_gather_bytes(model, plan, states),
        grad_gather=grad_gather if plan.method is Method.FULL else 0,
        buckets=buckets,
    )


def _head_and_embedding_gradients(model: ModelSpec, plan: TrainingPlan) -> tuple[int, int]:
    """Per-GPU bytes of the LM head's and the embedding's gradients (0, 0 unless full fine-tuning)."""
    if plan.method is not Method.FULL:
        return 0, 0
    layout, world = engine_layout(plan), plan.world_size  # what the engine shards, in its gradient dtype
    param_bytes, shards = layout.grad_bits // 8, layout.shards_gradients
    return (
        _sharded(model.params.head * param_bytes, shards, world),
        _sharded(model.params.embedding * param_bytes, shards, world),
    )


def _backward_candidates(model: ModelSpec, plan: TrainingPlan, acts: Activations, t: _StepTerms) -> list[PhaseBill]:
    """The moments backward may peak at; the phase bill is the largest (the first of equals).

    Backward peaks at one of three moments:
    * its start: every saved activation plus the fp32 gradients of the logits;
    * the first decoder layer it reaches: the layers' saved tensors, that layer's recompute
      (checkpointing) and gradient buffers, and the LM head's gradient (full fine-tuning);
    * its end: every gradient but the embedding's, which arrives last: its dense vocab × hidden
      gradient is built, then stored (or, accumulating, added into the resident one). A tied
      embedding is one leaf used twice: autograd holds the head's gradient in the leaf's input
      buffer from the head's backward on, and sums the two before storing them — three such
      tensors in flight at the end (fake-tensor traces of Llama-3.2-1B, tied, and Llama-2-7B, untied).
    Partial checkpointing and gradient accumulation add a moment each.
    """
    head_grad, embed = _head_and_embedding_gradients(model, plan)
    waiting = embed if model.tie_embeddings else 0  # the head's share of a tied leaf's gradient, in the buffer
    in_flight = 3 * embed if model.tie_embeddings else embed
    copies, gathers = acts.weight_copies, t.grad_gather + t.gather
    candidates = [
        t.phase(
            gradients=t.resident,
            activations=acts.layers_saved + acts.head_saved,
            other=acts.loss_backward_peak + copies + t.gather,
        ),
        t.phase(
            gradients=max(head_grad, t.resident),
            activations=acts.layers_saved,
            other=acts.layer_backward_peak + copies + gathers,
        ),
        t.phase(
            gradients=t.gradients if t.resident else max(t.gradients - embed, 0),
            activations=0,
            other=max(acts.layer_backward_peak + waiting, in_flight) + gathers,
        ),
    ]
    if acts.partial is not None:
        candidates.append(_partial_checkpointing_phase(model, plan, acts, t, head_grad))
    if t.resident:
        # accumulating, an untied LM head's new gradient is a tensor of its own until added into
        # the resident one, while every layer's activations are still saved (trace, Llama-2-7B)
        candidates.append(
            t.phase(gradients=t.resident, activations=acts.layers_saved, other=head_grad + copies + gathers)
        )
    return candidates


def _partial_checkpointing_phase(
    model: ModelSpec, plan: TrainingPlan, acts: Activations, t: _StepTerms, head_grad: int
) -> PhaseBill:
    """--checkpoint-every N: the highest checkpointed layer recomputes on top of the layers below
    it, with the gradients of the layers above it (and of the head) already there."""
    below, recompute, above = acts.partial
    above_grads = 0
    if plan.method is Method.FULL:
        above_params = sum(
            model.layouts[i].params() + model.layouts[i].norm_params
            for i in range(model.num_layers - above, model.num_layers)
        )
        layout = engine_layout(plan)
        above_grads = _sharded(above_params * layout.grad_bits // 8, layout.shards_gradients, plan.world_size)
    buffers = acts.layer_backward_peak  # no recompute at the top: the gradient buffers only
    return t.phase(
        gradients=max(head_grad + above_grads, t.resident),
        activations=below,
        other=recompute + buffers + acts.weight_copies + t.grad_gather + t.gather,
    )


@memoized_bill
def compute_bill(model: ModelSpec, plan: TrainingPlan, gpu: GpuSpec | None = None) -> Bill:
    """The per-GPU bill of `plan` on `model` (pure arithmetic, no torch)."""
    if plan.task is not Task.SFT:
        return _post_training_bill(model, plan, gpu)
    if model.vision is not None and plan.has_vision:  # the language model at text + image tokens, plus the tower
        return vision_bill(model, plan, compute_bill(model, text_plan(model, plan), gpu))
    if plan.cp > 1 or plan.tp > 1:
        return _parallel_bill(model, plan, gpu)
    states = model_states(model, plan)
    acts = estimate_activations(model, plan)
    notes = model_notes(model, plan, gpu)
    places: dict[str, dict[str, int]] = {"host": {}, "nvme": {}, "buffers": {}}
    t = _step_terms(model, plan, states, places, notes)
    layout = engine_layout(plan)
    if layout.risk:
        notes.append(layout.risk)
    if acts.offloaded:  # --activation-offload (`activations/offload.py`)
        places["host"]["activations"] = acts.offloaded
        notes.append(OFFLOAD_NOTE)
    # ZeRO-3 allocates its bucket in __init__ (resident); ZeRO-1/2 in each backward (`setup_buckets`)
    resident_buckets = t.buckets if layout.engine is Engine.ZERO3 else 0
    forward = t.phase(
        gradients=t.resident,
        activations=acts.layers_saved + acts.head_saved,
        other=acts.loss_forward_peak + acts.weight_copies + t.gather + resident_buckets,
    )
    backward = max(_backward_candidates(model, plan, acts, t), key=lambda phase: phase.total)
    backward = dataclasses.replace(backward, other=backward.other + t.buckets)
    # ZeRO-1/2 release their buckets at the end of backward (`_release_ipg_buffers`); ZeRO-3 keeps its own
    optimizer = t.phase(gradients=t.gradients, activations=0, other=t.step_temp + resident_buckets)
    return Bill(
        model=model,
        plan=plan,
        gpu=gpu,
        states=states,
        acts=acts,
        phases={"forward": forward, "backward": backward, "optimizer": optimizer},
        host=places["host"],
        nvme=places["nvme"],
        buffers=places["buffers"],
        notes=tuple(notes),
    )


def _post_training_bill(model: ModelSpec, plan: TrainingPlan, gpu: GpuSpec | None) -> Bill:
    """A post-training plan: its policy's supervised step (`posttrain.rows.policy_plan`) plus the task's
    generation, reference forward and resident models, phase by phase (`posttrain.phases`)."""
    policy = compute_bill(policy_model(model, plan), policy_plan(plan), gpu)
    items = {name: phase.to_dict() for name, phase in policy.phases.items()}
    terms = post_terms(model, plan, gpu, items["optimizer"], policy.acts.loss_forward_peak)
    phases = {name: PhaseBill(**{k: v[k] for k in LINE_ITEMS}) for name, v in post_phases(items, terms).items()}
    return dataclasses.replace(
        policy, plan=plan, phases=phases, notes=policy.notes + terms.notes, per_rank=None, policy=policy, post=terms
    )


def _parallel_bill(model: ModelSpec, plan: TrainingPlan, gpu: GpuSpec | None) -> Bill:
    """A CP/TP plan: the bill of the plan one rank runs, plus its CP buffers and replicated kv heads
    (`core/billing/parallel.py`)."""
    share = rank_share(model, plan)
    rank = compute_bill(share.model, share.plan, gpu)
    extra = {"forward": share.forward_buffers, "backward": share.backward_buffers, "optimizer": 0}
    phases = {
        name: dataclasses.replace(
            phase,
            other=phase.other + extra[name],
            activations=phase.activations + (share.extra_saved if name != "optimizer" else 0),
        )
        for name, phase in rank.phases.items()
    }
    buffers = dict(rank.buffers) | ({"cp buffers (one layer)": share.backward_buffers} if plan.cp > 1 else {})
    notes = rank.notes + share.notes
    return dataclasses.replace(rank, model=model, plan=plan, phases=phases, buffers=buffers, notes=notes, per_rank=rank)


__all__ = ["PROCESS_OVERHEAD_BYTES", "Bill", "PhaseBill", "bill_json", "compute_bill", "process_overhead_bytes"]
