"""Activation memory of one training step, tensor by tensor, as the HF modelling code saves it.

Each function lists the tensors autograd keeps for backward in one module of an HF decoder
(transformers 5.x `modeling_llama.py` and its relatives), in bytes, for T = batch × seq tokens.
The rules behind every entry are autograd's:

* `linear(x, W)` saves x only when W needs a gradient (full fine-tuning); a frozen base linear
  saves nothing of x (LoRA's `lora_A` then saves x, the same tensor the norm produced);
* `a * b` saves a only when b needs a gradient, and b only when a does (so rotary's `q * cos`
  saves only cos, which is tiny);
* `x.to(dtype)` saves nothing; `silu`/`gelu` save their input; `softmax`/`log_softmax` their output;
* SDPA with a flash-style kernel saves q, k, v, its output and an fp32 logsumexp per head and
  token; eager attention saves the fp32 softmax and its 16-bit copy (b·heads·s² each).

Under AMP autocast every linear casts its (fp32) input to a 16-bit copy that it saves, and the
16-bit copies of the weights stay cached (and saved) until backward reaches them.

QLoRA with `kbit_upcast` (peft's fp32 upcast of the non-quantised parameters) makes the tensors
between the 4-bit matmuls fp32: see `kbit.py` (`activation_plan`, `stream_bytes`, `head_weight_copy`).

The structure was written from the modelling code and is checked against autograd itself — the
census of tensors a real CPU forward saves, per layer (`tests/test_activations_census.py`) — and
against fake-tensor traces of whole steps (`memdoc diagnose`, `benchmarks/accuracy.py`).
Megatron's `sbh(34 + 5as/h)` describes Megatron, not HF, and is only a cross-check.
"""

from __future__ import annotations

from dataclasses import dataclass

from memdoc.core.billing.kbit import activation_plan, head_weight_copy, stream_bytes
from memdoc.core.model.lora import adapted_names, is_trained
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.params import Linear
from memdoc.core.model.plan import Attention, Checkpointing, Loss, Method, Precision, TrainingPlan

FP32 = 4


@dataclass(frozen=True, kw_only=True)
class Activations:
    """Activation bytes of one step on one GPU (micro-batch × seq tokens)."""

    layer_saved: int
    """Bytes one decoder layer keeps for backward without checkpointing (largest layer for MoE mixes)."""
    layers_saved: int
    """Bytes all decoder layers keep at the end of forward, with the plan's checkpointing."""
    head_saved: int
    """Final norm, LM head and loss tensors kept at the end of forward (fp32 log-softmax, …)."""
    loss_forward_peak: int
    """Extra transient bytes while the loss is computed (fp32 logits upcast)."""
    loss_backward_peak: int
    """Extra transient bytes at the start of backward (fp32 gradients of the logits)."""
    layer_backward_peak: int
    """Extra bytes while one layer runs backward: its recomputed activations (checkpointing) and gradient buffers."""
    weight_copies: int
    """AMP only: the 16-bit weight copies autocast caches and matmuls save."""
    partial: tuple[int, int, int] | None = None
    """`--checkpoint-every N` when backward reaches an uncheckpointed layer first: (activations still
    saved, recompute, decoder layers above) at the highest checkpointed layer; None otherwise."""


class _Layer:
    """Accumulates the saved tensors of one decoder layer, by module."""

    def __init__(self) -> None:
        self.items: dict[str, int] = {}

    def add(self, module: str, nbytes: float) -> None:
        self.items[module] = self.items.get(module, 0) + int(nbytes)

    @property
    def total(self) -> int:
        return sum(self.items.values())


LIGER_NORM_FAMILIES = ("llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe", "gemma", "gemma2", "phi3")
"""Model types whose `apply_liger_kernel_to_*` (liger_kernel/transformers/monkey_patch.py) swaps RMSNorm,
RoPE and the gated MLP for Liger's kernels, as `use_liger_kernel=True` does (`--loss fused`)."""
LIGER_GLU_FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2")
"""Of those, the dense gated MLPs with separate gate/up projections: LigerSwiGLUMLP / LigerGEGLUMLP."""


def liger_layers(model: ModelSpec, plan: TrainingPlan) -> bool:
    """Are the decoder layers Liger's (`--loss fused` = `use_liger_kernel=True`, on a family it patches)?"""
    return plan.loss is Loss.FUSED and model.family in LIGER_NORM_FAMILIES


def liger_glu(model: ModelSpec, plan: TrainingPlan) -> bool:
    """Is the MLP's activation Liger's SiLU/GELU-mul kernel (saves a and b, writes their gradients in place)?"""
    return liger_layers(model, plan) and model.family in LIGER_GLU_FAMILIES and not model.is_moe


def _norm(
    layer: _Layer,
    name: str,
    T: int,
    width: int,
    *,
    dt: int,
    trainable: bool,
    gemma: bool,
    amp: bool,
    liger: bool = False,
) -> None:
    """RMSNorm: fp32 copy of the input (pow/mul), rsqrt (T floats), normalised output if the weight trains.

    LlamaRMSNorm: `x32 = x.float(); x32 * rsqrt(mean(x32²)); weight * y.to(dtype)`. In fp32 the
    `.float()` is a no-op (no copy, the residual stream is saved instead — same bytes).
    GemmaRMSNorm multiplies in fp32 by (1 + weight), so its saved normalised tensor is fp32.
    Liger's RMSNorm (`LigerRMSNormFunction`) saves its input X itself and an fp32 RSTD per row; the
    weight's gradient is rebuilt from them, so nothing more when the weight trains.
    """
    if liger:
        layer.add(name, (FP32 if amp else dt) * T * width + FP32 * T)
        return
    layer.add(name, FP32 * T * width + FP32 * T)
    if trainable:
        out_bytes = FP32 if (gemma or amp) else dt
        layer.add(name, out_bytes * T * width)


def eager_attention(model: ModelSpec, plan: TrainingPlan) -> bool:
    """Eager attention is what runs: asked for, or the only kernel transformers has (Gemma-2)."""
    return plan.attention is Attention.EAGER or model.family == "gemma2"


def _attention_saved(
    layer: _Layer, model: ModelSpec, plan: TrainingPlan, linears: list[Linear], targets, *, dt: int, amp: bool
) -> None:
    T = plan.micro_batch * plan.seq_len
    b, s, heads = plan.micro_batch, plan.seq_len, model.num_heads
    q_dim = model.q_dim
    kv_dim = model.kv_dim
    family = model.family
    by_name = {l.name: l for l in linears}
    if family == "deepseek_v2":
        q_dim = heads * model.head_dim
        kv_dim = q_dim
        v_dim = heads * int(model.config["v_head_dim"])
    else:
        v_dim = kv_dim
    # Inputs of the q/k/v projections: the norm output (shared storage, saved once if any projection
    # needs it); under AMP each projection saves its own 16-bit cast of it.
    in_projs = [l for l in linears if l.group == "attention" and l.name not in ("o_proj", "dense")]
    savers = in_projs if targets is None else []  # LoRA inputs are counted in `_lora_saved`
    if amp:
        layer.add("attention.input_casts", 2 * T * model.hidden_size * len(savers))
    elif savers:
        layer.add("attention.input", dt * T * model.hidden_size)
    if family in ("qwen3", "qwen3_moe"):  # q_norm / k_norm: RMSNorm over each head's q and k
        _norm(
            layer,
            "attention.qk_norm",
            T,
            q_dim + kv_dim,
            dt=dt,
            trainable=targets is None,
            gemma=False,
            amp=amp,
            liger=liger_layers(model, plan),
        )
    if family == "deepseek_v2":  # MLA: compressed kv (kv_lora_rank) normed, then expanded
        rank = int(model.config["kv_lora_rank"])
        layer.add("attention.kv_compress", FP32 * T * rank + dt * T * rank * 2)
    # rotary outputs q_embed, k_embed (new tensors) and v: the projection output, or for Phi-3's
    # fused qkv a contiguous copy of its v slice (the fused output itself is not kept).
    layer.add("attention.sdpa_inputs", dt * T * (q_dim + kv_dim + v_dim))
    if not eager_attention(model, plan):
        layer.add("attention.sdpa", dt * T * (v_dim if family == "deepseek_v2" else q_dim) + FP32 * b * heads * s)
    else:
        # eager: scores → fp32 softmax (saved) → 16-bit copy (saved by probs @ v), plus the output
        layer.add("attention.eager_probs", (FP32 + dt) * b * heads * s * s)
        if model.config.get("attn_logit_softcapping"):  # Gemma-2: tanh(scores / cap) saves its output
            layer.add("attention.softcap", dt * b * heads * s * s)
        if model.num_kv_heads != heads and family != "deepseek_v2":
            # repeat_kv copies k and v to every query head; the matmuls save the copies instead
            layer.add("attention.repeat_kv", dt * T * (2 * q_dim - kv_dim - v_dim))
    o_proj = by_name.get("o_proj") or by_name.get("dense")
    # `attn_output.transpose(1, 2).contiguous()` copies only for eager: flash-style SDPA returns its
    # output in (batch, seq, heads, head_dim) memory already (CUDA flash and the fake CPU kernel),
    # so o_proj saves the very tensor SDPA saved.
    # Phi-3 slices q/k/v out of one fused projection, and SDPA's output then needs the copy too
    # (saved-tensor census of a real CPU step).
    copies = eager_attention(model, plan) or family == "phi3"
    if o_proj is not None and targets is None and copies:
        layer.add("attention.o_proj_input", 2 * T * o_proj.in_features if amp else dt * T * o_proj.in_features)


def _mlp_saved(
    layer: _Layer, model: ModelSpec, plan: TrainingPlan, linears: list[Linear], targets, *, dt: int, amp: bool
) -> None:
    T = plan.micro_batch * plan.seq_len
    h = model.hidden_size
    dense = [l for l in linears if l.group == "mlp"]
    experts = [l for l in linears if l.group == "experts"]
    routers = [l for l in linears if l.group == "router"]
    cdt = 2 if amp else dt
    if routers:
        # the router's fp32 softmax; its input too when the router trains (full fine-tuning)
        layer.add("mlp.router", FP32 * T * model.num_experts + (dt * T * h if targets is None else 0))
    if experts:
        # transformers 5 `grouped_mm_experts_forward`, per routed token copy (k per token): the
        # gathered input and the act·up product (inputs of the two grouped matmuls, kept only
        # when the experts train), the fused gate/up output (the activation's input), the
        # activation output, and the expert output (multiplied by the routing weight).
        k = model.experts_per_token
        width = model.moe_intermediate_size
        per_copy = h + 2 * width + width + (h + width if targets is None else 0)
        layer.add("mlp.experts", k * T * cdt * per_copy)
    if dense:
        up_in = [
            l
            for l in dense
            if l.name.endswith(("gate_proj", "up_proj", "gate_up_proj", "fc1", "c_fc", "dense_h_to_4h"))
        ]
        down = [l for l in dense if l not in up_in]
        savers = up_in if targets is None else []
        if amp:
            layer.add("mlp.input_casts", 2 * T * h * len(savers))
        elif savers:
            layer.add("mlp.input", dt * T * h)
        blocks: dict[str, list[Linear]] = {}
        for l in up_in:  # the dense MLP and a shared expert are separate blocks
            blocks.setdefault(_block(l), []).append(l)
        for prefix, block in blocks.items():
            fused = any(l.name.endswith("gate_up_proj") for l in block)
            width = max(l.out_features for l in block) // (2 if fused else 1)
            gated = fused or any(l.name.endswith("gate_proj") for l in block)
            # gated: gate output (the activation's input), activation output, up output; plain: fc1 output
            # Liger's SiLU/GELU-mul saves only its inputs a (gate) and b (up)
            layer.add("mlp.act", cdt * T * width * ((2 if liger_glu(model, plan) else 3) if gated else 1))
            has_down = any(_block(l) == prefix for l in down)
            if has_down and targets is None:
                layer.add("mlp.down_input", cdt * T * width)


def _block(linear: Linear) -> str:
    """'shared_expert' for 'shared_expert.up_proj', '' for a top-level 'up_proj'."""
    return linear.name.rsplit(".", 1)[0] if "." in linear.name else ""


def _lora_saved(layer: _Layer, plan: TrainingPlan, linears: list[Linear], targets, family: str = "") -> None:
    """LoRA adapters (peft `lora.Linear`): fp32 adapters cast their input to fp32 and save that copy.

    peft's `Linear.forward` does `x = self._cast_input_dtype(x, lora_A.weight.dtype)` and then
    `lora_B(lora_A(dropout(x)))`: `lora_A` saves the fp32 x (a new tensor unless x already is
    fp32), `lora_B` saves lora_A's output (T × r, fp32). The frozen base linear saves nothing.
    With `plan.lora_dropout` > 0 (peft's default is 0: `nn.Identity`) dropout (`x * noise`) saves
    its noise and `lora_A` the dropped-out copy: a census of saved tensors on a real CPU step shows
    4 + 4 bytes per input element (4 with dropout 0). Under AMP autocast casts that input back to 16
    bit for `lora_A` (saved instead of the fp32 copy), `lora_A`'s output is 16-bit too, the noise
    stays fp32 (census: 4 + 2). Where no cast happens — fp32 plans, and QLoRA under autocast, whose
    4-bit layer (peft `lora.bnb.Linear4bit`) casts only without autocast and whose 16-bit input
    autocast leaves as is — `lora_A` saves the layer's own input, one tensor shared by the adapters
    that read it (q/k/v read the norm output, gate/up the other), and o_proj's input is the SDPA
    output SDPA already saves (`_shared_input`); with dropout each adapter keeps its noise and
    dropped copy instead (fake-tensor traces, `tests/test_kbit.py`).
    """
    T = plan.micro_batch * plan.seq_len
    fp32 = plan.precision is Precision.FP32
    uncast = fp32 or (plan.method is Method.QLORA and plan.precision.is_amp and not plan.kbit_upcast)
    width = FP32 if fp32 else 2  # of the uncast input
    matmul_bytes = 2 if plan.precision.is_amp else FP32
    seen: set[str] = set()
    for linear in linears:
        if not is_trained(linear, targets):
            continue
        if uncast:
            shared = _shared_input(linear, family)
            own = 0 if shared in seen or shared == "sdpa_output" else width
            seen.add(shared)
            per_input = 2 * width if plan.lora_dropout else own
            layer.add(f"lora.{linear.name}", per_input * T * linear.in_features + width * T * plan.lora_rank)
        else:
            per_input = matmul_bytes + (FP32 if plan.lora_dropout else 0)
            layer.add(f"lora.{linear.name}", per_input * T * linear.in_features + matmul_bytes * T * plan.lora_rank)


def _shared_input(linear: Linear, family: str) -> str:
    """Which tensor a linear reads: the attention input, the MLP input of its block, SDPA's output, or its own."""
    short = linear.name.split(".")[-1]
    if linear.group == "attention" and short not in ("o_proj", "dense"):
        return "attention_input"
    if short == "o_proj" and family not in LAYERNORM_FAMILIES + ("phi3",):
        return "sdpa_output"
    if short in ("gate_proj", "up_proj"):
        return "mlp_input:" + _block(linear)
    return linear.name


LAYERNORM_FAMILIES = ("gpt2", "gpt_neox", "falcon", "phi", "bert")
"""Families with LayerNorm (saves its 16-bit input, not an fp32 copy) and a plain GELU MLP."""

# GELUs written as Python formulas (transformers' NewGELUActivation & co.) keep four intermediates.
_PYTHON_GELUS = ("gelu_new", "gelu_fast", "gelu_python", "quick_gelu")


def _layernorm_layer(
    layer: _Layer,
    model: ModelSpec,
    plan: TrainingPlan,
    linears: list[Linear],
    targets,
    *,
    dt: int,
    amp: bool,
    act_dt: int,
) -> None:
    """GPT-2, GPT-NeoX, Falcon, Phi-2 (and BERT) decoder layers, from autograd's saved tensors.

    LayerNorm saves its input and per-token mean/rstd; parallel-residual layers (NeoX, Falcon,
    Phi-2) feed attention and MLP from the same input, so it is kept once; Phi-2 and Falcon use
    one norm for both. Attention keeps q, k, v, its output and the merged-head copy the output
    projection saves; Falcon's multi-query attention does not fit SDPA's fused kernels (one k/v
    head for many query heads, no `enable_gqa`) and runs the math kernel, which keeps the fp32
    probabilities (heads × s²) and an fp32 copy of q instead. Residual dropout keeps one mask per
    dropout (GPT-2, Phi-2: `resid_pdrop`); GPT-2's attention dropout runs inside the flash kernel
    on CUDA (it keeps the RNG state, not a mask). The MLP keeps the activation's input (four
    intermediates for GELUs written in Python) and the down projection's input; `act_dt` is the
    activation's width when it can differ (`kbit.stream_bytes`: fp32 after the QLoRA upcast).
    """
    cfg, family = model.config, model.family
    T, h = plan.micro_batch * plan.seq_len, model.hidden_size
    b, s, heads = plan.micro_batch, plan.seq_len, model.num_heads
    full = targets is None
    cdt = 2 if amp else dt
    parallel = (
        family == "phi"
        or (family == "gpt_neox" and cfg.get("use_parallel_residual", True))
        or (family == "falcon" and (cfg.get("parallel_attn", True) or cfg.get("new_decoder_architecture")))
    )
    one_norm = family == "phi" or (family == "falcon" and not cfg.get("new_decoder_architecture"))
    layer.add("layernorm", (1 if parallel else 2) * ((FP32 if amp else dt) * T * h + 2 * FP32 * T))
    if full:
        layer.add("layernorm_out", (1 if one_norm else 2) * cdt * T * h)
    q, kv = model.q_dim, model.kv_dim
    if eager_attention(model, plan):
        layer.add("attention.eager_probs", (FP32 + dt) * b * heads * s * s)
        layer.add("attention.qkv", cdt * T * (q + 2 * kv))
    elif family == "falcon" and model.num_kv_heads != heads:
        layer.add("attention.math_kernel", FP32 * b * heads * s * s + FP32 * T * (q + 2 * kv))
    else:
        layer.add("attention.sdpa", cdt * T * (2 * q + 2 * kv) + FP32 * b * heads * s)
    if full:
        layer.add("attention.dense_input", cdt * T * q)
    if cfg.get("resid_pdrop") or cfg.get("hidden_dropout") or cfg.get("hidden_dropout_prob"):
        layer.add("dropout", 2 * cdt * T * h)
    up = next(l for l in linears if l.group == "mlp")
    act = cfg.get("activation_function") or cfg.get("hidden_act") or "gelu"
    layer.add("mlp.act", (4 if act in _PYTHON_GELUS else 1) * max(cdt, act_dt) * T * up.out_features)
    if full:
        layer.add("mlp.down_input", cdt * T * up.out_features)


def layer_activations(model: ModelSpec, plan: TrainingPlan, index: int = 0) -> dict[str, int]:
    """Bytes one decoder layer saves for backward without checkpointing, by module."""
    dt = plan.precision.compute_bits // 8
    targets = adapted_names(plan)
    full = targets is None
    # LoRA under AMP: 16-bit base, autocast is a no-op for it; DeepSpeed AMP runs 16-bit weights.
    amp = plan.precision.is_amp and full and not plan.sharded_mixed_precision
    T = plan.micro_batch * plan.seq_len
    linears = list(model.layouts[index].linears)
    if model.family in LAYERNORM_FAMILIES:
        layer = _Layer()
        _layernorm_layer(layer, model, plan, linears, targets, dt=dt, amp=amp, act_dt=stream_bytes(plan, dt))
        if not full:
            _lora_saved(layer, plan, linears, targets, model.family)
        return layer.items
    gemma = model.family in ("gemma", "gemma2")
    liger = liger_layers(model, plan)
    layer = _Layer()
    h = model.hidden_size
    _norm(layer, "input_layernorm", T, h, dt=dt, trainable=full, gemma=gemma, amp=amp, liger=liger)
    _attention_saved(layer, model, plan, linears, targets, dt=dt, amp=amp)
    _norm(layer, "post_attention_layernorm", T, h, dt=dt, trainable=full, gemma=gemma, amp=amp, liger=liger)
    if model.family == "gemma2":  # extra post-attention / post-feedforward norms
        _norm(layer, "post_norms", T, h, dt=dt, trainable=full, gemma=True, amp=amp, liger=liger)
        _norm(layer, "post_norms", T, h, dt=dt, trainable=full, gemma=True, amp=amp, liger=liger)
    _mlp_saved(layer, model, plan, linears, targets, dt=stream_bytes(plan, dt), amp=amp)
    if not full:
        _lora_saved(layer, plan, linears, targets, model.family)
    return layer.items


def _head(model: ModelSpec, plan: TrainingPlan, *, dt: int, amp: bool) -> tuple[int, int, int]:
    """(saved, forward transient, backward transient) bytes of final norm, LM head and loss.

    HF `ForCausalLMLoss` upcasts the logits: `logits.float()` (fp32 copy, transient unless the
    logits already are fp32), then `cross_entropy` = log_softmax (fp32 output saved) + nll_loss.
    The 16-bit logits tensor itself lives until the loss is computed. Backward starts with the
    nll gradient and the log_softmax gradient (fp32, T×V each) while the saved log_softmax is
    still alive.
    """
    T = plan.micro_batch * plan.seq_len
    V = model.vocab_size
    h = model.hidden_size
    full = plan.method is Method.FULL
    gemma = model.family in ("gemma", "gemma2")
    norm = _Layer()
    if model.family in LAYERNORM_FAMILIES:  # final LayerNorm: its input and per-token statistics
        norm.add("final_norm", (FP32 if amp else dt) * T * h + 2 * FP32 * T)
        if model.config.get("embd_pdrop"):  # GPT-2's embedding dropout mask
            norm.add("embedding_dropout", (2 if amp else dt) * T * h)
    else:
        _norm(norm, "final_norm", T, h, dt=dt, trainable=full, gemma=gemma, amp=amp, liger=liger_layers(model, plan))
    if plan.loss is not Loss.HF:
        return _fused_head(model, plan, norm.total, dt=dt, amp=amp)
    saved = norm.total + (dt * T * h if full else 0) + FP32 * T * V
    logits_dt = 2 if amp else dt
    if model.family == "gemma2" and model.config.get("final_logit_softcapping"):
        saved += logits_dt * T * V  # tanh saves its output
    upcast = 0 if logits_dt == FP32 else FP32 * T * V
    forward_transient = logits_dt * T * V + upcast
    backward_transient = 2 * FP32 * T * V
    return saved, forward_transient, backward_transient


def fused_chunk_tokens(tokens: int, hidden: int, vocab: int) -> int:
    """Liger's chunk: next_power_of_2(ceil(BT / ceil(V / H))) tokens, so one chunk's logits ≈ BT × H."""
    inc_factor = -(-vocab // hidden)
    chunk = -(-tokens // inc_factor)
    return min(tokens, 1 << (chunk - 1).bit_length())


def _fused_head(model: ModelSpec, plan: TrainingPlan, norm_saved: int, *, dt: int, amp: bool) -> tuple[int, int, int]:
    """Fused linear cross-entropy (Liger `fused_linear_cross_entropy_forward`): no full logits.

    The forward allocates `grad_input = zeros_like(input)` (T × H) and, when the head trains,
    `grad_weight = zeros_like(weight)` (V × H), loops over token chunks computing one chunk's
    logits (chunk × V, turned into their gradient in place) and accumulates both gradients; they
    are what it saves for backward, which only rescales them. Plus an fp32 loss per token.
    """
    T = plan.micro_batch * plan.seq_len
    V, h = model.vocab_size, model.hidden_size
    act_bytes = 2 if amp else dt
    saved = norm_saved + act_bytes * T * h + FP32 * T
    if plan.method is Method.FULL:
        saved += (plan.precision.param_bits // 8) * V * h  # grad_weight, built in the forward
    chunk = fused_chunk_tokens(T, h, V)
    return saved, act_bytes * chunk * V, 0


def estimate_activations(model: ModelSpec, plan: TrainingPlan) -> Activations:
    """Activation memory for the plan: saved tensors per layer × layers, with checkpointing, plus the head."""
    mm_dt = plan.precision.compute_bits // 8  # a 4-bit matmul's output, before bnb casts it to its input's dtype
    plan = activation_plan(plan)  # QLoRA's fp32 upcast without autocast saves what fp32 LoRA saves
    dt = plan.precision.compute_bits // 8
    stream = stream_bytes(plan, dt)
    amp = plan.precision.is_amp and plan.method is Method.FULL and not plan.sharded_mixed_precision
    T = plan.micro_batch * plan.seq_len
    h = model.hidden_size
    # layers differ only between dense and MoE layouts: compute each distinct layout once
    groups = model.layer_groups
    saved = {i: sum(layer_activations(model, plan, i).values()) for i, _, _ in groups}
    largest = max(saved.values())
    residual = (FP32 if amp else stream) * T * h  # a checkpointed layer keeps only its input
    partial = None
    if plan.checkpointing is Checkpointing.FULL and plan.checkpoint_every > 1:
        layers_saved, recompute, partial = _partial_checkpointing(model, plan, saved, residual)
    elif plan.checkpointing is Checkpointing.FULL:
        layers_saved = residual * model.num_layers
        recompute = largest
    elif plan.checkpointing is Checkpointing.SELECTIVE:
        layers_saved = sum(_selective(model, plan, i, mm_dt=mm_dt) * layers for i, _, layers in groups)
        recompute = largest  # the layer's full activations, rebuilt in backward
    else:
        layers_saved = sum(saved[i] * layers for i, _, layers in groups)
        recompute = 0
    head_saved, loss_fwd, loss_bwd = _head(model, plan, dt=dt, amp=amp)
    head_saved += head_weight_copy(model, plan)
    # Backward of one layer holds gradient buffers of its widest intermediates (≈ 3 MLP-wide tensors).
    width = max(model.intermediate_size, model.moe_intermediate_size * max(model.experts_per_token, 1))
    # Liger's SiLU/GELU-mul backward writes the gate and up gradients into its saved a and b: one buffer
    layer_bwd = recompute + (1 if liger_glu(model, plan) else 3) * stream * T * width
    weight_copies = 0
    if amp:
        weight_copies = 2 * (model.params.total - model.params.embedding - model.params.norms)
    return Activations(
        layer_saved=largest,
        layers_saved=layers_saved,
        head_saved=head_saved,
        loss_forward_peak=loss_fwd,
        loss_backward_peak=loss_bwd,
        layer_backward_peak=layer_bwd,
        weight_copies=weight_copies,
        partial=partial,
    )


def _partial_checkpointing(model: ModelSpec, plan: TrainingPlan, saved: dict, residual: int):
    """Layers 0, N, 2N, … checkpointed (they keep their input), the others all their activations.

    Backward reaches the last layer first: if it is checkpointed it is recomputed on top of every
    layer's kept tensors (the usual peak); if not, nothing is recomputed there, and the highest
    checkpointed layer j later recomputes on top of the tensors kept by layers 0..j — returned as
    `partial` with the number of layers above j, whose gradients exist by then.
    """
    n, every = model.num_layers, plan.checkpoint_every
    by_layout = {
        layout: saved[first] for first, layout, _ in model.layer_groups
    }  # `saved` is keyed by a group's first layer
    kept = [residual if i % every == 0 else by_layout[model.layouts[i]] for i in range(n)]
    top = n - 1
    if top % every == 0:
        return sum(kept), by_layout[model.layouts[top]], None
    j = top - top % every
    return sum(kept), 0, (sum(kept[: j + 1]), by_layout[model.layouts[j]], top - j)


def _selective(model: ModelSpec, plan: TrainingPlan, index: int, *, mm_dt: int) -> int:
    """Bytes a layer keeps under selective checkpointing: its input and every matmul/SDPA output.

    memdoc's policy (the one `diagnose` traces with torch's `create_selective_checkpoint_contexts`):
    MUST_SAVE the outputs of mm/addmm/bmm and of SDPA, recompute everything else (norms,
    activations, rotary). The saved outputs are those of every projection — frozen or not — and of
    LoRA's fp32 `lora_A` (rank-wide) and `lora_B` (output-wide) matmuls, plus SDPA's output and
    logsumexp; the checkpoint itself keeps the layer's input. `mm_dt`: the projections' output dtype
    (a 4-bit matmul's is the compute dtype even when bnb then casts it to fp32, `kbit.py`).
    """
    dt = plan.precision.compute_bits // 8
    T = plan.micro_batch * plan.seq_len
    targets = adapted_names(plan)
    kept = stream_bytes(plan, dt) * T * model.hidden_size  # the checkpointed layer's input
    for linear in model.layouts[index].linears:
        if linear.group == "experts":  # routed tokens only: top-k of them per expert matrix
            kept += mm_dt * T * model.experts_per_token * linear.out_features
        else:
            kept += mm_dt * T * linear.out_features
        if targets is not None and is_trained(linear, targets):
            kept += (2 if plan.precision.is_amp else FP32) * T * (plan.lora_rank + linear.out_features)
    kept += dt * T * model.q_dim + FP32 * plan.micro_batch * model.num_heads * plan.seq_len  # SDPA out + lse
    return kept


__all__ = ["Activations", "eager_attention", "estimate_activations", "layer_activations", "liger_glu", "liger_layers"]
