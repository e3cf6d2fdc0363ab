"""HF `TrainingArguments` YAML (for a script that calls `HfArgumentParser(TrainingArguments).parse_yaml_file`).

TrainingArguments has no keys for how the model is loaded (dtype, attention kernel, 4-bit
quantisation) or for LoRA: those become notes with the exact `from_pretrained` / peft arguments.
"""

from __future__ import annotations

from memdoc.core.model.lora import lora_alpha
from memdoc.core.model.plan import Loss, Method
from memdoc.core.trainers.base import (
    FSDP_CONFIG_NAME,
    LIGER_CE_ONLY_CONFIG,
    LIGER_NOTE,
    TRAIN_SCRIPT_PLACEHOLDER,
    EmitContext,
    Emitted,
    all_linear,
    load_dtype,
    precision_note,
    uses_deepspeed,
    uses_fsdp,
    uses_liger,
)
from memdoc.core.trainers.hf.args import distributed_side_files, multinode_note, training_arguments
from memdoc.core.trainers.hf.facts import kbit_prepare_clause, packing_keys
from memdoc.core.trainers.hf.keys import KEYS
from memdoc.core.trainers.vision import hf_vision_keys, is_vlm
from memdoc.errors import PlanError

FROM_PRETRAINED_DTYPE_SINCE = "4.56.0"
"""`from_pretrained(dtype=…)` from transformers 4.56.0, where `torch_dtype` became a deprecated alias (4.56.0
modeling_utils.py:2408-2410, "`torch_dtype` is deprecated! Use `dtype` instead!"); before it, `torch_dtype`."""


def _dtype_argument(ctx: EmitContext) -> str:
    """`from_pretrained`'s dtype argument as the stack's transformers names it."""
    old = ctx.stack is not None and not ctx.stack.at_least("transformers", FROM_PRETRAINED_DTYPE_SINCE)
    return "torch_dtype" if old else "dtype"


def emit_hf(ctx: EmitContext) -> Emitted:
    plan = ctx.plan
    notes: list[str] = []
    placeholders: dict[str, str] = {}
    if plan.task.value != "sft":
        raise PlanError(
            f"--task {plan.task.value} --format hf: HF TrainingArguments train with the language-modelling loss only "
            "(no reference model, preference loss or generation)",
            hint="use --format trl (trl dpo/kto/reward/grpo/rloo), axolotl (rl: …) or llamafactory (stage: …)",
        )
    packing_keys(plan, notes)  # refuses --packing: TrainingArguments have no key
    config = training_arguments(ctx, notes, placeholders)
    load = [f"{_dtype_argument(ctx)}=torch.{load_dtype(plan)}", f'attn_implementation="{plan.attention.value}"']
    if plan.method is Method.QLORA:
        load.append(
            'quantization_config=BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", '
            f"bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=torch.{plan.precision.compute_dtype_name}"
            + (f", bnb_4bit_quant_storage=torch.{plan.precision.compute_dtype_name}" if uses_fsdp(plan) else "")
            + ")"
        )
    auto = "AutoModelForImageTextToText" if is_vlm(ctx.model_type) else "AutoModelForCausalLM"
    notes.append(
        f"TrainingArguments cannot load the model: in your script use "
        f'{auto}.from_pretrained("{ctx.model_id}", {", ".join(load)}) — {precision_note(plan)}'
    )
    if is_vlm(ctx.model_type) and plan.has_vision:
        config.update(hf_vision_keys(plan, ctx.image_family or ctx.model_type, notes))
    if plan.is_peft:
        targets = '"all-linear"' if all_linear(plan) else repr(list(plan.lora_targets))
        notes.append(
            "TrainingArguments has no LoRA keys: wrap the model with peft get_peft_model(model, "
            f"LoraConfig(r={plan.lora_rank}, "
            f"lora_alpha={lora_alpha(plan)}, lora_dropout={plan.lora_dropout}, "
            f'target_modules={targets}, task_type="CAUSAL_LM"))' + kbit_prepare_clause(plan)
        )
    notes.append(
        f"sequence length {plan.seq_len}: TrainingArguments has no dataset or sequence-length "
        "key; tokenize your dataset "
        f"to input_ids (+ labels) truncated/packed to {plan.seq_len} tokens and pass it as Trainer(train_dataset=...)"
    )
    if uses_liger(plan):
        config[KEYS["loss"]] = True  # all of Liger's kernels for the model: RMSNorm, RoPE, SwiGLU/GeGLU, fused loss
        if plan.loss is Loss.FUSED_CE:
            config[KEYS["liger_kernel_config"]] = dict(LIGER_CE_ONLY_CONFIG)
        notes.append(LIGER_NOTE)
    multinode_note(ctx, notes)
    side = distributed_side_files(ctx, notes)
    script = f"{TRAIN_SCRIPT_PLACEHOLDER} {ctx.config_arg}"
    if uses_deepspeed(plan):
        launch = f"deepspeed --num_gpus {plan.gpus_per_node} {script}"
    elif uses_fsdp(plan):
        launch = f"accelerate launch --config_file {ctx.side_arg(FSDP_CONFIG_NAME)} {script}"
    elif ctx.multi_gpu:
        launch = f"accelerate launch --num_processes {plan.world_size} {script}"
    else:
        launch = f"python {script}"
    return Emitted("hf", config, launch, notes, side, placeholders)
