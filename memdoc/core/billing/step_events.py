"""The allocation sequence of a training run, generated from the bill's itemised tensors (no torch).

What the caching allocator sees, in the order torch issues it (`tests/fixtures/hf-step.pickle` is a
real trace of the same loop), for the measured loop `model(ids, labels=ids).loss.backward();
opt.step(); opt.zero_grad(set_to_none=True)`:

* build: every parameter tensor, in module order (embedding, layers, final norm, head);
* each step's forward: per decoder layer the tensors it saves for backward — the groups of
  `activations.layer_activations`, one block per group except those `_split` knows to be several —
  and, under checkpointing, the layer's
  input only (its other tensors are made and freed inside the layer); AMP's 16-bit weight copies;
  then the head: the final norm's and head's saved tensors, the 16-bit logits, their fp32 upcast
  (freed when the loss returns) and the saved fp32 log-softmax; the logits die with the output;
* backward, from the loss: the fp32 gradients of the logits (nll and log-softmax), then for each
  layer in reverse the recomputed layer (checkpointing), its gradient buffers
  (`layer_backward_peak`), its parameters' gradients (AccumulateGrad keeps the computed tensor),
  then the layer's saved tensors are freed; last the embedding's dense gradient;
* the optimizer (torch.optim.AdamW, foreach): at the first step `_init_group` creates exp_avg and
  exp_avg_sq per parameter; `_multi_tensor_adamw` makes `exp_avg_sq_sqrt = _foreach_sqrt(...)`
  (one state-sized tensor per parameter) and frees it; `zero_grad(set_to_none=True)` frees the
  gradients. Lion: one update temporary per parameter too; Adafactor: one buffer of its largest
  tensor (`optimizer_step_temp`).

Not in the stream (the bill still counts them in `peak_allocated`): ZeRO-3/FSDP all-gather buffers,
DeepSpeed's buckets, eager attention's s² temporaries outside what it saves, MoE routing
temporaries. Two steps run: the first creates the optimizer states among the cached blocks of its forward and
backward, the second is the steady state (the H200 harness's third step repeats the second). Sharded plans use
per-GPU shares of each tensor. The figures themselves come from `states` and `activations`; this
module only orders them.
"""

from __future__ import annotations

from dataclasses import dataclass

from memdoc.core.billing.activations import layer_activations
from memdoc.core.billing.states import parameter_tensors
from memdoc.core.model.plan import Checkpointing, Loss, Method, Optimizer

FP32 = 4
STEPS = 2


@dataclass(frozen=True)
class Events:
    """A flat allocation sequence: `sizes[i] > 0` allocates tensor `ids[i]`, `sizes[i] == 0` frees it."""

    ids: tuple[int, ...]
    sizes: tuple[int, ...]


class _Stream:
    def __init__(self) -> None:
        self.ids: list[int] = []
        self.sizes: list[int] = []
        self._next = 0

    def alloc(self, size: int) -> int:
        size = max(int(size), 1)
        self._next += 1
        self.ids.append(self._next)
        self.sizes.append(size)
        return self._next

    def free(self, tid: int) -> None:
        self.ids.append(tid)
        self.sizes.append(0)

    def free_all(self, tids: list[int], reverse: bool = False) -> None:
        for tid in reversed(tids) if reverse else tids:
            self.free(tid)


def _split(name: str, nbytes: int, model, T: int) -> list[int]:
    """One activation group of `layer_activations` as the tensors torch allocates for it.

    Most groups are one tensor; these are several, and the allocator sees their sizes (the
    composition is the one `activations` documents for each group):
    * `mlp.act` (SwiGLU): gate output, activation output, up output — three equal tensors;
    * an RMSNorm (`_norm`): the fp32 input copy (4·T·h), the per-token rsqrt (4·T) and, when the
      weight trains, the normalised output (a multiple of T·h);
    * `mlp.experts` (transformers 5 grouped experts, per routed token copy): the fused gate/up
      output (2w), the activation output (w), the expert output (h), and when the experts train
      the gathered input (h) and the act·up product (w).
    Splitting took the Qwen2.5-0.5B batch-8 row from −14% to −0.1% reserved and Mixtral's from −4.4%
    to −0.5% (benchmarks/RESULTS.md). (q, k and v of `attention.sdpa_inputs` are three tensors too;
    splitting them without the rotary temporaries around them made two rows worse, so they stay one.)
    """
    h = model.hidden_size
    if name == "mlp.act" and nbytes % 3 == 0:
        return [nbytes // 3] * 3
    if name.endswith("layernorm") and nbytes > 4 * T * h:
        rest = nbytes - 4 * T * h
        rsqrt = rest % (T * h)  # 4·T, below T·h; the output is whole multiples of T·h
        return [p for p in (4 * T * h, rsqrt, rest - rsqrt) if p > 0]
    if name == "mlp.experts" and model.moe_intermediate_size:
        w = model.moe_intermediate_size
        for widths in ((h, 2 * w, w, h, w), (2 * w, w, h)):
            if nbytes % sum(widths) == 0 and nbytes // sum(widths) % (T * model.experts_per_token) == 0:
                return [nbytes // sum(widths) * x for x in widths]
    return [nbytes]


def training_events(bill) -> Events:
    """The event stream of `STEPS` training steps of `bill`'s plan (see the module docstring)."""
    model, plan, acts = bill.model, bill.plan, bill.acts
    tensors = parameter_tensors(model, plan)
    full = plan.method is Method.FULL
    compute_bytes = plan.precision.compute_bits // 8
    # per-element bytes of stored weights / grads / states, scaled so that each kind sums to the bill's figure
    all_numels = tensors.embedding + tensors.head + tensors.other + sum(map(sum, tensors.layers))
    trainable_numels = sum(map(sum, tensors.trainable)) + (
        tensors.embedding + tensors.head + tensors.other if full else 0
    )
    peak = bill.peak
    w_scale = peak.weights / max(all_numels, 1)
    if not full:  # frozen base + fp32 adapters: keep the base per element, adapters fp32
        adapters = sum(map(sum, tensors.trainable))
        w_scale = max(peak.weights - 4 * adapters, 0) / max(all_numels, 1)
    g_scale = bill.phases["optimizer"].gradients / max(trainable_numels, 1)
    s_scale = bill.phases["optimizer"].optimizer / max(trainable_numels, 1)
    t_total = bill.phases["optimizer"].other
    T = plan.micro_batch * plan.seq_len
    layout_items = {}
    for i, layout in enumerate(model.layouts):
        if layout not in layout_items:
            layout_items[layout] = [
                t for name, v in layer_activations(model, plan, i).items() if v > 0 for t in _split(name, v, model, T)
            ]
    V, h = model.vocab_size, model.hidden_size
    L = model.num_layers
    s = _Stream()

    # -- build -----------------------------------------------------------------------------
    def weights(numels: list[int]) -> None:
        for n in numels:
            if n:
                s.alloc(n * w_scale)

    weights([tensors.embedding])
    for i in range(L):
        weights(tensors.layers[i])
    weights([tensors.other, tensors.head])
    if not full:  # peft adds the fp32 adapters after the model is built
        for layer in tensors.trainable:
            for n in layer:
                s.alloc(4 * n)

    trainable_order = (
        ([tensors.embedding] if full else [])
        + [n for layer in tensors.trainable for n in layer]
        + ([tensors.other, tensors.head] if full else [])
    )
    trainable_order = [n for n in trainable_order if n]
    states_made = False
    residual = acts.layers_saved // L if plan.checkpointing is not Checkpointing.NONE else 0
    copies = acts.weight_copies // L
    fused = plan.loss is not Loss.HF  # fused and fused-ce both run the fused linear cross-entropy
    logits_dt = 2 if plan.precision.is_amp and full else compute_bytes
    logsoftmax = 0 if fused else FP32 * T * V
    # Gemma-2's final logit soft-capping: logits / cap → tanh (saved, part of head_saved) → × cap
    softcap = (
        logits_dt * T * V
        if (not fused and model.family == "gemma2" and model.config.get("final_logit_softcapping"))
        else 0
    )
    head_rest = max(acts.head_saved - logsoftmax - softcap, 0)
    grad_buffer = (
        acts.layer_backward_peak - (acts.layer_saved if plan.checkpointing is not Checkpointing.NONE else 0)
    ) // 3
    dx_bytes = (FP32 if plan.precision.is_amp and full else compute_bytes) * T * h

    for _ in range(STEPS):
        # -- forward -------------------------------------------------------------------------
        ids = s.alloc(8 * T)
        x = s.alloc(dx_bytes)  # embedding output
        saved: list[list[int]] = []
        for i in range(L):
            items = layout_items[model.layouts[i]]
            kept = [s.alloc(copies)] if copies else []
            if plan.checkpointing is Checkpointing.NONE:
                kept += [s.alloc(b) for b in items]
            else:
                inner = [s.alloc(b) for b in items]
                s.free_all(inner, reverse=True)
                kept.append(s.alloc(residual))
            saved.append(kept)
        head = [s.alloc(head_rest)]
        if fused:
            chunk = s.alloc(acts.loss_forward_peak)
            s.free(chunk)
            logits = None
        else:
            logits = s.alloc(logits_dt * T * V)
            tanh = None
            if softcap:  # each step a new tensor; the one before dies when the name is rebound
                scaled = s.alloc(softcap)
                s.free(logits)
                tanh = s.alloc(softcap)
                s.free(scaled)
                logits = s.alloc(softcap)
            upcast = s.alloc(FP32 * T * V) if logits_dt != FP32 else None
            head.append(s.alloc(logsoftmax))
            if upcast is not None:
                s.free(upcast)
            s.free(logits)
        # -- backward -----------------------------------------------------------------------
        grads: list[int] = []

        def grad(n: int) -> None:
            if n:
                grads.append(s.alloc(n * g_scale))  # noqa: B023 (called within this iteration only)

        if not fused:
            g1 = s.alloc(FP32 * T * V)  # nll's gradient
            g2 = s.alloc(FP32 * T * V)  # log_softmax's gradient
            s.free(g1)
            s.free(head.pop())  # saved log-softmax
            glog = s.alloc(logits_dt * T * V) if logits_dt != FP32 else None
            s.free(g2)
            if tanh is not None:  # backward of × cap, of tanh (then its saved output dies), of / cap
                for step in ("mul", "tanh", "div"):
                    new = s.alloc(softcap)
                    s.free(glog)
                    glog = new
                    if step == "tanh":
                        s.free(tanh)
        else:
            glog = None
        dx = s.alloc(dx_bytes)
        if full:
            grad(tensors.head)
            grad(tensors.other)
            if model.tie_embeddings:  # the head's weight gradient becomes the shared embedding's .grad
                grad(tensors.embedding)
        if glog is not None:
            s.free(glog)
        s.free_all(head)
        for i in reversed(range(L)):
            recompute = []
            if plan.checkpointing is not Checkpointing.NONE:
                recompute = [s.alloc(b) for b in layout_items[model.layouts[i]]]
            buffers = [s.alloc(grad_buffer) for _ in range(3)] if grad_buffer > 0 else []
            for n in reversed(tensors.trainable[i]):
                grad(n)
            new_dx = s.alloc(dx_bytes)
            s.free_all(buffers, reverse=True)
            s.free_all(recompute, reverse=True)
            s.free_all(saved[i], reverse=True)
            s.free(dx)
            dx = new_dx
        if full and model.tie_embeddings:  # the embedding's dense gradient, accumulated into .grad in place
            s.free(s.alloc(tensors.embedding * g_scale))
        elif full:
            grad(tensors.embedding)
        s.free(dx)
        s.free(x)
        s.free(ids)
        # -- optimizer -------------------------------------------------------------------------
        if not states_made:
            for n in trainable_order:
                if plan.optimizer in (Optimizer.ADAMW, Optimizer.ADAMW_FUSED):
                    s.alloc(n * s_scale / 2)
                    s.alloc(n * s_scale / 2)
                else:
                    s.alloc(n * s_scale)
            states_made = True
        if t_total:
            if plan.optimizer in (Optimizer.ADAMW, Optimizer.LION):  # one temporary per parameter tensor
                per = t_total / max(sum(trainable_order), 1)
                temps = [s.alloc(n * per) for n in trainable_order]
            else:  # Adafactor: one update buffer of the largest tensor
                temps = [s.alloc(t_total)]
            s.free_all(temps, reverse=True)
        s.free_all(grads[::-1])  # zero_grad walks parameters in module order
    return Events(tuple(s.ids), tuple(s.sizes))


__all__ = ["Events", "STEPS", "training_events"]
