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

Modules, by concern: `saved` (the per-layer accumulator and the RMSNorm rule), `kernels` (eager
attention, Liger), `attention`, `mlp`, `adapters` (LoRA), `layernorm_layer` (GPT-2/NeoX/Falcon/
Phi-2/BERT layers), `layer` (one Llama-like layer assembled; selective checkpointing), `head`
(final norm, LM head, loss) and `step` (all layers with checkpointing, plus the head).
"""

from memdoc.core.billing.activations.head import fused_chunk_tokens
from memdoc.core.billing.activations.kernels import eager_attention, liger_glu, liger_layers
from memdoc.core.billing.activations.layer import layer_activations
from memdoc.core.billing.activations.step import Activations, estimate_activations

__all__ = [
    "Activations",
    "eager_attention",
    "estimate_activations",
    "fused_chunk_tokens",
    "layer_activations",
    "liger_glu",
    "liger_layers",
]
