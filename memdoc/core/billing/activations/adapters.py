"""What LoRA adapters save (peft `lora.Linear`, `lora.bnb.Linear4bit`)."""

from __future__ import annotations

from memdoc.core.billing.activations.mlp import block_of
from memdoc.core.billing.activations.saved import FP32, SavedTensors
from memdoc.core.model.families import Family, QkvLayout
from memdoc.core.model.lora import is_trained
from memdoc.core.model.params import Linear
from memdoc.core.model.plan import Method, Precision, TrainingPlan


def lora_saved(layer: SavedTensors, plan: TrainingPlan, linears: list[Linear], targets, family: Family) -> None:
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
    output SDPA already saves (`shared_input`); with dropout each adapter keeps its noise and
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
            shared = shared_input(linear, family)
            own = 0 if shared in seen or shared == "sdpa_output" else width
            seen.add(shared)
            per_input = 2 * width if plan.lora_dropout else own
            layer.add(f"lora.{linear.name}", per_input * T * linear.in_features + width * T * plan.lora_rank)
        else:
            per_input = matmul_bytes + (FP32 if plan.lora_dropout else 0)
            layer.add(f"lora.{linear.name}", per_input * T * linear.in_features + matmul_bytes * T * plan.lora_rank)


def shared_input(linear: Linear, family: Family) -> str:
    """Which tensor a linear reads: the attention input, the MLP input of its block, SDPA's output, or its own.

    o_proj reads the tensor SDPA saved, except after a fused q/k/v projection (Phi-3), whose SDPA
    output is copied first (`attention.attention_saved`).
    """
    short = linear.name.split(".")[-1]
    if linear.group == "attention" and short not in ("o_proj", "dense"):
        return "attention_input"
    if short == "o_proj" and family.attention is not QkvLayout.FUSED:
        return "sdpa_output"
    if short in ("gate_proj", "up_proj"):
        return "mlp_input:" + block_of(linear)
    return linear.name


__all__ = ["lora_saved", "shared_input"]
