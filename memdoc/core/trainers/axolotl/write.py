"""Axolotl YAML (`axolotl train config.yaml`). FSDP lives in the config itself (fsdp_config);
ZeRO stages point to the DeepSpeed JSON written next to it."""

from __future__ import annotations

from memdoc.core.model.lora import lora_alpha
from memdoc.core.model.plan import Loss, Method, Offload, OffloadTarget, Optimizer, Precision
from memdoc.core.trainers.axolotl.facts import kbit_notes, packing_keys
from memdoc.core.trainers.axolotl.keys import KEYS
from memdoc.core.trainers.axolotl.post import axolotl_dataset, axolotl_schedule, axolotl_task_keys
from memdoc.core.trainers.base import (
    DATASET_PLACEHOLDER,
    DS_CONFIG_NAME,
    LIGER_NOTE,
    LR_SCHEDULER,
    OUTPUT_DIR_PLACEHOLDER,
    SGD_OPTIM_ARGS,
    WARMUP_RATIO,
    EmitContext,
    Emitted,
    SideFile,
    all_linear,
    checkpointing_keys,
    default_learning_rate,
    precision_note,
    uses_deepspeed,
    uses_fsdp,
    uses_liger,
)
from memdoc.core.trainers.deepspeed.write import deepspeed_config
from memdoc.core.trainers.hf.args import multinode_note
from memdoc.core.trainers.hf.keys import CHECKPOINTING_KWARGS as CKPT
from memdoc.core.trainers.hf.keys import KEYS as HF
from memdoc.core.trainers.templates import chat_template
from memdoc.core.trainers.vision import AXOLOTL_VISION_ROWS, axolotl_vision_keys, is_vlm, vision_row_length

AXOLOTL_DATASET_FORMAT = (
    'rows {"messages": [{"role": "user", "content": …}, {"role": "assistant", "content": …}]}, '
    "rendered with chat_template"
)

LIGER_PLUGIN = "axolotl.integrations.liger.LigerPlugin"


def _precision(plan, notes: list[str]) -> dict:
    p = plan.precision
    if plan.is_peft and p in (Precision.BF16, Precision.FP16):
        notes.append(precision_note(plan))
        return (
            {KEYS["bf16"]: True, KEYS["fp16"]: False}
            if p is Precision.BF16
            else {KEYS["bf16"]: False, KEYS["fp16"]: True}
        )
    if p is Precision.BF16:
        notes.append(
            "precision bf16 (pure): Axolotl loads the weights in bfloat16 when bf16 is set; "
            "bfloat16: true marks no fp32 master copy"
        )
        return {KEYS["bf16"]: True, KEYS["bfloat16"]: True, KEYS["fp16"]: False}
    if p is Precision.AMP_BF16:
        notes.append(
            "precision amp-bf16: Axolotl has no key for fp32 master weights — with bf16: true it loads the weights in "
            "bfloat16 (trainable LoRA weights are upcast to fp32 by peft), so a full fine-tune runs as pure bf16 "
            "and uses less memory than billed"
        )
        return {KEYS["bf16"]: True, KEYS["fp16"]: False}
    if p is Precision.FP16:
        return {KEYS["bf16"]: False, KEYS["fp16"]: True, KEYS["float16"]: True}
    if p is Precision.AMP_FP16:
        notes.append("precision amp-fp16: Axolotl loads the weights in float16 when fp16 is set (no fp32 master copy)")
        return {KEYS["bf16"]: False, KEYS["fp16"]: True}
    return {KEYS["bf16"]: False, KEYS["fp16"]: False, KEYS["float32"]: True}


def _fsdp(plan, notes: list[str]) -> dict:
    offload = plan.offload is not Offload.NONE
    if plan.offload is Offload.OPTIMIZER:
        notes.append(
            "FSDP cannot offload only the optimizer: offload_params offloads weights, gradients "
            "and optimizer states (less GPU memory than billed, slower)"
        )
    if offload and plan.offload_to is OffloadTarget.NVME:
        notes.append("FSDP offloads to CPU memory only: --offload-to nvme emitted as cpu")
    if plan.method is Method.QLORA and plan.low_mem_load:
        notes.append(
            "cpu_ram_efficient_loading: false: Axolotl refuses rank-0-only loading with 4-bit FSDP, so every rank "
            "reads the checkpoint (bill it with --no-low-mem-load)"
        )
    return {
        KEYS["fsdp_version"]: 2,
        KEYS["fsdp_config"]: {
            "offload_params": offload,
            # FSDP2 + bitsandbytes 4-bit deadlocks with rank-0-only loading (Axolotl refuses it).
            "cpu_ram_efficient_loading": plan.method is not Method.QLORA and plan.low_mem_load,
            "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "state_dict_type": "FULL_STATE_DICT" if plan.save_gather else "SHARDED_STATE_DICT",
            "reshard_after_forward": True,
            HF["activation_checkpointing"]: False,
        },
    }


def _adapter_keys(plan) -> dict:
    """LoRA/QLoRA: the adapter, its 4-bit base and its rank, alpha, dropout and targets."""
    config: dict = {}
    if plan.method is Method.QLORA:
        config.update(
            adapter="qlora",
            load_in_4bit=True,
            bnb_config_kwargs={"bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": True},
        )
    elif plan.method is Method.LORA:
        config[KEYS["method"]] = "lora"
    if plan.is_peft:
        config[KEYS["lora_rank"]] = plan.lora_rank
        config[KEYS["lora_alpha"]] = lora_alpha(plan)
        config[KEYS["lora_dropout"]] = plan.lora_dropout
        if all_linear(plan):
            config[KEYS["lora_target_linear"]] = True
        else:
            config[KEYS["lora_targets"]] = list(plan.lora_targets)
    return config


def _chat_template(ctx: EmitContext, config: dict, notes: list[str]) -> dict[str, str]:
    """The chat_template key (the family's, else the tokenizer's own); returns its comment."""
    template = chat_template(ctx.model_id)
    config["chat_template"] = template.axolotl if template else "tokenizer_default"
    if template is None or template.axolotl == "tokenizer_default":
        notes.append(
            "chat_template: tokenizer_default uses the tokenizer's own chat template "
            "(instruct/chat checkpoints ship one; for a base checkpoint without one, set "
            "chat_template)"
        )
    return {
        "chat_template": "the family's chat format (Axolotl's ChatTemplate)"
        if template
        else "the chat template in the model's tokenizer_config.json"
    }


def _data_keys(ctx: EmitContext, config: dict, placeholders: dict[str, str], comments: dict[str, str]) -> None:
    """The dataset and the output directory, or placeholders for them."""
    entry, rows = axolotl_dataset(ctx.plan) or (
        {"type": "chat_template", "field_messages": "messages"},
        AXOLOTL_DATASET_FORMAT,
    )
    config[KEYS["dataset"]] = [{"path": ctx.dataset or DATASET_PLACEHOLDER, **entry}]
    comments[KEYS["dataset"]] = rows
    if not ctx.dataset:
        placeholders[KEYS["dataset"]] = f"set path (--dataset); {rows}"
    config[HF["output_dir"]] = ctx.output_dir or OUTPUT_DIR_PLACEHOLDER
    if not ctx.output_dir:
        placeholders[HF["output_dir"]] = "where checkpoints go (--output-dir)"


def _batch_and_optimizer_keys(plan) -> dict:
    """Sequence length, batch, accumulation, schedule and optimizer."""
    config = {
        KEYS["seq_len"]: plan.seq_len,
        KEYS["packing"]: False,
        KEYS["micro_batch"]: plan.micro_batch,
        KEYS["grad_accum"]: plan.grad_accum,
        "num_epochs": 1,
        HF["learning_rate"]: default_learning_rate(plan),
        "lr_scheduler": LR_SCHEDULER,
        "warmup_ratio": WARMUP_RATIO,
        KEYS["optimizer"]: HF.row(KEYS["optimizer"]).write(plan.optimizer.value),
    }
    if plan.optimizer is Optimizer.SGD:
        config[KEYS["optim_args"]] = SGD_OPTIM_ARGS
    return config


def _liger_keys(plan, notes: list[str]) -> dict:
    """The Liger plugin and its fused linear cross-entropy (with every kernel under --loss fused)."""
    if not uses_liger(plan):
        return {}
    config: dict = {KEYS["loss"]: [LIGER_PLUGIN]}
    if plan.loss is Loss.FUSED:  # what use_liger_kernel=True applies: every kernel the model has
        config.update(liger_rope=True, liger_rms_norm=True, liger_glu_activation=True)
    config[KEYS["liger_flce"]] = True
    notes.append(LIGER_NOTE)
    return config


def _sharding(ctx: EmitContext, config: dict, notes: list[str]) -> list[SideFile]:
    """ZeRO: the DeepSpeed JSON beside the config; FSDP: its keys in the config. Returns the side files."""
    if uses_deepspeed(ctx.plan):
        config[KEYS["shard"]] = ctx.side_path(DS_CONFIG_NAME)
        return [SideFile(DS_CONFIG_NAME, deepspeed_config(ctx, notes), "json")]
    if uses_fsdp(ctx.plan):
        config.update(_fsdp(ctx.plan, notes))
    return []


def _activation_offload(config: dict) -> None:
    """`--activation-offload` as Axolotl's own key: `activation_offloading: hidden_states` offloads the checkpointed
    layers' inputs, non-reentrant, through transformers' switch (`axolotl/core/builders/base.py`
    `_configure_gradient_checkpointing`, 0.19), instead of the `offload` kwarg."""
    kwargs = config.get(KEYS["checkpointing_kwargs"]) or {}
    if kwargs.pop(CKPT["activation_offload"], False):
        config[KEYS["activation_offload"]] = "hidden_states"


def _vision(ctx: EmitContext, config: dict, notes: list[str], comments: dict[str, str]) -> None:
    """A VLM's multimodal keys (`vision.axolotl_vision_keys`); with images, the rows they read and the billed row as
    sequence_len. Axolotl 0.19's multimodal collator pads and never truncates (`utils/collators/mm_chat.py`
    `MultiModalChatDataCollator.process_rows`): a note says longer rows run longer than billed."""
    config.update(axolotl_vision_keys(ctx.plan, notes))
    if ctx.plan.has_vision:
        length = vision_row_length(ctx.plan, ctx.image_family or ctx.model_type)
        config[KEYS["seq_len"]] = length
        comments[KEYS["dataset"]] = AXOLOTL_VISION_ROWS
        notes.append(
            f"sequence_len {length} = the billed row (text + image tokens); Axolotl's multimodal collator does not "
            "truncate, so keep each row's text within the planned length"
        )


def emit_axolotl(ctx: EmitContext) -> Emitted:
    plan = ctx.plan
    notes: list[str] = []
    placeholders: dict[str, str] = {}
    config: dict = {KEYS["model"]: ctx.model_id, **axolotl_task_keys(plan, notes), **_adapter_keys(plan)}
    comments = _chat_template(ctx, config, notes)
    _data_keys(ctx, config, placeholders, comments)
    config.update(_batch_and_optimizer_keys(plan))
    axolotl_schedule(plan, config, notes)
    placeholders[HF["learning_rate"]] = "a common default for this method; tune it"
    config.update(_precision(plan, notes))
    config[KEYS["attention"]] = plan.attention.value
    config.update(packing_keys(plan, notes))
    config.update(_liger_keys(plan, notes))
    config.update(checkpointing_keys(plan, notes))
    _activation_offload(config)
    if is_vlm(ctx.model_type):
        _vision(ctx, config, notes, comments)
    side = _sharding(ctx, config, notes)
    config[HF["logging_steps"]] = 10
    notes.extend(kbit_notes(plan))
    multinode_note(ctx, notes)
    launch = f"axolotl train {ctx.config_arg}"
    if ctx.multi_gpu:
        notes.append(
            f"axolotl train launches on all local GPUs through accelerate ({plan.gpus_per_node} per node billed)"
        )
    return Emitted("axolotl", config, launch, notes, side, placeholders, comments)
