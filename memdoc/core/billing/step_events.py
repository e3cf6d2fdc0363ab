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
from memdoc.core.billing.states import ParameterTensors, parameter_tensors, per_layout
from memdoc.core.model.plan import Checkpointing, Loss, Method, Optimizer

FP32 = 4
STEPS = 2


@dataclass(frozen=True)
class Events:
    """A flat allocation sequence: `sizes[i] > 0` allocates tensor `ids[i]`, `sizes[i] == 0` frees it,
    `sizes[i] == EMPTY_CACHE` is `torch.cuda.empty_cache()` (`ids[i]` unused)."""

    ids: tuple[int, ...]
    sizes: tuple[int, ...]


EMPTY_CACHE = -1
"""The size of an `Events` entry that empties the allocator's cache (`CachingAllocator.replay`)."""


def _nbytes(size: float) -> int:
    """A tensor's size as the stream records it: whole bytes, at least one."""
    return max(int(size), 1)


class _Stream:
    def __init__(self) -> None:
        self.ids: list[int] = []
        self.sizes: list[int] = []
        self._next = 0

    def alloc(self, size: float) -> int:
        self._next += 1
        self.ids.append(self._next)
        self.sizes.append(_nbytes(size))
        return self._next

    def alloc_all(self, nbytes: list[int]) -> list[int]:
        """`alloc` of each size (already `_nbytes`) in order, as one list operation: their ids."""
        start = self._next + 1
        self._next += len(nbytes)
        tids = list(range(start, self._next + 1))
        self.ids.extend(tids)
        self.sizes.extend(nbytes)
        return tids

    def free(self, tid: int) -> None:
        self.ids.append(tid)
        self.sizes.append(0)

    def empty_cache(self) -> None:
        self.ids.append(0)
        self.sizes.append(EMPTY_CACHE)

    def free_all(self, tids: list[int], reverse: bool = False) -> None:
        self.ids.extend(reversed(tids) if reverse else tids)
        self.sizes.extend([0] * len(tids))


def _scaled(numels, scale: float) -> list[int]:
    """`_nbytes` of each nonzero element count × `scale` bytes, in order."""
    return [max(int(n * scale), 1) for n in numels if n]


def _per_distinct(layers: list[list[int]], sizes) -> list[list[int]]:
    """`sizes(layer)` of each layer, computed once per distinct layer (decoder layers repeat one or two
    layouts)."""
    done: dict[tuple[int, ...], list[int]] = {}
    out = []
    for layer in layers:
        key = tuple(layer)
        if key not in done:
            done[key] = sizes(layer)
        out.append(done[key])
    return out


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


def _layout_items(model, plan) -> list[list[int]]:
    """Per decoder layer, the sizes (`_nbytes`) of the tensors its forward saves, in `layer_activations` order
    (computed at the first layer of each distinct layout, `states.per_layout`)."""
    T = plan.micro_batch * plan.seq_len
    return per_layout(
        model,
        lambda i, _: [
            _nbytes(t)
            for name, v in layer_activations(model, plan, i).items()
            if v > 0
            for t in _split(name, v, model, T)
        ],
    )


def _trainable_order(tensors: ParameterTensors, full: bool) -> list[int]:
    """Element counts of the trainable tensors in module order (the optimizer's parameter order)."""
    order = (
        ([tensors.embedding] if full else [])
        + [n for layer in tensors.trainable for n in layer]
        + ([tensors.other, tensors.head] if full else [])
    )
    return [n for n in order if n]


class _TrainingRun:
    """The allocation stream of `STEPS` training steps of one bill, one named phase per method.

    Per-element bytes of the stored weights, gradients and optimizer states are scaled so that each
    kind sums to the bill's figure; the activation, logits and temporary sizes come from `bill.acts`.
    """

    def __init__(self, bill) -> None:
        self.stream = _Stream()
        self.model, self.plan, self.acts = bill.model, bill.plan, bill.acts
        self.tensors = parameter_tensors(self.model, self.plan)
        self.full = self.plan.method is Method.FULL
        self.checkpointing = self.plan.checkpointing is not Checkpointing.NONE
        self.tokens = self.plan.micro_batch * self.plan.seq_len
        self.layer_items = _layout_items(self.model, self.plan)  # per decoder layer
        self.trainable_order = _trainable_order(self.tensors, self.full)
        self._scale_states(bill)
        # per decoder layer, its parameters' gradients in the order backward makes them
        self.layer_grads = _per_distinct(self.tensors.trainable, lambda layer: _scaled(reversed(layer), self.g_scale))
        self._size_loss_head()
        self.states_made = False
        self.after_head = 0  # a no-grad scoring forward on top of the head's forward (DPO/KTO `training_events`)
        self.grads: list[int] = []  # this step's gradient tensors, in the order backward made them

    def _scale_states(self, bill) -> None:
        """Bytes per element of weights, gradients and optimizer states, so that each sums to the bill's figure."""
        tensors = self.tensors
        all_numels = tensors.embedding + tensors.head + tensors.other + sum(map(sum, tensors.layers))
        trainable_numels = sum(map(sum, tensors.trainable)) + (
            tensors.embedding + tensors.head + tensors.other if self.full else 0
        )
        self.w_scale = bill.peak.weights / max(all_numels, 1)
        if not self.full:  # frozen base + fp32 adapters: keep the base per element, adapters fp32
            adapters = sum(map(sum, tensors.trainable))
            self.w_scale = max(bill.peak.weights - 4 * adapters, 0) / max(all_numels, 1)
        optimizer = bill.phases["optimizer"]
        self.g_scale = optimizer.gradients / max(trainable_numels, 1)
        self.s_scale = optimizer.optimizer / max(trainable_numels, 1)
        self.step_temp_total = optimizer.other

    def _size_loss_head(self) -> None:
        """Sizes of the per-layer residuals, the logits and their loss tensors, and the backward buffers."""
        model, plan, acts, T = self.model, self.plan, self.acts, self.tokens
        compute_bytes = plan.precision.compute_bits // 8
        self.residual = acts.layers_saved // model.num_layers if self.checkpointing else 0
        self.copies = acts.weight_copies // model.num_layers
        self.fused = plan.loss is not Loss.HF  # Liger's fused linear cross-entropy or TRL's fused head
        self.logits_dt = 2 if plan.precision.is_amp and self.full else compute_bytes
        self.logits_numel = T * model.vocab_size  # tokens × vocabulary
        self.logsoftmax = 0 if self.fused else FP32 * self.logits_numel
        # Gemma-2's final logit soft-capping: logits / cap → tanh (saved, part of head_saved) → × cap
        self.softcap = (
            self.logits_dt * self.logits_numel
            if (not self.fused and model.arch.logit_softcapping and model.config.get("final_logit_softcapping"))
            else 0
        )
        self.head_rest = max(acts.head_saved - self.logsoftmax - self.softcap, 0)
        # --activation-offload: one layer's input comes back from the host for its recompute (`offload.py`)
        self.offload_copy = acts.offload_copy
        recomputed = acts.layer_saved + acts.offload_copy if self.checkpointing else 0
        self.grad_buffer = (acts.layer_backward_peak - recomputed) // 3
        self.dx_bytes = (FP32 if plan.precision.is_amp and self.full else compute_bytes) * T * model.hidden_size

    # -- build ---------------------------------------------------------------------------------
    def build(self) -> None:
        """Every parameter tensor in module order, then peft's fp32 adapters (added after the model is built)."""
        tensors = self.tensors
        self._weights([tensors.embedding])
        for nbytes in _per_distinct(tensors.layers, lambda layer: _scaled(layer, self.w_scale)):
            self.stream.alloc_all(nbytes)
        self._weights([tensors.other, tensors.head])
        if not self.full:
            self.stream.alloc_all([_nbytes(4 * n) for layer in tensors.trainable for n in layer])

    def _weights(self, numels: list[int]) -> None:
        self.stream.alloc_all(_scaled(numels, self.w_scale))

    # -- one training step ---------------------------------------------------------------------
    def step(self) -> None:
        """Forward, loss, backward, optimizer step and zero_grad of one micro-batch."""
        s = self.stream
        ids = s.alloc(8 * self.tokens)
        x = s.alloc(self.dx_bytes)  # embedding output
        saved = [self._layer_forward(i) for i in range(self.model.num_layers)]
        head, tanh = self._head_forward()
        self.transient(self.after_head)
        self.grads = []
        glog = self._loss_backward(head, tanh)
        dx = s.alloc(self.dx_bytes)
        self._head_gradients()
        if glog is not None:
            s.free(glog)
        s.free_all(head)
        dx = self._layers_backward(saved, dx)
        self._embedding_gradient()
        s.free(dx)
        s.free(x)
        s.free(ids)
        self._optimizer_step()

    def transient(self, size: int) -> None:
        """A block allocated and freed at once (post-training's generation and scoring forwards); none if 0."""
        if size:
            self.stream.free(self.stream.alloc(size))

    def _layer_forward(self, i: int) -> list[int]:
        """Decoder layer `i`'s forward: the tensors it keeps for backward (AMP copies, saved tensors or residual)."""
        s = self.stream
        items = self.layer_items[i]
        kept = [s.alloc(self.copies)] if self.copies else []
        if not self.checkpointing:
            return kept + s.alloc_all(items)
        inner = s.alloc_all(items)
        s.free_all(inner, reverse=True)
        kept.append(s.alloc(self.residual))
        return kept

    def _head_forward(self) -> tuple[list[int], int | None]:
        """Final norm, LM head and loss: (the tensors kept for backward, the saved soft-capping tanh or None)."""
        s = self.stream
        head = [s.alloc(self.head_rest)]
        if self.fused:
            s.free(s.alloc(self.acts.loss_forward_peak))  # one chunk of logits at a time
            return head, None
        logits = s.alloc(self.logits_dt * self.logits_numel)
        tanh = None
        if self.softcap:
            logits, tanh = self._softcap_forward(logits)
        upcast = s.alloc(FP32 * self.logits_numel) if self.logits_dt != FP32 else None
        head.append(s.alloc(self.logsoftmax))
        if upcast is not None:
            s.free(upcast)
        s.free(logits)
        return head, tanh

    def _softcap_forward(self, logits: int) -> tuple[int, int]:
        """logits / cap → tanh → × cap: each a new tensor; the one before dies when the name is rebound.
        Returns (the capped logits, the saved tanh)."""
        s = self.stream
        scaled = s.alloc(self.softcap)
        s.free(logits)
        tanh = s.alloc(self.softcap)
        s.free(scaled)
        return s.alloc(self.softcap), tanh

    def _loss_backward(self, head: list[int], tanh: int | None) -> int | None:
        """The fp32 gradients of the logits; frees the saved log-softmax. Returns the logits' gradient
        in their own width (None when fp32, or under the fused loss)."""
        s, TV = self.stream, self.logits_numel
        if self.fused:  # TRL's fused head: its fp32 gradients and tile buffer (Liger's backward has none)
            if self.acts.loss_backward_peak:
                s.free(s.alloc(self.acts.loss_backward_peak))
            return None
        g1 = s.alloc(FP32 * TV)  # nll's gradient
        g2 = s.alloc(FP32 * TV)  # log_softmax's gradient
        s.free(g1)
        s.free(head.pop())  # saved log-softmax
        glog = s.alloc(self.logits_dt * TV) if self.logits_dt != FP32 else None
        if glog is None and tanh is not None:  # fp32 logits: the soft-cap's backward starts from g2 itself
            glog = g2
        else:
            s.free(g2)
        if tanh is not None:  # backward of × cap, of tanh (then its saved output dies), of / cap
            for step in ("mul", "tanh", "div"):
                new = s.alloc(self.softcap)
                s.free(glog)
                glog = new
                if step == "tanh":
                    s.free(tanh)
        return glog

    def _grad(self, n: int) -> None:
        """A parameter gradient of `n` elements (AccumulateGrad keeps the computed tensor)."""
        if n:
            self.grads.append(self.stream.alloc(n * self.g_scale))

    def _head_gradients(self) -> None:
        """Full fine-tuning: the LM head's and final norm's gradients (a tied head's is the embedding's .grad)."""
        if self.full:
            self._grad(self.tensors.head)
            self._grad(self.tensors.other)
            if self.model.tie_embeddings:
                self._grad(self.tensors.embedding)

    def _layers_backward(self, saved: list[list[int]], dx: int) -> int:
        """Each layer in reverse: recompute, gradient buffers, parameter gradients; then its saved tensors
        die. Returns the gradient of the embedding output."""
        s = self.stream
        for i in reversed(range(self.model.num_layers)):
            recompute = []
            if self.checkpointing:
                copy = [s.alloc(self.offload_copy)] if self.offload_copy else []
                recompute = copy + s.alloc_all(self.layer_items[i])
            buffers = s.alloc_all([_nbytes(self.grad_buffer)] * 3) if self.grad_buffer > 0 else []
            self.grads += s.alloc_all(self.layer_grads[i])
            new_dx = s.alloc(self.dx_bytes)
            s.free_all(buffers, reverse=True)
            s.free_all(recompute, reverse=True)
            s.free_all(saved[i], reverse=True)
            s.free(dx)
            dx = new_dx
        return dx

    def _embedding_gradient(self) -> None:
        """The embedding's dense gradient, last; tied, it is accumulated into the existing .grad in place."""
        if self.full and self.model.tie_embeddings:
            self.stream.free(self.stream.alloc(self.tensors.embedding * self.g_scale))
        elif self.full:
            self._grad(self.tensors.embedding)

    def _optimizer_step(self) -> None:
        """States at the first step, the step's temporaries, then zero_grad (module order)."""
        s, plan = self.stream, self.plan
        if not self.states_made:
            if plan.optimizer in (Optimizer.ADAMW, Optimizer.ADAMW_FUSED):  # exp_avg, exp_avg_sq
                s.alloc_all([_nbytes(n * self.s_scale / 2) for n in self.trainable_order for _ in range(2)])
            else:
                s.alloc_all([_nbytes(n * self.s_scale) for n in self.trainable_order])
            self.states_made = True
        if self.step_temp_total:
            if plan.optimizer in (Optimizer.ADAMW, Optimizer.LION):  # one temporary per parameter tensor
                per = self.step_temp_total / max(sum(self.trainable_order), 1)
                temps = s.alloc_all([_nbytes(n * per) for n in self.trainable_order])
            else:  # Adafactor: one update buffer of the largest tensor
                temps = [s.alloc(self.step_temp_total)]
            s.free_all(temps, reverse=True)
        s.free_all(self.grads[::-1])  # zero_grad walks parameters in module order


def training_events(bill, post=None) -> Events:
    """The event stream of `STEPS` training steps of `bill`'s plan (see the module docstring).

    `post` (`posttrain.phases.PostTerms`, post-training): its resident tensors (frozen models, PPO's value
    states, a vLLM pool that does not sleep) are allocated after the build; each step first generates (one block
    for the cache or the pool, freed), then scores under no_grad (one block, freed) — after the policy's head
    forward for DPO/KTO, before the step for the online tasks (`posttrain.phases` cites TRL's order)."""
    run = _TrainingRun(bill)
    run.build()
    if post is not None and post.resident:
        run.stream.alloc(post.resident)
    for _ in range(STEPS):
        if post is not None:
            if post.wakes_vllm:  # TRL empties torch's cache before vLLM wakes up
                run.stream.empty_cache()
            run.transient(post.generation if post.generation > post.pool else 0)
            if post.wakes_vllm:  # vLLM's own allocator (cumem) unmaps its pool when it sleeps: none stays cached
                run.stream.empty_cache()
            run.transient(0 if post.scoring_after_forward else post.scoring)
            run.after_head = post.scoring if post.scoring_after_forward else 0
        run.step()
    return Events(tuple(run.stream.ids), tuple(run.stream.sizes))


__all__ = ["EMPTY_CACHE", "Events", "STEPS", "training_events"]
