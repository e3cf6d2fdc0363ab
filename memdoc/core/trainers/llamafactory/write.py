"""LLaMA-Factory YAML (`llamafactory-cli train config.yaml`): model, method, dataset, finetuning and
TrainingArguments keys in one file. FSDP runs through `accelerate launch` with the side YAML."""

from __future__ import annotations

from memdoc.core.model.lora import lora_alpha
from memdoc.core.model.plan import Loss, Method, Precision, Shard
from memdoc.core.trainers.base import (
    CHECKPOINTING_KWARGS_NOTE,
    DATASET_PLACEHOLDER,
    FSDP_CONFIG_NAME,
    LIGER_NOTE,
    EmitContext,
    Emitted,
    all_linear,
    precision_note,
    uses_deepspeed,
    uses_fsdp,
    uses_liger,
)
from memdoc.core.trainers.hf.args import distributed_side_files, multinode_note, training_arguments
from memdoc.core.trainers.hf.keys import CHECKPOINTING_KWARGS as CKPT
from memdoc.core.trainers.hf.keys import KEYS as HF
from memdoc.core.trainers.llamafactory.facts import kbit_notes, packing_keys
from memdoc.core.trainers.llamafactory.keys import KEYS
from memdoc.core.trainers.llamafactory.post import LF_TASK_DATASETS, lf_task_keys
from memdoc.core.trainers.templates import chat_template
from memdoc.core.trainers.vision import LF_VISION_ROWS, is_vlm, lf_vision_keys, vision_row_length
from memdoc.errors import PlanError

LF_DATASET_FORMAT = (
    "declared in data/dataset_info.json: alpaca format (instruction/input/output columns) or "
    "sharegpt format (a conversations list), rendered with `template`"
)


def _precision(plan, notes: list[str]) -> dict:
    """LLaMA-Factory precision keys beyond TrainingArguments' bf16/fp16 (model/adapter.py: trainable
    parameters are upcast to fp32 unless pure_bf16; the frozen base is loaded in the compute dtype)."""
    p = plan.precision
    if plan.is_peft:
        if p in (Precision.AMP_BF16, Precision.AMP_FP16):
            notes.append(
                f"precision {p.value}: LLaMA-Factory loads the frozen base in {p.compute_dtype_name}, not float32 "
                "(less memory than billed); the adapters are upcast to fp32"
            )
        elif p is not Precision.FP32:
            notes.append(
                f"{precision_note(plan)} (LLaMA-Factory upcasts trainable parameters to fp32 unless "
                "pure_bf16, which is not set)"
            )
        return {}
    if p is Precision.BF16 and plan.shard is Shard.ZERO3:
        notes.append(
            "precision bf16 (pure): LLaMA-Factory refuses pure_bf16 with DeepSpeed ZeRO-3; "
            "emitted as bf16 AMP (fp32 master weights in DeepSpeed)"
        )
    elif p is Precision.BF16:
        notes.append("precision bf16 (pure): pure_bf16: true keeps weights, gradients and optimizer states in bf16")
        return {KEYS["pure_bf16"]: True}
    elif p is Precision.AMP_BF16:
        notes.append(
            "precision amp-bf16: bf16: true; LLaMA-Factory upcasts the trainable weights to fp32 "
            "(master copy) and autocasts in bf16"
        )
    return {}


def emit_llamafactory(ctx: EmitContext) -> Emitted:
    plan = ctx.plan
    notes: list[str] = []
    placeholders: dict[str, str] = {}
    config: dict = {
        KEYS["model"]: ctx.model_id,
        KEYS["attention"]: KEYS.row("attention").write(plan.attention.value),
        **lf_task_keys(plan, notes, placeholders),
        "do_train": True,
        KEYS["method"]: "full" if plan.method is Method.FULL else "lora",
    }
    if plan.is_peft:
        config[KEYS["lora_rank"]] = plan.lora_rank
        config[KEYS["lora_alpha"]] = lora_alpha(plan)
        config[KEYS["lora_targets"]] = "all" if all_linear(plan) else ",".join(plan.lora_targets)
        config[KEYS["lora_dropout"]] = plan.lora_dropout
    if plan.method is Method.QLORA:
        config.update(quantization_bit=4, quantization_method="bnb", quantization_type="nf4", double_quantization=True)
    config[KEYS["dataset"]] = ctx.dataset or DATASET_PLACEHOLDER
    rows = LF_TASK_DATASETS.get(plan.task, LF_DATASET_FORMAT)
    if plan.has_vision:
        rows = f"{rows}; {LF_VISION_ROWS}"
    comments = {KEYS["dataset"]: rows}
    if not ctx.dataset:
        placeholders[KEYS["dataset"]] = f"a dataset name from your dataset_info.json (--dataset); {rows}"
    template = chat_template(ctx.model_id)
    if template is None:
        config[KEYS["template"]] = "default"
        placeholders[KEYS["template"]] = (
            "no registered chat template known for this model: set the one it was trained with "
            "(llama3, qwen, mistral, …)"
        )
    else:
        config[KEYS["template"]] = template.llamafactory
        comments[KEYS["template"]] = "the family's chat format (LLaMA-Factory's template registry)"
    config[KEYS["seq_len"]] = plan.seq_len
    _vision(ctx, config, notes)
    config.update(packing_keys(plan, notes))
    args = training_arguments(ctx, notes, placeholders)
    checkpointing = args.pop(ctx.key(HF, "activation_checkpointing"))
    _checkpointing_kwargs(args.pop(ctx.key(HF, "activation_checkpointing_kwargs"), None) or {}, notes)
    # LLaMA-Factory checkpoints by default (non-reentrant unless use_reentrant_gc); switch it off explicitly.
    config[KEYS["checkpointing"]] = not checkpointing
    if checkpointing:
        config[KEYS["use_reentrant_gc"]] = False
    config.update(args)
    config.update(_precision(plan, notes))
    if uses_liger(plan):
        config[KEYS["loss"]] = True
        notes.append(LIGER_NOTE)
        if plan.loss is Loss.FUSED_CE:
            notes.append(
                "loss fused-ce: enable_liger_kernel applies every Liger kernel (RMSNorm, RoPE, SwiGLU too); "
                "LLaMA-Factory has no key for the fused cross-entropy alone — bill --loss fused for this config"
            )
    notes.extend(kbit_notes(plan))
    multinode_note(ctx, notes)
    side = distributed_side_files(ctx, notes)
    return Emitted("llamafactory", config, _launch(ctx), notes, side, placeholders, comments)


def _vision(ctx: EmitContext, config: dict, notes: list[str]) -> None:
    """A VLM's keys (`vision.lf_vision_keys`); with images, `cutoff_len` holds the whole row: the template's mm_plugin
    expands each <image> into its tokens before the row is cut (`data/processor/supervised.py`, 0.9.5)."""
    if not is_vlm(ctx.model_type):
        return
    config.update(lf_vision_keys(ctx.plan, ctx.model_type, ctx.model_id, notes))
    if ctx.plan.has_vision:
        config[KEYS["seq_len"]] = vision_row_length(ctx.plan, ctx.image_family or ctx.model_type)


def _checkpointing_kwargs(kwargs: dict, notes: list[str]) -> None:
    """LLaMA-Factory enables checkpointing itself with `use_reentrant` only (`llamafactory/model/model_utils/
    checkpointing.py` `prepare_model_for_training`, 0.9.5): no key reaches transformers' `every_n_layers` (a
    note) or `offload` (refused, naming the formats that have it)."""
    if CHECKPOINTING_KWARGS_NOTE in notes:
        notes.remove(CHECKPOINTING_KWARGS_NOTE)
    if kwargs.get(CKPT["checkpoint_every"]):
        notes.append(
            f"checkpoint every {kwargs['every_n_layers']} layers: LLaMA-Factory has no key for it and checkpoints "
            "every layer (less memory, more compute than billed); --format trl or hf write every_n_layers"
        )
    if kwargs.get(CKPT["activation_offload"]):
        raise PlanError(
            "--activation-offload: LLaMA-Factory has no key for it (it enables checkpointing itself); "
            "nearest formats: --format trl or hf (activation_checkpointing_kwargs offload), axolotl "
            "(activation_offloading: hidden_states)"
        )


def _launch(ctx: EmitContext) -> str:
    """The command that runs the config: accelerate for FSDP, torchrun for DeepSpeed or several GPUs."""
    plan = ctx.plan
    if uses_fsdp(plan):
        return (
            f"accelerate launch --config_file {ctx.side_arg(FSDP_CONFIG_NAME)} -m "
            f"llamafactory.launcher {ctx.config_arg}"
        )
    if uses_deepspeed(plan) or ctx.multi_gpu:
        return (
            f"FORCE_TORCHRUN=1 NNODES={plan.nodes} NPROC_PER_NODE={plan.gpus_per_node} "
            f"llamafactory-cli train {ctx.config_arg}"
        )
    return f"llamafactory-cli train {ctx.config_arg}"
