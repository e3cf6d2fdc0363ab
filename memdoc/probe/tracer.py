"""Dry-run a training step of the real transformers model under fake tensors: no GPU, no weights.

`trace_training_step(config, plan)` builds the model from an HF config.json dict with
`AutoModelForCausalLM.from_config` inside `FakeTensorMode` on the fake **CPU** device
(`no_init_weights` + `tie_weights`), applies every knob of the `TrainingPlan`, runs one warm-up
step (so optimizer states exist) and traces the second, steady-state step — forward (with
`labels=input_ids`, so HF's fp32 logits upcast and cross-entropy are included), backward,
optimizer step — with torch's MemTracker (FSDPMemTracker for fsdp/zero3). The result is what
`torch.cuda.max_memory_allocated()` would report for that step, itemised.

How each knob is realised:

- precision: bf16/fp16/fp32 store the model in that dtype; amp-* keep fp32 weights and run the
  forward under `torch.autocast("cpu", dtype)` (CPU autocast casts the same matmul-class ops as
  CUDA's; its weight-cast cache is included). For lora/qlora the frozen base is in the compute
  dtype; peft keeps adapters in fp32 (`autocast_adapter_dtype=True`, its default).
- method: LoRA via peft (`LoraConfig(r, alpha, target_modules, lora_dropout=plan.lora_dropout)`,
  'all-linear' supported); QLoRA = LoRA + every decoder `nn.Linear` replaced by the NF4
  emulation in `memdoc.probe.emulation` (storage, double-quant constants, dequantised compute),
  its LoRA layers running peft's 4-bit forward (`lora.bnb.Linear4bit`); `kbit_upcast` then casts
  the non-quantised parameters to fp32 as peft's `prepare_model_for_kbit_training` does.
- optimizer: AdamW `foreach=True` (CUDA's default, with its parameter-sized step temporaries,
  forced even on CPU), `fused=True`, bitsandbytes 8-bit / paged 8-bit state layout (emulated),
  SGD momentum 0.9 (foreach), transformers' Adafactor (real), Lion (emulated).
- checkpointing: full = `gradient_checkpointing_enable(use_reentrant=False)` (`--checkpoint-every N`:
  then switched off on every decoder layer but 0, N, 2N, …, traced whole); selective = the
  same with torch's selective-checkpoint API (`create_selective_checkpoint_contexts`), saving
  matmul / attention outputs and recomputing everything else.
- attention: `attn_implementation` "sdpa" (fake CPU dispatches the flash-style kernel: O(s)
  saved state, like CUDA flash/mem-efficient) or "eager" (s² probabilities saved).
- images (VLMs, `--images-per-sample`): the VLM built with `AutoModelForImageTextToText`, pixel inputs and image
  tokens as the family's processor makes them (`memdoc.probe.vlm_inputs`), index tensors kept as constants
  (`memdoc.probe.fake_index`); tower and projector train, freeze or take adapters as the plan says
  (`memdoc.probe.vlm_freeze`; by default as under TRL: full trains all, LoRA goes where peft's names reach).
- packing: `--packing` feeds the rows flattened into one with position_ids restarting per document (of
  `--document-tokens`, else one per row) and flash-attention 2's varlen kernel emulated per document
  (`memdoc.probe.varlen`: what it saves, no tokens² mask).
- accumulation: `--accum N` runs N micro-batches per step (`training_step`), the gradients of the
  first kept while the others run forward and backward.
- sharding: fsdp/zero3 trace rank 0 of N with a fake process group, `fully_shard` per decoder
  layer and at the root, and FSDPMemTracker (amp uses FSDP's MixedPrecisionPolicy). zero1/zero2
  are derived from the unsharded trace: zero1 divides optimizer states and optimizer-step
  temporaries by N; zero2 also divides gradients by N (reduce buckets not counted).
- offload: optimizer offload removes optimizer states, gradients and step temporaries from the GPU
  figures (the host bytes are noted); parameter offload additionally keeps only unsharded (gathered)
  weights on the GPU.

Speed: decoder layers are identical, so by default the step is traced for short models
(2p, 3p and 4p layers, p = the period of the layer pattern, usually 1), every line item
of every phase is extrapolated linearly to the real depth, and the third trace checks that the
extrapolation is exact; otherwise (or for models whose layers differ) the full model is traced.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import math
import time
from typing import Callable

from memdoc.core.billing.measurement import Measurement
from memdoc.core.billing.vocabulary import LINE_ITEMS, STEP_PHASES
from memdoc.core.model.config_keys import config_value
from memdoc.core.model.plan import (
    Loss,
    Method,
    Offload,
    Optimizer,
    Shard,
    TrainingPlan,
)
from memdoc.core.model.vision.registry import VLMS
from memdoc.core.model.vision.vlm import is_vlm, text_config_of
from memdoc.errors import ConfigError
from memdoc.probe.build import build_model, build_optimizer, optimizer_state_bytes, torch_dtype
from memdoc.probe.memtrack_names import top_modules
from memdoc.probe.vlm_depth import trace_both_depths
from memdoc.probe.vlm_inputs import vlm_step_inputs

EXTRAPOLATION_TOLERANCE = 1e-3
"""Relative disagreement between the 3-point check and the extrapolation that forces a full trace."""

TRACED_MICRO_BATCHES = 2
"""Micro-batches of an accumulating step the tracer runs: the first allocates the gradients, the second adds into
them in place (autograd's `AccumulateGrad`), and micro-batches 3..N repeat the second's allocations exactly, so
tracing more of them only costs time."""

Progress = Callable[[str, float], None]
TraceOnce = Callable[[dict, TrainingPlan, "int | None"], "tuple[dict, dict[str, int], list[str]]"]
"""One trace at a given depth: (config, plan, layers) -> (phase -> items, module activations, notes)."""


# ---------------------------------------------------------------------------------------- layers
def layer_count(config: dict) -> int:
    """Decoder layers of an HF config dict."""
    layers = config_value(config, "num_layers")
    if isinstance(layers, int):
        return layers
    text = config.get("text_config")
    if isinstance(text, dict):
        return layer_count(text)
    raise ConfigError("config has no num_hidden_layers (or n_layer)")


MAX_TRACED_LAYERS = 512
"""Most decoder layers one trace builds (real models have < 200); repeating layers are extrapolated from
short traces at any count, others beyond this are refused rather than traced for hours."""


def _check_traceable(layers: int, why: str) -> None:
    if layers > MAX_TRACED_LAYERS:
        raise ConfigError(
            f"diagnose cannot trace {layers:,} layers ({why}; {MAX_TRACED_LAYERS} at most); "
            "memdoc bill estimates any layer count"
        )


def layer_period(config: dict) -> int | None:
    """Smallest p such that layers repeat every p layers; None when they do not repeat (trace all). A VLM's are its
    language model's (its vision tower is traced whole); Llama-3.2-Vision's cross-attention layers are traced all."""
    if is_vlm(config):
        if VLMS[config["model_type"]].cross_attention:
            return None
        config = text_config_of(config)
    n = layer_count(config)
    mlp_only = config.get("mlp_only_layers") or []
    if mlp_only and len(mlp_only) < n:
        return None
    if (config.get("first_k_dense_replace") or 0) > 0:
        return None
    for key in ("decoder_sparse_step", "moe_layer_freq"):
        step = config.get(key)
        if isinstance(step, int) and step > 1 and config.get("num_experts", config.get("n_routed_experts")):
            return step if n % step == 0 else None
    types = config.get("layer_types")
    if isinstance(types, list) and types:
        for p in range(1, len(types) + 1):
            if all(types[i] == types[i % p] for i in range(len(types))):
                return p if n % p == 0 else None
    mt = config.get("model_type", "")
    if mt in ("gemma2", "gemma3", "gemma3_text", "cohere2") and not types:
        return 2 if n % 2 == 0 else None  # alternating sliding-window / global attention
    return 1


def _plan_layers(config: dict) -> tuple[int, ...] | None:
    """Layer counts to trace for extrapolation, or None for a full trace."""
    n, p = layer_count(config), layer_period(config)
    if p is None or n < 6 * p:
        return None
    return (2 * p, 3 * p, 4 * p)


# -------------------------------------------------------------------------------------- tracing
@contextlib.contextmanager
def _fake_process_group(world_size: int):
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    owned = not dist.is_initialized()
    if owned:
        dist.init_process_group("fake", rank=0, world_size=world_size, store=FakeStore())
    elif dist.get_world_size() != world_size:
        raise RuntimeError("a process group of another size is already initialised")
    try:
        yield
    finally:
        if owned:
            dist.destroy_process_group()


def _shard_fsdp(model, plan: TrainingPlan, mesh):
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    kwargs = {"mesh": mesh}
    if plan.precision.is_amp and not plan.is_peft:
        kwargs["mp_policy"] = MixedPrecisionPolicy(
            param_dtype=torch_dtype(plan.precision.compute_dtype_name), reduce_dtype=torch.float32
        )
    for module in list(model.modules()):
        if type(module).__name__.endswith("DecoderLayer") or type(module).__name__.endswith("Block"):
            fully_shard(module, **kwargs)
    fully_shard(model, **kwargs)
    return model


def training_step(
    model, opt, ids, autocast, accum: int = 1, between: Callable[[], None] | None = None, inputs: dict | None = None
) -> None:
    """One optimizer step as HF Trainer runs it: `accum` micro-batches of forward with labels
    (HF's loss; `inputs`: the model's keyword inputs instead, e.g. a packed batch's) and backward of the
    loss / accum — gradients accumulate in place, so micro-batches
    2..accum run with the gradients resident — then the optimizer step and
    `zero_grad(set_to_none=True)`; only the loss outlives each forward. `between()` runs before
    each micro-batch after the first (the tracer resets its per-module statistics there)."""
    for i in range(accum):
        if i and between is not None:
            between()
        with autocast():
            loss = model(**(inputs or {"input_ids": ids, "labels": ids})).loss
        (loss / accum).backward()
        del loss
    opt.step()
    opt.zero_grad(set_to_none=True)


def _trace_once(config: dict, plan: TrainingPlan, layers: int | None) -> tuple[dict, dict[str, int], list[str]]:
    """Trace one steady-state step; returns (phase -> items incl. _opt_temp, module acts, notes)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from memdoc.probe.fake_index import index_fake_mode
    from memdoc.probe.memtrack import masks_as_in_eager_execution, snapshot_items

    notes: list[str] = []
    vlm = is_vlm(config)  # a VLM's forward reads index values: `probe/fake_index.py`
    fsdp = plan.shard.shards_weights
    vocab = config.get("vocab_size") or (config.get("text_config") or {}).get("vocab_size") or 32000
    pg = _fake_process_group(plan.world_size) if fsdp else contextlib.nullcontext()
    with pg:
        mesh = None
        if fsdp:
            from torch.distributed.device_mesh import init_device_mesh

            mesh = init_device_mesh("cpu", (plan.world_size,))
        with index_fake_mode() if vlm else FakeTensorMode(), masks_as_in_eager_execution():
            model = build_model(config, plan, layers, notes)
            host = getattr(model, "memdoc_host_offload", None)  # --activation-offload (`probe/offload.py`)
            if fsdp:
                model = _shard_fsdp(model, plan, mesh)
            opt = build_optimizer(model, plan)
            if vlm and plan.has_vision:  # pixel inputs as the processor makes them (`probe/vlm_inputs.py`)
                ids, inputs = vlm_step_inputs(model, config, plan, notes)
            else:
                ids, inputs = _step_inputs(plan, int(vocab), notes)
            tracker = _track_steady_step(model, opt, ids, plan, fsdp, inputs)
            state_bytes = optimizer_state_bytes(opt)
            phases = {ph: snapshot_items(snap, state_bytes) for ph, snap in tracker.phase_peaks.items()}
            modules = tracker.module_activation_bytes()
            if host is not None:
                notes.append(host.note())
            del model, opt, ids, inputs, tracker
    gc.collect()
    return phases, modules, notes


def _step_inputs(plan: TrainingPlan, vocab: int, notes: list[str]) -> tuple:
    """The token ids of one micro-batch and the model's keyword inputs (None: ids as input and labels). A packed
    plan's rows are flattened into one row with documents of `document_tokens` (`probe/varlen.py`)."""
    import torch

    if not plan.packing:
        return torch.randint(0, vocab, (plan.micro_batch, plan.seq_len)), None
    from memdoc.probe.varlen import document_bounds, packed_inputs

    bounds = document_bounds(plan.micro_batch, plan.seq_len, plan.document_tokens)
    ids = torch.randint(0, vocab, (1, plan.micro_batch * plan.seq_len))
    notes.append(
        f"packing: {plan.micro_batch} row(s) of {plan.seq_len} tokens flattened into one (TRL's padding-free "
        f"collator), {len(bounds) - 1} documents; flash-attention 2 varlen emulated per document"
    )
    return ids, packed_inputs(ids, bounds)


def _autocast_for(plan: TrainingPlan, fsdp: bool) -> Callable[[], contextlib.AbstractContextManager]:
    """The forward's autocast context: CPU autocast to the compute dtype for amp plans, else none.

    Under fsdp/zero3 a full fine-tune's amp is FSDP's MixedPrecisionPolicy instead (see `_shard_fsdp`)."""
    import torch

    amp = plan.precision.is_amp and not (fsdp and not plan.is_peft)
    if amp:
        return lambda: torch.autocast("cpu", dtype=torch_dtype(plan.precision.compute_dtype_name))
    return contextlib.nullcontext


def _track_steady_step(model, opt, ids, plan: TrainingPlan, fsdp: bool, inputs: dict | None = None):
    """Run a warm-up step (so optimizer states exist), then track the second, steady-state step.

    Returns the tracker (PhaseFSDPMemTracker for fsdp/zero3, else PhaseMemTracker) holding its phase peaks."""
    from memdoc.probe.memtrack import PhaseFSDPMemTracker, PhaseMemTracker

    trackers: list = []  # MemTracker refuses a second forward unless its module stats are reset

    def between() -> None:
        for t in trackers:
            t.reset_mod_stats()

    autocast = _autocast_for(plan, fsdp)
    accum = min(plan.grad_accum, TRACED_MICRO_BATCHES)
    step = functools.partial(training_step, model, opt, ids, autocast, accum, between, inputs)
    if fsdp:
        tracker = PhaseFSDPMemTracker(model, opt)
        trackers.append(tracker)
        tracker.track_inputs((ids,))
        with tracker:
            step()
            tracker.reset_mod_stats()
            tracker.reset_peaks()
            step()
    else:
        step()  # warm-up: optimizer states now exist
        tracker = PhaseMemTracker()
        trackers.append(tracker)
        pixels = [v for k, v in (inputs or {}).items() if k.startswith("pixel")]  # a VLM's (`probe/vlm_inputs.py`)
        tracker.track_external(model, opt, ids, *pixels)
        with tracker:
            step()
    return tracker


def _extrapolate(a: dict, b: dict, ka: int, kb: int, n: int) -> dict:
    """Per phase, per item: value(n) on the line through (ka, a) and (kb, b)."""
    out = {}
    for phase in set(a) & set(b):
        out[phase] = {k: a[phase][k] + (b[phase][k] - a[phase][k]) * (n - ka) // (kb - ka) for k in a[phase]}
    return out


def _agrees(pred: dict, actual: dict) -> bool:
    if set(pred) != set(actual):
        return False
    for phase in pred:
        tp = sum(pred[phase][k] for k in LINE_ITEMS)
        ta = sum(actual[phase][k] for k in LINE_ITEMS)
        if abs(tp - ta) > EXTRAPOLATION_TOLERANCE * max(ta, 1):
            return False
        for k in LINE_ITEMS:
            if abs(pred[phase][k] - actual[phase][k]) > EXTRAPOLATION_TOLERANCE * max(ta, 1):
                return False
    return True


def _merge_subphases(phases: dict) -> dict:
    """Parts `phase:part` of a phase, traced apart so that each part's peak grows linearly with depth (a prefill's
    transients vs a decode step's full cache), -> `phase`, at the larger part's peak."""
    out: dict = {}
    for name, items in phases.items():
        base = name.split(":")[0]
        if base not in out or sum(items[k] for k in LINE_ITEMS) > sum(out[base][k] for k in LINE_ITEMS):
            out[base] = items
    return out


def _derive_sharding_and_offload(phases: dict, plan: TrainingPlan, notes: list[str]) -> dict:
    n = plan.world_size
    out = {}
    host = 0
    for phase, items in phases.items():
        items = dict(items)
        opt_temp = items.get("_opt_temp", 0)
        if plan.shard in (Shard.ZERO1, Shard.ZERO2):
            items["optimizer"] = math.ceil(items["optimizer"] / n)
            shrunk = opt_temp - math.ceil(opt_temp / n)
            items["other"] -= shrunk
            opt_temp -= shrunk
            if plan.shard is Shard.ZERO2:
                items["gradients"] = math.ceil(items["gradients"] / n)
        if plan.offload is not Offload.NONE:
            # ZeRO-Offload: states, the step and the (reduced) gradients live on the host
            host = max(host, items["optimizer"] + items["gradients"])
            items["optimizer"] = items["gradients"] = 0
            items["other"] -= opt_temp
            opt_temp = 0
        if plan.offload is Offload.OPTIMIZER_PARAMS:
            # the sharded weights live on the host; only the gathered (unsharded) layers are on the GPU
            items["weights"] -= items.get("_sharded_weights", 0)
        items["_opt_temp"] = opt_temp
        out[phase] = items
    if plan.shard in (Shard.ZERO1, Shard.ZERO2):
        rule = "optimizer states" + (" and gradients" if plan.shard is Shard.ZERO2 else "")
        notes.append(f"{plan.shard.value}: derived from the unsharded trace: {rule} divided by {n} GPUs")
    if plan.offload is not Offload.NONE:
        notes.append(
            f"offload: optimizer states, gradients ({host} bytes per GPU) and the step moved to "
            f"host {plan.offload_to.value}"
        )
    if plan.offload is Offload.OPTIMIZER_PARAMS:
        notes.append("offload of parameters: sharded weights live off the GPU; only gathered layers count")
    return out


def trace_training_step(
    config: dict,
    plan: TrainingPlan,
    *,
    layers: int | None = None,
    progress: Progress | None = None,
    trace_once: TraceOnce | None = None,
) -> Measurement:
    """Trace one steady-state training step of the model in `config` under `plan`.

    `config` is an HF config.json dict. `layers=None` extrapolates from short traces when the decoder
    layers repeat (checked by a third trace) and traces the whole model otherwise; `layers=k` traces
    exactly a k-layer model (no extrapolation). `progress(message, fraction)` is called as work
    proceeds. `trace_once` traces one depth (default: the supervised step, `_trace_once`; the post-training
    steps pass theirs, `probe/posttrain.py`). Returns a `Measurement` in mode "traced" with per-GPU bytes.
    """
    report = progress or (lambda msg, frac: None)
    once = trace_once or _trace_once
    start = time.perf_counter()
    notes: list[str] = []
    n_layers = layer_count(config)
    ks = None if layers is not None or plan.checkpoint_every > 1 else _plan_layers(config)
    both = ks and is_vlm(config) and trace_both_depths(config, plan, ks, n_layers, once, notes)
    if ks is None:
        depth = layers if layers is not None else n_layers
        phases, acts = _trace_given_depth(config, plan, depth, report, notes, once)
    elif both:  # a VLM: its vision tower extrapolated too (`probe/vlm_depth.py`)
        phases, acts = both
    else:
        phases, acts = _trace_extrapolated(config, plan, ks, report, notes, once)
    phases = _derive_sharding_and_offload(_merge_subphases(phases), plan, notes)
    notes += _emulation_notes(plan)
    clean = {
        p: {k: int(v) for k, v in items.items() if k in LINE_ITEMS} for p, items in phases.items() if p in STEP_PHASES
    }
    report("done", 1.0)
    notes.append(f"trace took {time.perf_counter() - start:.1f} s")
    return Measurement.from_phases(clean, modules=top_modules(acts), mode="traced", notes=notes)


def _trace_given_depth(
    config: dict, plan: TrainingPlan, k: int, report: Progress, notes: list[str], once: TraceOnce = _trace_once
):
    """Trace a k-layer model (the whole model when k is the config's depth); returns (phases, module acts)."""
    n_layers = layer_count(config)
    _check_traceable(k, "its layers do not repeat, so every layer is traced")
    report(f"tracing {k} layer(s)", 0.0)
    phases, acts, more = once(config, plan, k)
    notes += more
    notes.append(f"traced all {k} layers" if k == n_layers else f"traced a {k}-layer model (config has {n_layers})")
    return phases, acts


def _trace_extrapolated(
    config: dict,
    plan: TrainingPlan,
    ks: tuple[int, ...],
    report: Progress,
    notes: list[str],
    once: TraceOnce = _trace_once,
):
    """Trace the three short models of `ks` and extrapolate linearly to the real depth when the third
    agrees with the line through the first two; otherwise trace every layer. Returns (phases, module acts)."""
    n_layers = layer_count(config)
    results = []
    for i, k in enumerate(ks):
        report(f"tracing {k} of {n_layers} layers", i / (len(ks) + 1))
        results.append(once(config, plan, k))
    (pa, _, _), (pb, acts, _), (pc, _, more) = results
    notes += more
    predicted = _extrapolate(pa, pb, ks[0], ks[1], ks[2])
    if _agrees(predicted, pc):
        notes.append(f"traced {ks[0]}, {ks[1]} and {ks[2]} layers; extrapolated linearly to {n_layers}")
        return _extrapolate(pb, pc, ks[1], ks[2], n_layers), acts
    _check_traceable(n_layers, "short traces did not extrapolate linearly, so every layer would be traced")
    report(f"layers not linear: tracing all {n_layers} layers", len(ks) / (len(ks) + 1))
    phases, acts, more = once(config, plan, n_layers)
    notes += more
    notes.append(f"traced all {n_layers} layers (short traces did not extrapolate linearly)")
    return phases, acts


def _emulation_notes(plan: TrainingPlan) -> list[str]:
    """What the trace emulates or approximates for this plan: NF4, 8-bit/Lion states, accumulation, LoRA, Liger."""
    notes = []
    if plan.method is Method.QLORA:
        notes.append("qlora: NF4 storage and dequantised compute emulated (bitsandbytes cannot run on fake tensors)")
        if plan.kbit_upcast:
            notes.append("qlora: non-quantised parameters upcast to fp32 (peft's prepare_model_for_kbit_training)")
    if plan.optimizer in (Optimizer.ADAMW_8BIT, Optimizer.PAGED_ADAMW_8BIT, Optimizer.LION):
        notes.append(f"{plan.optimizer.value}: state layout emulated (see memdoc.probe.emulation)")
    if plan.grad_accum > 1:
        notes.append(
            f"accumulation: {plan.grad_accum} micro-batches per step; the peak is a later one's, "
            f"with the accumulated gradients resident (the first {TRACED_MICRO_BATCHES} traced: the rest repeat "
            "the second)"
        )
    if plan.is_peft:
        notes.append(f"lora dropout {plan.lora_dropout:g}; adapters in fp32 (peft default)")
    if plan.loss is not Loss.HF and not plan.task.is_online and not plan.task.is_paired:
        notes.append(
            f"loss {plan.loss.value}: Liger's Triton kernels cannot run under fake tensors; traced transformers' "
            "loss and layers instead (the bill models Liger's), so measured logits exceed billed ones"
        )
    return notes


__all__ = [
    "layer_count",
    "layer_period",
    "trace_training_step",
    "training_step",
]
