"""Name the tensor an OOM failed to allocate: "Tried to allocate X" against the plan's tensors.

`plan_tensors(model, plan)` lists the single tensors of the plan that are large enough to be
the one allocation that fails, each with its bill line item and shape; `find_culprit(requested,
…)` returns the one whose allocation the message printed. The dtypes and which tensors exist
follow the bill (`memdoc.core.billing.activations` / `states`): compute width from the plan's
precision (16-bit under AMP), eager attention only where the bill has it
(`eager_attention`), fused loss chunks from `fused_chunk_tokens`, the KV cache from
`kv_cache_bytes`, foreach optimizer temporaries only for non-fused AdamW (torch
`_multi_tensor_adam`: one param-shaped output per tensor of the group), states as wide as the
bill bills them.

The printed size is the allocator's segment size (`allocation_bytes`: ≤ 1 MiB → 2 MiB,
< 10 MiB → 20 MiB, larger rounded up to 2 MiB, after rounding the request to 512 B) printed with
two decimals (`printed_tolerance`), so a match is: |segment − printed| within half the last
printed digit. The tensor's own size is accepted too (allocators that print the request).
"""

from __future__ import annotations

from dataclasses import dataclass

from memdoc.core.billing.activations import eager_attention, fused_chunk_tokens
from memdoc.core.billing.inference import kv_cache_bytes
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.plan import Loss, Method, Optimizer, TrainingPlan

__all__ = [
    "CULPRIT_LEVERS",
    "PlanTensor",
    "allocation_bytes",
    "find_culprit",
    "plan_tensors",
    "printed_tolerance",
    "shrinks",
    "symptom_for_culprit",
]

MIN_BLOCK = 512
"""c10 `kMinBlockSize`: every request is rounded up to a multiple of 512 B."""
SMALL_SIZE = 1024**2
"""`kSmallSize`: requests up to 1 MiB come from 2 MiB small-pool segments."""
SMALL_BUFFER = 2 * 1024**2
MIN_LARGE_ALLOC = 10 * 1024**2
"""`kMinLargeAlloc`: requests below 10 MiB get a 20 MiB segment (`kLargeBuffer`)."""
LARGE_BUFFER = 20 * 1024**2
ROUND_LARGE = 2 * 1024**2
"""`kRoundLarge`: larger requests are rounded up to 2 MiB."""


def allocation_bytes(nbytes: int) -> int:
    """The segment `cudaMalloc` is asked for when `nbytes` finds no cached block (c10 `get_allocation_size`)."""
    size = max(MIN_BLOCK, -(-nbytes // MIN_BLOCK) * MIN_BLOCK)
    if size <= SMALL_SIZE:
        return SMALL_BUFFER
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-size // ROUND_LARGE) * ROUND_LARGE


def printed_tolerance(printed: int) -> int:
    """Half the last digit of c10 `format_size` for a figure of `printed` bytes (2 decimals of its unit)."""
    for scale in (1024**3, 1024**2, 1024):
        if printed > scale:
            return scale // 200 + 1
    return 0


@dataclass(frozen=True, kw_only=True)
class PlanTensor:
    """One tensor of the plan: what it is, its bill line item, its size and shape."""

    name: str
    item: str
    """Bill line item: 'logits', 'activations', 'gradients', 'optimizer', 'weights', 'kv_cache'."""
    bytes: int
    shape: tuple[int, ...]
    phase: str
    """When it is allocated: 'startup', 'forward', 'loss', 'backward', 'optimizer' or 'generate'."""
    note: str = ""
    """Why this size is a surprise under the plan (e.g. eager attention under an SDPA plan)."""

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "item": self.item,
            "bytes": self.bytes,
            "shape": list(self.shape),
            "note": self.note or None,
        }


def _largest_linears(model: ModelSpec) -> list[tuple[str, int, int]]:
    """(name, out, in) of the distinct dense linear weight shapes of the first layout, largest first."""
    seen: dict[tuple[int, int], str] = {}
    for linear in model.layouts[0].linears:
        if linear.group in ("attention", "mlp") and (linear.out_features, linear.in_features) not in seen:
            seen[(linear.out_features, linear.in_features)] = linear.name
    return sorted(((n, o, i) for (o, i), n in seen.items()), key=lambda t: -t[1] * t[2])


def plan_tensors(model: ModelSpec, plan: TrainingPlan, *, inference: bool = False) -> list[PlanTensor]:
    """The plan's single large tensors, most characteristic first (logits, attention, MLP, states)."""
    dt = plan.precision.compute_bits // 8
    amp = plan.precision.is_amp and plan.method is Method.FULL and not plan.sharded_mixed_precision
    act = 2 if amp else dt  # autocast runs matmuls in 16 bit
    out = _generate_tensors(model, plan, dt) if inference else _loss_tensors(model, plan, act)
    out += _attention_tensors(model, plan, dt)
    out += _mlp_tensors(model, plan, act)
    for name, rows, cols in [("embed_tokens", model.vocab_size, model.hidden_size)] + _largest_linears(model):
        out += _parameter_tensors(plan, name, (rows, cols), amp=amp, inference=inference)
    return out


def _generate_tensors(model: ModelSpec, plan: TrainingPlan, dt: int) -> list[PlanTensor]:
    """Generation: one layer's K (or V) cache and the prefill's fp32 logits of the last position."""
    b, s, V = plan.micro_batch, plan.seq_len, model.vocab_size
    k = kv_cache_bytes(model, batch=b, context=s, bytes_per_element=dt) // (2 * model.num_layers)
    return [
        PlanTensor(
            name="one layer's K (or V) cache",
            item="kv_cache",
            bytes=k,
            shape=(b, model.num_kv_heads, s, model.head_dim),
            phase="generate",
        ),
        PlanTensor(name="prefill logits (fp32)", item="logits", bytes=4 * b * V, shape=(b, 1, V), phase="generate"),
    ]


def _loss_tensors(model: ModelSpec, plan: TrainingPlan, act: int) -> list[PlanTensor]:
    """Training: one chunk of logits under the fused loss, else the fp32 logits and the 16-bit ones."""
    b, s, h, V = plan.micro_batch, plan.seq_len, model.hidden_size, model.vocab_size
    if plan.loss is Loss.FUSED:
        chunk = fused_chunk_tokens(b * s, h, V)
        return [
            PlanTensor(
                name="one chunk of logits (fused cross-entropy)",
                item="logits",
                bytes=act * chunk * V,
                shape=(chunk, V),
                phase="loss",
            )
        ]
    out = [
        PlanTensor(
            name="fp32 logits (loss upcast) or their fp32 gradient",
            item="logits",
            bytes=4 * b * s * V,
            shape=(b, s, V),
            phase="loss",
        )
    ]
    if act != 4:
        out.append(
            PlanTensor(
                name=f"logits ({8 * act}-bit lm_head output)",
                item="logits",
                bytes=act * b * s * V,
                shape=(b, s, V),
                phase="forward",
            )
        )
    return out


def _attention_tensors(model: ModelSpec, plan: TrainingPlan, dt: int) -> list[PlanTensor]:
    """Eager attention's b × heads × s² scores (and their 16-bit probabilities), noted as a surprise
    when the plan's attention never holds them."""
    b, s, heads = plan.micro_batch, plan.seq_len, model.num_heads
    note = (
        ""
        if eager_attention(model, plan)
        else (
            f"your plan runs {plan.attention.value} attention, which never holds b×heads×s² scores: "
            "this size means attention ran eager (or SDPA's math kernel)"
        )
    )
    out = [
        PlanTensor(
            name="attention scores (fp32 softmax, eager attention)",
            item="activations",
            bytes=4 * b * heads * s * s,
            shape=(b, heads, s, s),
            phase="forward",
            note=note,
        )
    ]
    if dt != 4:
        out.append(
            PlanTensor(
                name=f"attention probabilities ({8 * dt}-bit copy, eager attention)",
                item="activations",
                bytes=dt * b * heads * s * s,
                shape=(b, heads, s, s),
                phase="forward",
                note=note,
            )
        )
    return out


def _mlp_tensors(model: ModelSpec, plan: TrainingPlan, act: int) -> list[PlanTensor]:
    """The routed experts' gate/up output (MoE), the MLP intermediate and the hidden states."""
    b, s, h = plan.micro_batch, plan.seq_len, model.hidden_size
    out = []
    if model.is_moe and model.moe_intermediate_size:
        width = model.moe_intermediate_size
        tokens = b * s * model.experts_per_token
        out.append(
            PlanTensor(
                name="routed experts' gate/up output (all routed tokens)",
                item="activations",
                bytes=act * tokens * 2 * width,
                shape=(tokens, 2 * width),
                phase="forward",
            )
        )
    if model.intermediate_size:
        out.append(
            PlanTensor(
                name="MLP intermediate (gate, up or activation output, or its gradient)",
                item="activations",
                bytes=act * b * s * model.intermediate_size,
                shape=(b, s, model.intermediate_size),
                phase="forward",
            )
        )
    out.append(
        PlanTensor(
            name="hidden states (a layer's input/output or its gradient)",
            item="activations",
            bytes=act * b * s * h,
            shape=(b, s, h),
            phase="forward",
        )
    )
    return out


def _parameter_tensors(
    plan: TrainingPlan, name: str, shape: tuple[int, int], *, amp: bool, inference: bool
) -> list[PlanTensor]:
    """One weight shape's tensors: (training a full fine-tune) its gradient, AdamW state and autocast
    copy, then the weight itself."""
    full = plan.method is Method.FULL
    pbytes = plan.precision.param_bits // 8
    numel = shape[0] * shape[1]
    out = []
    if full and not inference:
        out.append(
            PlanTensor(name=f"{name} gradient", item="gradients", bytes=pbytes * numel, shape=shape, phase="backward")
        )
        if plan.optimizer in (Optimizer.ADAMW, Optimizer.ADAMW_FUSED):
            what = "AdamW state (exp_avg/exp_avg_sq)" + (
                " or foreach step temporary" if plan.optimizer is Optimizer.ADAMW else ""
            )
            out.append(
                PlanTensor(
                    name=f"{what} of {name}", item="optimizer", bytes=pbytes * numel, shape=shape, phase="optimizer"
                )
            )
        if amp:
            out.append(
                PlanTensor(
                    name=f"16-bit autocast copy of {name}",
                    item="activations",
                    bytes=2 * numel,
                    shape=shape,
                    phase="forward",
                )
            )
    weight_dt = plan.precision.compute_bits // 8 if not full else pbytes
    out.append(PlanTensor(name=f"{name} weight", item="weights", bytes=weight_dt * numel, shape=shape, phase="startup"))
    return out


def find_culprit(requested: int | None, tensors: list[PlanTensor], phase: str | None = None) -> PlanTensor | None:
    """The tensor whose allocation printed as `requested` bytes; the traceback's phase breaks ties.

    None when nothing matches, or when the request is a small-pool/20 MiB segment (≤ 20 MiB: the
    printed size then fits almost any small tensor and names none).
    """
    if requested is None or requested <= LARGE_BUFFER:
        return None
    tol = printed_tolerance(requested)
    matches = [
        t for t in tensors if abs(allocation_bytes(t.bytes) - requested) <= tol or abs(t.bytes - requested) <= tol
    ]
    if not matches:
        return None
    if phase is not None:
        same = [t for t in matches if t.phase == phase or (phase == "loss" and t.item == "logits")]
        if same:
            return same[0]
    return matches[0]


CULPRIT_LEVERS = {
    "logits": ("loss", "seq_len", "micro_batch"),
    "activations": ("attention", "checkpointing", "seq_len", "micro_batch"),
    "optimizer": ("optimizer", "offload", "method"),
    "gradients": ("method", "shard", "optimizer_in_backward"),
    "weights": ("precision", "method", "shard"),
    "kv_cache": (),
}
"""Plan levers that shrink a culprit of each bill item (a prescription whose `why` is that item counts too)."""


def shrinks(prescription, culprit: PlanTensor | None) -> bool:
    """Does `prescription` (a `memdoc.core.doctor.symptoms.Prescription`) shrink the culprit tensor?"""
    if culprit is None:
        return False
    lever = prescription.lever or {}
    if culprit.note:  # eager attention under an SDPA plan: only putting attention back on SDPA/flash removes it
        return bool(lever.get("attention"))
    return prescription.why == culprit.item or any(k in CULPRIT_LEVERS.get(culprit.item, ()) for k in lever)


def symptom_for_culprit(symptom: str, culprit: PlanTensor | None) -> str:
    """A mid-run OOM whose culprit is set by the sequence length (eager scores s², logits s × vocab) is
    treated as long-sample-oom: that ladder (length cap, flash attention, chunked loss) shrinks it."""
    if culprit is not None and symptom == "mid-run-oom" and (culprit.item == "logits" or "attention" in culprit.name):
        return "long-sample-oom"
    return symptom
