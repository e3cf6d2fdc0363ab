"""QLoRA as trainers prepare it: which parameters stay 16-bit, and the fp32 upcast of `kbit_upcast`.

bitsandbytes quantises the decoder's `nn.Linear` weights only (transformers
`integrations/bitsandbytes.py: replace_with_bnb_linear`); embeddings, norms, the LM head, the
linears' biases (a plain `Parameter` of `Linear4bit`), routers and — since transformers 5 —
fused MoE experts keep the load dtype (`non_quantised_params`). Under transformers 4.x
(`--moe-experts linear`) each expert is a module of `nn.Linear`s, quantised like the others;
routers are still counted in the load dtype (4.x Mixtral's `gate` is an `nn.Linear` too, 0.002% of
its parameters; DeepSeek's 4.x `MoEGate` is a plain parameter).

peft's `prepare_model_for_kbit_training` (src/peft/utils/other.py) then casts every one of them to
fp32: `if ((param.dtype == torch.float16) or (param.dtype == torch.bfloat16)) and
param.__class__.__name__ != "Params4bit": param.data = param.data.to(torch.float32)` — the
parentheses make the Params4bit test apply to both dtypes, so a 4-bit weight stored as bf16
(`bnb_4bit_quant_storage`, FSDP) is never cast. It runs before `get_peft_model`, so LoRA adapters
are not touched (peft creates them in fp32 anyway). Who calls it:

* the HF-format recipe (peft's QLoRA guide, memdoc's `emit hf` note with `--kbit-upcast`): yes;
* TRL `SFTTrainer` ≥ 0.26 (trl/trainer/sft_trainer.py, "Clean up model preparation" #4577,
  Dec 2025): no — it calls `get_peft_model` directly; 0.20–0.25 called it via
  `trl/models/utils.py: prepare_peft_model`;
* Axolotl (src/axolotl/loaders/model.py: `_prepare_model_for_quantization` calls it unless FSDP /
  ZeRO-3; `_configure_embedding_dtypes` then casts every module named `*norm*`, `embed_tokens` and
  `lm_head` back to `torch_dtype` for any adapter): the upcast is undone;
* LLaMA-Factory (src/llamafactory/model/model_utils/checkpointing.py: `prepare_model_for_training`):
  never calls it; `upcast_layernorm` (default False) would upcast the 1-D norm weights only.

Hence `kbit_upcast` defaults to off. With it on, the fp32 parameters change the activations too
(fake-tensor traces, `tests/test_kbit.py`): the embedding returns fp32, so the residual stream,
the norms' outputs (`LlamaRMSNorm`: `weight * x.to(input_dtype)`, fp32 weight) and every 4-bit
linear's output (bnb `Linear4bit.forward`: `matmul_4bit(x.to(compute_dtype)).to(inp_dtype)`) are
fp32:

* without autocast (`--precision bf16`), every tensor between the 4-bit matmuls is fp32 — exactly
  what an fp32 LoRA step saves (`activation_plan`), fp32 logits included;
* under autocast (`--precision amp-bf16`, HF `bf16: true`) SDPA and every `F.linear` cast their
  inputs back to 16 bit, so attention and LoRA save what they saved before; what stays fp32 is
  the MLP's gate/up outputs and activation (`stream_bytes`: 4) and the residual kept by a
  checkpointed layer; and autocast's 16-bit copy of the frozen fp32 LM head (V × h) is saved by
  the head's matmul until backward reaches it (`head_weight_copy`).
"""

from __future__ import annotations

from memdoc.core.billing.vision_parts import vision_linear_params
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.plan import Method, MoeExperts, Precision, TrainingPlan

FP32 = 4


def linear_experts(plan: TrainingPlan) -> bool:
    """Are the plan's MoE experts `nn.Linear` modules (transformers 4.x, `--moe-experts linear`)?"""
    return plan.moe_experts is MoeExperts.LINEAR


def _quantised_linears(model: ModelSpec, experts: bool):
    """(layers, linear) for every linear bitsandbytes replaces: the decoder's `nn.Linear` modules —
    not routers, nor transformers 5's fused experts (3-D parameters, not `nn.Linear`); with `experts`
    (transformers 4.x), the routed experts too."""
    skipped = ("router",) if experts else ("experts", "router")
    for _, layout, layers in model.layer_groups:
        for linear in layout.linears:
            if linear.group not in skipped:
                yield layers, linear


def quantised_params(model: ModelSpec, *, experts: bool = False) -> int:
    """Parameters bitsandbytes stores in 4 (or 8) bit: those linears' weights — not their biases
    (`Linear4bit.bias` is a plain 16-bit `Parameter`); `experts`: the routed experts are `nn.Linear`. A VLM's vision
    tower and projector linears too: transformers 5.24 skips only tied weights, the last parameter's module and the
    output embedding (`quantizers/base.py` `get_keys_to_not_convert`)."""
    return vision_linear_params(model) + sum(
        layers * linear.copies * linear.in_features * linear.out_features
        for layers, linear in _quantised_linears(model, experts)
    )


def quantised_rows(model: ModelSpec) -> int:
    """Output rows of the quantised weights (LLM.int8 keeps one fp32 scale per row)."""
    return sum(layers * linear.copies * linear.out_features for layers, linear in _quantised_linears(model, False))


def non_quantised_params(model: ModelSpec, *, experts: bool = False) -> int:
    """Parameters a 4-bit model keeps in the load dtype: embeddings, LM head (unless tied), norms,
    routers, fused experts (what `prepare_model_for_kbit_training` upcasts)."""
    return model.params.total - quantised_params(model, experts=experts)


def upcasts(plan: TrainingPlan) -> bool:
    """Does the plan run peft's fp32 upcast (`--kbit-upcast`, QLoRA only)?"""
    return plan.method is Method.QLORA and plan.kbit_upcast


def upcast_weight_bytes(model: ModelSpec, plan: TrainingPlan) -> int:
    """Extra weight bytes of the upcast: each non-quantised parameter grows from the compute dtype to fp32."""
    if not upcasts(plan):
        return 0
    return non_quantised_params(model, experts=linear_experts(plan)) * (FP32 - plan.precision.compute_bits // 8)


def activation_plan(plan: TrainingPlan) -> TrainingPlan:
    """The plan whose activations the step saves: without autocast the upcast makes every tensor
    between the 4-bit matmuls fp32, and an fp32 LoRA plan saves exactly those (frozen base, fp32
    adapters, fp32 logits); otherwise the plan itself."""
    if upcasts(plan) and not plan.precision.is_amp:
        return plan.replace(method=Method.LORA, precision=Precision.FP32, kbit_upcast=False)
    return plan


def stream_bytes(plan: TrainingPlan, dt: int) -> int:
    """Bytes per element of the residual stream and the MLP's intermediates under autocast: 4 with
    the upcast (fp32 embedding, norms, 4-bit outputs cast back to fp32), else `dt`."""
    return FP32 if upcasts(plan) and plan.precision.is_amp else dt


def head_weight_copy(model: ModelSpec, plan: TrainingPlan) -> int:
    """Autocast's 16-bit copy of the upcast LM head (tied or not), saved by its matmul for the
    gradient of its input: vocab × hidden × 2 bytes, freed when backward passes the head."""
    if not (upcasts(plan) and plan.precision.is_amp):
        return 0
    return 2 * model.vocab_size * model.hidden_size


__all__ = [
    "activation_plan",
    "head_weight_copy",
    "linear_experts",
    "non_quantised_params",
    "quantised_params",
    "quantised_rows",
    "stream_bytes",
    "upcast_weight_bytes",
    "upcasts",
]
