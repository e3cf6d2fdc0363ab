"""Build the model and optimizer of a `TrainingPlan` from an HF config dict (torch, transformers, peft).

Shared by the fake-tensor trace (`memdoc.probe.tracer`) and the real CUDA step
(`memdoc.probe.cuda_step`); how each knob is realised is described in the tracer's docstring.
"""

from __future__ import annotations

import functools

from memdoc.core.model.lora import lora_alpha, peft_target_modules
from memdoc.core.model.plan import Attention, Checkpointing, Method, Optimizer, TrainingPlan
from memdoc.errors import ConfigError
from memdoc.probe.vlm_freeze import freeze_parts


def torch_dtype(name: str):
    """The torch dtype named `name` ("bfloat16", "float32", …)."""
    import torch

    return getattr(torch, name)


def _hf_config(config: dict, plan: TrainingPlan, layers: int | None):
    from transformers import AutoConfig

    data = dict(config)
    model_type = data.pop("model_type", None)
    if not model_type:
        raise ConfigError("config.json has no model_type")
    for key in ("auto_map", "transformers_version", "_name_or_path", "quantization_config"):
        data.pop(key, None)
    try:
        conf = AutoConfig.for_model(model_type, **data)
    except Exception as exc:  # transformers raises many types for configs it cannot read
        raise _cannot_build(model_type, exc) from None
    text = conf.get_text_config()  # a VLM's language model (the config itself for a text model)
    if layers is not None:
        text.num_hidden_layers = layers
        if isinstance(getattr(text, "layer_types", None), list):
            text.layer_types = text.layer_types[:layers]
    conf.use_cache = text.use_cache = False
    # dropout stays as configured: its masks are part of what the real step keeps
    return conf


def _cannot_build(model_type, exc: BaseException) -> ConfigError:
    """One line for a config transformers cannot build a model from (its messages run to pages)."""
    text = " ".join(str(exc).split())
    if len(text) > 200:
        text = text[:199] + "…"
    return ConfigError(
        f"transformers cannot build a {model_type!r} model from this config: {type(exc).__name__}: {text}"
    )


def _selective_context_fn():
    import torch
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    aten = torch.ops.aten
    save = {
        aten.mm.default,
        aten.addmm.default,
        aten.bmm.default,
        aten.baddbmm.default,
        aten._scaled_dot_product_flash_attention.default,
        aten._scaled_dot_product_efficient_attention.default,
        aten._scaled_dot_product_flash_attention_for_cpu.default,
        aten._scaled_dot_product_cudnn_attention.default,
    }

    def policy(ctx, op, *args, **kwargs):
        return CheckpointPolicy.MUST_SAVE if op in save else CheckpointPolicy.PREFER_RECOMPUTE

    return functools.partial(create_selective_checkpoint_contexts, policy)


def _sac_op_context_fn():
    """torchtitan's op-level SAC policy (`core/billing/activations/sac_op.py`): save the SDPA outputs and every
    second `aten.mm` of a layer (the 1st, 3rd, …), a fresh count per layer; recompute the rest."""
    import torch
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    aten = torch.ops.aten
    save = {
        aten.mm.default,
        aten._scaled_dot_product_flash_attention.default,
        aten._scaled_dot_product_efficient_attention.default,
        aten._scaled_dot_product_flash_attention_for_cpu.default,
        aten._scaled_dot_product_cudnn_attention.default,
    }

    def context():
        count = {"forward": 0, "recompute": 0}

        def policy(ctx, op, *args, **kwargs):
            mode = "recompute" if ctx.is_recompute else "forward"
            if op == aten.mm.default:
                count[mode] += 1
            keep = op in save and not (op == aten.mm.default and count[mode] % 2 == 0)
            return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

        return create_selective_checkpoint_contexts(policy)

    return context


def build_model(config: dict, plan: TrainingPlan, layers: int | None = None, notes: list[str] | None = None):
    """The model for `plan`, built with fake (CPU) tensors. Call inside FakeTensorMode.

    Architectures without an SDPA implementation in transformers (e.g. Gemma-2's logit
    softcapping) fall back to eager attention, with a note."""
    conf = _hf_config(config, plan, layers)
    model = _from_config(conf, config.get("model_type"), plan, notes)
    model.tie_weights()
    model.train()
    if plan.checkpointing is not Checkpointing.NONE:
        _enable_checkpointing(model, plan)
    if not plan.is_peft and notes is not None and (frozen := freeze_parts(model, plan)):
        notes.append(f"frozen (no gradients, no optimizer states): {', '.join(frozen)}")
    if plan.is_peft:
        model = _apply_lora(model, plan)
    return model


def _storage_dtype(plan: TrainingPlan) -> str:
    """The dtype the weights are stored in: the compute dtype of a LoRA base, fp32 under amp, else the plan's."""
    if plan.is_peft or not plan.precision.is_amp:
        return plan.precision.compute_dtype_name if plan.is_peft else plan.precision.torch_dtype_name
    return "float32"


def _from_config(conf, model_type, plan: TrainingPlan, notes: list[str] | None):
    """`AutoModelForCausalLM.from_config` (a VLM: `AutoModelForImageTextToText`, its vision tower and projector
    with it) without initialising weights (packed plans: `probe/varlen.py`'s
    flash-attention varlen emulation); eager attention (noted) when the architecture has no SDPA, and one
    ConfigError line when transformers' model code refuses the config."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText
    from transformers.initialization import no_init_weights

    from memdoc.core.model.vision.registry import VLMS

    auto = AutoModelForImageTextToText if model_type in VLMS else AutoModelForCausalLM
    dtype = torch_dtype(_storage_dtype(plan))
    attn = "eager" if plan.attention is Attention.EAGER else "sdpa"
    if plan.packing:  # flash-attention 2 varlen, emulated per document (`probe/varlen.py`)
        from memdoc.probe.varlen import VARLEN, register_varlen

        register_varlen()
        attn = VARLEN
    with no_init_weights():
        try:
            try:
                return auto.from_config(conf, dtype=dtype, attn_implementation=attn)
            except ValueError as exc:
                if attn != "sdpa" or "attention implementation" not in str(exc):
                    raise
                model = auto.from_config(conf, dtype=dtype, attn_implementation="eager")
                if notes is not None:
                    notes.append(
                        f"{type(model).__name__} has no SDPA attention in transformers: traced eager attention"
                    )
                return model
        except (ValueError, KeyError, TypeError, AttributeError, IndexError, ZeroDivisionError, OverflowError) as exc:
            # the config passed memdoc's checks but transformers' model code refuses it
            raise _cannot_build(model_type, exc) from None


def _enable_checkpointing(model, plan: TrainingPlan) -> None:
    """HF gradient checkpointing (non-reentrant; selective saves matmul/attention outputs), on every
    decoder layer or, with `checkpoint_every` N > 1, on layers 0, N, 2N, … only."""
    kwargs = {"use_reentrant": False}
    if plan.checkpointing is Checkpointing.SELECTIVE:
        kwargs["context_fn"] = _selective_context_fn()
    elif plan.checkpointing is Checkpointing.SAC_OP:
        kwargs["context_fn"] = _sac_op_context_fn()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    if plan.checkpoint_every > 1:  # partial checkpointing: layers 0, N, 2N, … only
        from transformers.modeling_layers import GradientCheckpointingLayer

        decoder = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
        for i, layer in enumerate(decoder):
            layer.gradient_checkpointing = i % plan.checkpoint_every == 0
    if plan.activation_offload and plan.checkpointing is Checkpointing.FULL:
        from memdoc.probe.offload import HostOffload, offload_checkpoints

        model.memdoc_host_offload = HostOffload()  # read by the tracer for its note
        offload_checkpoints(model, model.memdoc_host_offload)


def _apply_lora(model, plan: TrainingPlan):
    """The peft LoRA model of the plan; for QLoRA its linears emulated as NF4 (and the rest upcast to fp32)."""
    from peft import LoraConfig, get_peft_model

    from memdoc.probe.emulation import quantize_linears_nf4, upcast_non_quantised
    from memdoc.probe.memtrack import plain_module_to

    lora = LoraConfig(
        r=plan.lora_rank,
        lora_alpha=lora_alpha(plan),
        target_modules=_lora_targets(model, plan),
        lora_dropout=plan.lora_dropout,
        task_type="CAUSAL_LM",
    )
    with plain_module_to():
        try:
            model = get_peft_model(model, lora)
        except ValueError as exc:
            raise ConfigError(f"LoRA targets {plan.lora_targets}: {exc}") from None
    if plan.method is Method.QLORA:
        quantize_linears_nf4(model, torch_dtype(plan.precision.compute_dtype_name))
        if plan.kbit_upcast:
            upcast_non_quantised(model)
    return model


def _lora_targets(model, plan: TrainingPlan) -> str | list[str]:
    """peft's `target_modules`: the plan's names, or in a VLM with a trained or frozen tower/projector the paths of
    the linears those policies adapt (`probe/vlm_freeze.py`)."""
    from memdoc.probe.vlm_freeze import part_targets, policies

    parts = policies(plan)
    return part_targets(model, peft_target_modules(plan), parts["vision_tower"], parts["projector"])


def build_optimizer(model, plan: TrainingPlan):
    import torch

    from memdoc.probe.emulation import Adam8bitStates, Lion

    params = [p for p in model.parameters() if p.requires_grad]
    opt = plan.optimizer
    if opt is Optimizer.ADAMW_FOREACH:
        return torch.optim.AdamW(params, lr=1e-4, foreach=True)
    if opt is Optimizer.ADAMW_FUSED:
        return torch.optim.AdamW(params, lr=1e-4, fused=True)
    if opt in (Optimizer.ADAMW_8BIT, Optimizer.PAGED_ADAMW_8BIT):
        return Adam8bitStates(params)
    if opt is Optimizer.SGD:
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9, foreach=True)
    if opt is Optimizer.ADAFACTOR:
        from transformers.optimization import Adafactor

        # relative_step/scale_parameter read tensor values (.item()), impossible on fake tensors;
        # they change the learning rate, not the memory.
        return Adafactor(params, lr=1e-3, scale_parameter=False, relative_step=False, warmup_init=False)
    if opt is Optimizer.LION:
        return Lion(params)
    raise ConfigError(f"optimizer {opt.value} is not traceable")  # pragma: no cover


def _storage_bytes(tensors) -> int:
    seen, total = set(), 0
    for t in tensors:
        t = getattr(t, "_local_tensor", t)  # DTensor: this rank's shard
        st = t.untyped_storage()
        key = id(st) if not hasattr(st, "_cdata") else st._cdata
        if key not in seen:
            seen.add(key)
            total += st.nbytes()
    return total


def optimizer_state_bytes(opt) -> int:
    import torch

    return _storage_bytes(v for s in opt.state.values() for v in s.values() if isinstance(v, torch.Tensor))


__all__ = ["build_model", "build_optimizer", "optimizer_state_bytes", "torch_dtype"]
