"""Dry-run one post-training step of TRL 1.16 under fake tensors: DPO (`DPOTrainer`), GRPO and RLOO.

The model is built as for a supervised trace (`probe.build.build_model`) and gets TRL's fused LM head exactly as the
trainers add it (`trl.trainer.utils.add_fused_lm_head`, in `DPOTrainer.__init__` / `GRPOTrainer.__init__`), so
tokens are scored the way TRL scores them: `model(..., labels=labels, fused_lm_head=True)`, chunked log-probs,
never the full logits. A warm-up step runs first (the optimizer states then exist), then the steady-state step is
traced with memdoc's MemTracker (`probe/memtrack.py`), its phases in TRL's order:

- DPO (`DPOTrainer._compute_loss`): the policy's forward on the chosen and rejected rows concatenated (2 ×
  micro-batch rows), then — its activations still alive — the reference's forward under `torch.no_grad()`
  (phase `reference`): a second, frozen model in the compute dtype for full fine-tuning (`ref_model`, created in
  `__init__` with the policy's dtype), the same model inside `use_adapter(model, None)` (`model.disable_adapter()`)
  with a PEFT adapter, none with `precompute_ref_log_probs`; then the sigmoid loss, backward and the optimizer.
- GRPO/RLOO (`GRPOTrainer._generate_and_score_completions`, `_compute_loss`): generation (phase `generation`,
  `probe/generation_trace.py`), then under `torch.no_grad()` the old policy's log-probs when `num_iterations` > 1
  and the reference's when `beta` ≠ 0 (phase `reference`, `_get_per_token_logps_and_entropies` in chunks of the
  per-device batch over the whole generation batch), then per micro-batch the policy's forward (log-probs and
  entropy of the completion tokens) and backward, then the optimizer.

Rows are full length with no padding (no attention mask), like the supervised trace; DPO scores every position of a
row (the plan does not split prompt from completion; TRL scores the completion only: an upper bound of the head's
few per-token vectors). On the GPU TRL folds the vocabulary tiles in Triton kernels that allocate nothing and
accumulates the head's gradients in fp32 with `addmm(out_dtype=float32)`; the CPU path of fake tensors would make
tile-sized temporaries instead, so `gpu_tile_folds` stands the Triton path in (no allocation, which is exact).
The CPU path scores every row position (`compact` is the Triton branch), GRPO's prompt positions included: its
per-token vectors and fp32 gradient accumulator cover prompt + completion (the GPU: the completion only).
"""

from __future__ import annotations

import contextlib
from typing import Callable

from memdoc.core.billing.measurement import Measurement
from memdoc.core.billing.posttrain.reference import old_policy_runs, reference_runs, steps_per_generation
from memdoc.core.model.plan import Checkpointing, Method, Precision, TrainingPlan
from memdoc.core.model.plan_post import Task, Vllm
from memdoc.errors import ConfigError
from memdoc.probe.build import build_model, build_optimizer, optimizer_state_bytes, torch_dtype
from memdoc.probe.generation_trace import generation_shape, trace_generation
from memdoc.probe.tracer import Progress, layer_count, trace_training_step

TRACED_TASKS = (Task.DPO, Task.GRPO, Task.RLOO)
"""The tasks `diagnose MODEL` traces (the others are billed only)."""
POLICY_OUTPUTS = {
    Task.DPO: ("log_probs", "entropy", "mean_logits", "is_top1"),
    Task.GRPO: ("log_probs", "entropy"),
    Task.RLOO: ("log_probs", "entropy"),
}
"""The fused head's outputs each trainer asks for in `__init__` (`add_fused_lm_head(..., outputs=...)`)."""


def check_traceable(plan: TrainingPlan) -> None:
    """Refuse, in one line, a post-training plan this tracer does not trace."""
    if plan.task not in TRACED_TASKS:
        names = ", ".join(t.value for t in TRACED_TASKS)
        raise ConfigError(f"diagnose traces --task {names} (and sft); --task {plan.task.value} is billed only")
    if plan.shard.shards_weights or plan.packing:
        raise ConfigError(f"diagnose --task {plan.task.value} traces unsharded, unpacked rows (no fsdp/zero3, packing)")
    if plan.vllm is not Vllm.NONE:
        raise ConfigError("diagnose traces transformers' generate; vLLM cannot run on fake tensors (--vllm none)")


def trace_posttrain_step(
    config: dict, plan: TrainingPlan, *, layers: int | None = None, progress: Progress | None = None
) -> Measurement:
    """Trace one steady-state post-training step of `config` under `plan` (see the module docstring), with the
    supervised tracer's depth handling (short traces extrapolated to the real depth, `tracer.trace_training_step`).
    Returns a `Measurement` whose phases include `generation` and `reference` where the step has them."""
    check_traceable(plan)
    return trace_training_step(config, plan, layers=layers, progress=progress, trace_once=trace_posttrain_once)


class _Hooks:
    """What the traced step tells its tracker (nothing during the warm-up, `tracker` None)."""

    def __init__(self, tracker=None) -> None:
        self.tracker = tracker
        self.acts: dict[str, int] = {}
        self.kv_bytes = 0

    def phase(self, name: str):
        return self.tracker.phase(name) if self.tracker is not None else contextlib.nullcontext()

    def reset(self) -> None:
        """Before each forward after the first: MemTracker refuses a second forward of a module otherwise."""
        if self.tracker is not None:
            self.tracker.reset_all_mod_stats()

    def forget_roots(self) -> None:
        """Before a second forward while a backward is pending (DPO's reference): forget the root modules only, so
        the pending backward still finds every module's statistics (MemTracker refuses a root's second forward)."""
        if self.tracker is not None:
            stats = self.tracker.memory_tracking
            for module in [m for m, s in stats.items() if "." not in s.mod_fqn]:
                del stats[module]

    def keep_acts(self) -> None:
        """After the policy's forward: the activations each module left alive."""
        if self.tracker is not None:
            self.acts = self.tracker.module_activation_bytes()


@contextlib.contextmanager
def gpu_tile_folds():
    """TRL's chunked log-prob head as on the GPU: the Triton folds of a vocabulary tile (`_forward_kernel`,
    `_backward_kernel` in trl/kernels/chunked_logprob.py) work in place and allocate nothing, and
    `_addmm_fp32` accumulates into its fp32 buffer with `out_dtype` (no fp32 copies of the tile); the torch
    fallbacks the CPU runs would add tile-sized temporaries. Values do not exist under fake tensors, so the
    stand-ins do nothing."""
    from trl.kernels import chunked_logprob as kernels

    names = ("_forward_tile", "_backward_tile", "_addmm_fp32")
    saved = {name: getattr(kernels, name) for name in names}
    for name in names:
        setattr(kernels, name, lambda *args, **kwargs: None)
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(kernels, name, fn)


def _autocast(plan: TrainingPlan) -> Callable[[], contextlib.AbstractContextManager]:
    import torch

    if plan.precision.is_amp:
        return lambda: torch.autocast("cpu", dtype=torch_dtype(plan.precision.compute_dtype_name))
    return contextlib.nullcontext


def _reference_model(config: dict, plan: TrainingPlan, layers: int | None):
    """The frozen reference of a full fine-tune (None with an adapter: the base with the adapter disabled, or when
    the step runs none): the policy's architecture in the compute dtype, with TRL's fused head (`log_probs` only)."""
    from trl.trainer.utils import add_fused_lm_head

    if plan.is_peft or not reference_runs(plan):
        return None
    pure = {"bfloat16": Precision.BF16, "float16": Precision.FP16}.get(plan.precision.compute_dtype_name)
    ref_plan = plan.replace(
        method=Method.FULL, precision=pure or Precision.FP32, checkpointing=Checkpointing.NONE, checkpoint_every=1
    )
    ref = build_model(config, ref_plan, layers).eval()
    ref.requires_grad_(False)
    add_fused_lm_head(ref)
    return ref


def _score(model, ids, keep: int):
    """TRL's scoring call: labels on the last `keep` positions (all with `keep` 0), `fused_lm_head=True`."""
    labels = ids.clone()
    if keep:
        labels[:, :-keep] = -100
    return model(input_ids=ids, labels=labels, fused_lm_head=True, use_cache=False)


def _reference_logps(model, ref, ids, keep: int, autocast):
    """Per-token log-probs of the reference under `no_grad`: `ref`, else `model` with its adapter disabled
    (`trl.trainer.utils.use_adapter(model, None)`)."""
    import torch
    from trl.trainer.utils import use_adapter

    with torch.no_grad(), autocast():
        if ref is not None:
            return _score(ref, ids, keep).log_probs
        with use_adapter(model, adapter_name=None):
            return _score(model, ids, keep).log_probs


def _dpo_step(model, ref, opt, plan: TrainingPlan, vocab: int, hooks: _Hooks) -> None:
    """One optimizer step of `DPOTrainer`: per micro-batch the concatenated policy forward, the reference forward
    (its log-probs summed per row), the sigmoid loss of `beta` × the log-ratio margin, backward; then the step."""
    import torch
    import torch.nn.functional as F

    autocast, beta = _autocast(plan), plan.effective_beta or 0.1
    for _ in range(plan.grad_accum):
        ids = torch.randint(0, vocab, (2 * plan.micro_batch, plan.seq_len))  # [chosen; rejected]
        hooks.reset()
        with autocast():
            out = _score(model, ids, 0)
        hooks.keep_acts()
        logps = out.log_probs.sum(dim=1)
        ref_logps = torch.zeros_like(logps)  # precomputed: read from the dataset
        if reference_runs(plan):
            if ref is None:  # the policy's own modules run again (adapter disabled)
                hooks.forget_roots()
            with hooks.phase("reference"):
                ref_logps = _reference_logps(model, ref, ids, 0, autocast).sum(dim=1)
        chosen, rejected = (logps - ref_logps).chunk(2, dim=0)
        loss = -F.logsigmoid(beta * (chosen - rejected)).mean()
        (loss / plan.grad_accum).backward()
        del out, logps, ref_logps, chosen, rejected, loss, ids
    opt.step()
    opt.zero_grad(set_to_none=True)


@contextlib.contextmanager
def _no_input_grads(model):
    """The no-grad scoring passes without the hooks that make the embedding's output require grad
    (`PreTrainedModel.enable_input_require_grads`'s `make_inputs_require_grads`, set for checkpointed adapters, once
    per `gradient_checkpointing_enable`): under `no_grad` they change no tensor a real run keeps, but torch's
    MemTracker would hold every chunk's hidden states for a backward that never comes (a trace-only retention of
    rows × seq × hidden per chunk)."""
    hooks = model.get_input_embeddings()._forward_hooks
    saved = {k: h for k, h in hooks.items() if getattr(h, "__name__", "") == "make_inputs_require_grads"}
    for key in saved:
        del hooks[key]
    try:
        yield
    finally:
        hooks.update(saved)


def _no_grad_logps(model, ref, ids, keep: int, plan: TrainingPlan, hooks: _Hooks):
    """`_get_per_token_logps_and_entropies` under `no_grad` over the generation batch in chunks of the per-device
    batch: of the policy itself (`ref` is the policy: old log-probs) or of the reference."""
    import torch

    autocast, parts = _autocast(plan), []
    with _no_input_grads(model):
        for rows in ids.split(plan.micro_batch):
            hooks.reset()
            if ref is model:
                with torch.no_grad(), autocast():
                    parts.append(_score(model, rows, keep).log_probs[:, -keep:])
            else:
                parts.append(_reference_logps(model, ref, rows, keep, autocast)[:, -keep:])
    return torch.cat(parts)


def _online_step(model, ref, opt, plan: TrainingPlan, vocab: int, hooks: _Hooks) -> None:
    """One optimizer step of `GRPOTrainer`/`RLOOTrainer` that generates: generation, the old and reference
    log-probs, then per micro-batch the policy's forward and backward on prompt + completion rows, then the step."""
    import torch

    shape = generation_shape(plan)
    keep = shape.completion
    hooks.reset()
    hooks.kv_bytes = trace_generation(model, shape, vocab, hooks.reset, hooks.phase)
    with hooks.phase("generation"):
        ids = torch.randint(0, vocab, (shape.rows, shape.prompt + shape.completion))
    old = ref_lp = None
    with hooks.phase("reference"):
        if old_policy_runs(plan):  # TRL's rule (`core/billing/posttrain/reference.py`)
            old = _no_grad_logps(model, model, ids, keep, plan, hooks)
        if reference_runs(plan):
            ref_lp = _no_grad_logps(model, ref, ids, keep, plan, hooks)
    autocast = _autocast(plan)
    for i in range(plan.grad_accum):
        rows = slice(i * plan.micro_batch, (i + 1) * plan.micro_batch)
        hooks.reset()
        with autocast():
            out = _score(model, ids[rows], keep)
        hooks.keep_acts()
        loss = _online_loss(out.log_probs[:, -keep:], old, ref_lp, rows, plan.effective_beta or 0.0)
        (loss / plan.grad_accum).backward()
        del out, loss
    opt.step()
    opt.zero_grad(set_to_none=True)


def _online_loss(logps, old, ref, rows: slice, beta: float):
    """GRPO's clipped token loss (`GRPOTrainer._compute_loss`): the ratio to the old policy (itself, detached, when
    there is no old pass), clipped at 0.2, times the advantage, plus `beta` × the k3 KL to the reference."""
    import torch

    old = logps.detach() if old is None else old[rows]
    advantages = torch.ones(logps.shape[0], 1)
    ratio = torch.exp(logps - old)
    per_token = -torch.min(ratio * advantages, torch.clamp(ratio, 0.8, 1.2) * advantages)
    if beta and ref is not None:
        delta = ref[rows] - logps
        per_token = per_token + beta * (torch.exp(delta) - delta - 1)
    return per_token.mean()


def trace_posttrain_once(config: dict, plan: TrainingPlan, layers: int | None) -> tuple[dict, dict[str, int], list]:
    """Trace one post-training step at `layers` decoder layers: (phase -> items, module activations, notes)."""
    import gc

    from torch._subclasses.fake_tensor import FakeTensorMode
    from trl.trainer.utils import add_fused_lm_head

    from memdoc.probe.memtrack import PhaseMemTracker, masks_as_in_eager_execution, snapshot_items

    notes: list[str] = []
    vocab = int(config.get("vocab_size") or (config.get("text_config") or {}).get("vocab_size") or 32000)
    step = _dpo_step if plan.task is Task.DPO else _online_step
    with FakeTensorMode(), masks_as_in_eager_execution(), gpu_tile_folds():
        model = build_model(config, plan, layers, notes)
        add_fused_lm_head(model.get_base_model() if plan.is_peft else model, outputs=POLICY_OUTPUTS[plan.task])
        ref = _reference_model(config, plan, layers)
        opt = build_optimizer(model, plan)
        step(model, ref, opt, plan, vocab, _Hooks())  # warm-up: optimizer states now exist
        tracker = PhaseMemTracker()
        tracker.track_external(model, opt, *([ref] if ref is not None else []))
        hooks = _Hooks(tracker)
        with tracker:
            step(model, ref, opt, plan, vocab, hooks)
        phases = {ph: snapshot_items(snap, optimizer_state_bytes(opt)) for ph, snap in tracker.phase_peaks.items()}
        notes += _notes(plan, hooks, ref, (layers or layer_count(config), layer_count(config)))
        acts = hooks.acts
        del model, ref, opt, tracker, hooks
    gc.collect()
    return phases, acts, notes


def _notes(plan: TrainingPlan, hooks: _Hooks, ref, depth: tuple[int, int]) -> list[str]:
    """What this trace ran, in words; `depth` is (traced layers, the model's layers): the KV cache is given at the
    model's depth (bytes per traced layer × layers)."""
    notes = [f"task {plan.task.value}: TRL 1.16's fused LM head (chunked log-probs; Triton tile folds stood in)"]
    if plan.task is Task.DPO:
        notes.append(f"dpo: chosen + rejected concatenated: {2 * plan.micro_batch} rows of {plan.seq_len} tokens")
    else:
        shape, (traced, layers) = generation_shape(plan), depth
        notes.append(
            f"generation: {shape.rows} rows, prompt {shape.prompt} + completion {shape.completion}: prefill and the "
            f"last decode step; KV cache {hooks.kv_bytes // traced * layers} bytes at {layers} layers "
            f"({shape.cached_tokens} tokens per row)"
        )
        if old_policy_runs(plan):
            notes.append(
                f"old-policy log-probs: num_iterations {plan.num_iterations}, {steps_per_generation(plan)} "
                "steps per generation (TRL computes them when these misalign with the accumulation steps)"
            )
    if reference_runs(plan):
        kind = "a frozen copy in the compute dtype" if ref is not None else "the base with the adapter disabled"
        notes.append(f"reference: {kind}, under no_grad")
    return notes


__all__ = ["TRACED_TASKS", "check_traceable", "trace_posttrain_once", "trace_posttrain_step"]
