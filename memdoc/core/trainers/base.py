"""Shared ground of the emitters: the context, the result, and the knob mappings every format uses.

An emitter is a pure function `EmitContext -> Emitted`: the config as a dict, side files
(DeepSpeed JSON, accelerate FSDP YAML), the launch command, and notes for knobs the target
format cannot express (written as YAML comments at the top and printed on stderr).
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field

from memdoc.core.engines.layout import Engine, engine_layout, plan_engine
from memdoc.core.model.plan import (
    ALL_LINEAR,
    Checkpointing,
    Loss,
    Method,
    Offload,
    Optimizer,
    Precision,
    Shard,
    TrainingPlan,
)
from memdoc.core.model.stack import Stack
from memdoc.core.trainers.hf.keys import CHECKPOINTING_KWARGS as CKPT
from memdoc.core.trainers.hf.keys import KEYS as HF
from memdoc.core.trainers.hf.keys import LIGER_KEYS as LIGER
from memdoc.core.trainers.table import KeyTable
from memdoc.core.trainers.text import dump_json, yaml_document
from memdoc.errors import PlanError

DATASET_PLACEHOLDER = "CHANGE_ME_dataset"
OUTPUT_DIR_PLACEHOLDER = "CHANGE_ME_output_dir"
NVME_PLACEHOLDER = "/CHANGE_ME_local_nvme"
TRAIN_SCRIPT_PLACEHOLDER = "YOUR_TRAIN_SCRIPT.py"

TRL_DATASET_FORMAT = (
    'rows {"messages": [{"role": "user", "content": …}, {"role": "assistant", "content": …}]} '
    '(the tokenizer\'s chat template is applied), or {"prompt": …, "completion": …}, or {"text": …}'
)
"""The dataset formats TRL's SFTTrainer reads (TRL docs, "Dataset formats and types")."""

DS_CONFIG_NAME = "ds_config.json"
FSDP_CONFIG_NAME = "fsdp.yaml"
SIDE_NAME_IF_TAKEN = {DS_CONFIG_NAME: "deepspeed_zero.json", FSDP_CONFIG_NAME: "accelerate_fsdp.yaml"}
"""Side-file names used when the main config itself is named ds_config.json / fsdp.yaml."""

SGD_OPTIM_ARGS = "momentum=0.9"
"""memdoc bills SGD with momentum (1 state); HF's `sgd` has no momentum unless optim_args sets it."""

GRADIENT_CHECKPOINTING_KWARGS = {"use_reentrant": False}
CHECKPOINTING_KWARGS_SINCE = "5.24"
"""The first transformers with `activation_checkpointing_kwargs` `every_n_layers` and `offload` (the installed
5.24.0's `modeling_utils.py` `PreTrainedModel.activation_checkpointing_enable`; `Stack` `LATEST_KNOWN`)."""


@dataclass(frozen=True)
class EmitContext:
    """Everything an emitter needs: the model id, the plan, the bill's peak and the user's fill-ins."""

    model_id: str
    plan: TrainingPlan
    peak_allocated: int
    """Billed peak allocated bytes per GPU."""
    process_total: int
    """Billed process total per GPU (what nvidia-smi shows)."""
    gpu_name: str | None = None
    gpu_memory: int | None = None
    command: str = "memdoc emit"
    """The memdoc command line that made the file (first comment line)."""
    dataset: str | None = None
    output_dir: str | None = None
    side_dir: str = ""
    """Directory prefix (as the user typed it) under which side files are referenced."""
    config_path: str = "config.yaml"
    """How the launch command names the main config file."""
    config_of: str | None = None
    """The catalog model whose config was billed when `model_id` is a fine-tuned variant of it."""
    asked_id: str | None = None
    """MODEL as the user typed it, when the catalog names the repository differently (an alias)."""
    model_type: str | None = None
    """The model's `model_type` (a VLM's own, e.g. qwen2_5_vl: `memdoc.core.trainers.vision`); None: unknown."""
    image_family: str | None = None
    """The image processor's rules (`ModelSpec.image_family`: pixtral for a `llava` with a Pixtral tower)."""
    stack: Stack | None = None
    """The library versions that will run the file (`--stack`, else the installed ones, else the newest known):
    a key a trainer renamed is written as that version spells it (`Key.spellings`); None: the newest."""

    def key(self, table: KeyTable, name: str) -> str:
        """Row `name` of `table` as the stack's version of its trainer spells it."""
        return table.at(name, self.stack.versions.get(table.trainer) if self.stack else None)

    @property
    def multi_gpu(self) -> bool:
        return self.plan.world_size > 1

    def side_path(self, name: str) -> str:
        """Where side file `name` goes: next to the main config, never over it."""
        if name == os.path.basename(self.config_path):
            name = SIDE_NAME_IF_TAKEN[name]
        return os.path.join(self.side_dir, name) if self.side_dir else name

    @property
    def config_arg(self) -> str:
        """The main config's path as one shell word of the launch command (`shlex.quote`)."""
        return shlex.quote(self.config_path)

    def side_arg(self, name: str) -> str:
        """Side file `name`'s path as one shell word of the launch command (`shlex.quote`)."""
        return shlex.quote(self.side_path(name))


@dataclass(frozen=True)
class SideFile:
    name: str
    """File name; written next to the main config."""
    data: dict
    kind: str
    """'json' or 'yaml'."""


@dataclass
class Emitted:
    """One emitted config: the main dict, side files, the launch command, notes and placeholders."""

    format: str
    config: dict
    launch: str
    notes: list[str] = field(default_factory=list)
    side_files: list[SideFile] = field(default_factory=list)
    placeholders: dict[str, str] = field(default_factory=dict)
    """Top-level key → why the user must set it (rendered as a trailing comment)."""
    comments: dict[str, str] = field(default_factory=dict)
    """Top-level key → what its value means, e.g. the dataset's row format (a trailing comment)."""


# ---------------------------------------------------------------------------------------------
# Knob mappings shared by the formats


def all_linear(plan: TrainingPlan) -> bool:
    return ALL_LINEAR in plan.lora_targets


def load_dtype(plan: TrainingPlan) -> str:
    """dtype the weights are loaded in: the storage dtype; a LoRA/QLoRA base (frozen: no fp32 master
    copy, as the bill and the tracer hold it) in the compute dtype, also under AMP."""
    if plan.is_peft:
        return plan.precision.compute_dtype_name
    return plan.precision.torch_dtype_name


def trainer_amp_flags(plan: TrainingPlan, notes: list[str]) -> dict:
    """`bf16`/`fp16` of HF TrainingArguments (which mean autocast, not storage)."""
    p = plan.precision
    if p in (Precision.BF16, Precision.AMP_BF16):
        return {HF["bf16"]: True, HF["fp16"]: False}
    if p is Precision.AMP_FP16:
        return {HF["bf16"]: False, HF["fp16"]: True}
    if p is Precision.FP16:
        if plan.method is Method.FULL:
            notes.append(
                "precision fp16 (pure fp16 weights, no fp32 master copy): the HF Trainer's loss scaler refuses fp16 "
                "gradients, so fp16 AMP is off and the model is loaded in float16 without loss scaling — expect "
                "overflow/underflow; prefer --precision bf16 or amp-fp16"
            )
            return {HF["bf16"]: False, HF["fp16"]: False}
        return {HF["bf16"]: False, HF["fp16"]: True}
    return {HF["bf16"]: False, HF["fp16"]: False}


def engine_precision_note(plan: TrainingPlan) -> str:
    """How DeepSpeed or FSDP keeps a pure 16-bit plan's states, as the bill has them (`engine_layout`): the
    engine, not the loaded dtype, sets the master, gradient and optimizer-state dtypes."""
    layout = engine_layout(plan)
    name = plan.precision.torch_dtype_name
    bits = {16: "bf16" if plan.precision is Precision.BF16 else "fp16", 32: "fp32"}
    if layout.master_bits:
        master = f"the optimizer steps a master copy of the weights in {bits[layout.master_bits]}"
    else:
        master = f"the trainable weights are sharded in {bits[layout.weight_bits]}"
    return (
        f"precision {plan.precision.value} under {layout.engine.value}: weights loaded in {name}; {master}, "
        f"gradients {bits[layout.grad_bits]}, optimizer states {bits[layout.state_bits]} (as billed)"
    )


def precision_note(plan: TrainingPlan) -> str:
    """One sentence on how the plan's precision is realised by HF-based trainers."""
    p = plan.precision
    if plan.is_peft and p in (Precision.BF16, Precision.FP16):
        amp = {Precision.BF16: "amp-bf16", Precision.FP16: "amp-fp16"}[p]
        base = f"4-bit NF4 with {p.compute_dtype_name} compute" if plan.method is Method.QLORA else "no fp32 copy"
        return (
            f"precision {p.value}: frozen base weights loaded in {p.torch_dtype_name} ({base}); "
            f"peft keeps the small trainable adapters in fp32. `{p.value}: true` "
            f"also turns on autocast, which the trainer runs as memdoc's --precision {amp} (the adapters' matmuls in "
            f"{p.compute_dtype_name}): less activation memory than the {p.value} plan as asked; bill --precision "
            f"{amp} prices what runs"
        )
    if plan.is_peft and p.is_amp:
        return (
            f"precision {p.value}: frozen base weights loaded in {p.compute_dtype_name} (no fp32 "
            "copy of a frozen base), "
            f"adapters fp32 (peft), `{'bf16' if p is Precision.AMP_BF16 else 'fp16'}: true` = autocast"
        )
    if p in (Precision.BF16, Precision.FP16) and plan_engine(plan) is not Engine.DDP:
        return engine_precision_note(plan)
    if p is Precision.BF16:
        return (
            "precision bf16 (pure): weights loaded in bfloat16, so gradients and optimizer states "
            "are bf16 too; `bf16: true` only turns on autocast"
        )
    if p is Precision.AMP_BF16:
        return "precision amp-bf16: weights loaded in float32 (master copy), `bf16: true` = bf16 autocast"
    if p is Precision.AMP_FP16:
        return "precision amp-fp16: weights loaded in float32 (master copy), `fp16: true` = fp16 autocast + loss scaler"
    if p is Precision.FP32:
        return "precision fp32: weights float32, no autocast"
    return "precision fp16 (pure): weights loaded in float16"


def checkpointing_keys(plan: TrainingPlan, notes: list[str]) -> dict:
    """`gradient_checkpointing` (+ non-reentrant kwargs); selective has no HF key, emitted as full.

    `--checkpoint-every N` and `--activation-offload` are transformers 5.24's `every_n_layers` and `offload`
    in the kwargs (`trainer.py` `Trainer.__init__` pops both before the rest reaches `checkpoint`; the
    deprecated `gradient_checkpointing_kwargs` is an alias of `activation_checkpointing_kwargs`,
    `training_args.py` `TrainingArguments.__post_init__`); older transformers pass them on to
    `torch.utils.checkpoint.checkpoint`, which refuses them: a note says so."""
    if plan.checkpointing is Checkpointing.NONE:
        return {HF["checkpointing"]: False}
    if plan.checkpointing is Checkpointing.SAC_OP:
        raise PlanError(
            "--checkpointing sac-op is torchtitan's op-level selective checkpointing; HF-based trainers (trl, hf, "
            "axolotl, llamafactory) checkpoint whole decoder layers and have no key for it",
            hint='torchtitan\'s own config has it ([activation_checkpoint] mode = "selective", '
            'selective_ac_option = "op"); here, the nearest is --checkpointing full (less memory, more recompute)',
        )
    if plan.checkpointing is Checkpointing.SELECTIVE:
        notes.append(
            "checkpointing selective has no equivalent here (HF-based trainers checkpoint whole decoder layers): "
            "emitted as full checkpointing — at most the billed memory, ~+1 forward of compute"
        )
    kwargs = dict(GRADIENT_CHECKPOINTING_KWARGS)
    if plan.checkpointing is Checkpointing.FULL and plan.checkpoint_every > 1:
        kwargs[CKPT["checkpoint_every"]] = plan.checkpoint_every
    if plan.checkpointing is Checkpointing.FULL and plan.activation_offload:
        kwargs[CKPT["activation_offload"]] = True
    if len(kwargs) > len(GRADIENT_CHECKPOINTING_KWARGS):
        notes.append(CHECKPOINTING_KWARGS_NOTE)
    return {HF["checkpointing"]: True, HF["checkpointing_kwargs"]: kwargs}


CHECKPOINTING_KWARGS_NOTE = (
    "gradient_checkpointing_kwargs every_n_layers / offload need transformers >= "
    f"{CHECKPOINTING_KWARGS_SINCE} (older versions pass them to torch.utils.checkpoint, which refuses them)"
)


def optimizer_keys(plan: TrainingPlan, notes: list[str]) -> dict:
    out = {HF["optimizer"]: HF.row("optimizer").write(plan.optimizer.value)}
    if plan.optimizer is Optimizer.SGD:
        out[HF["optim_args"]] = SGD_OPTIM_ARGS
    return out


LIGER_NOTE = (
    "loss fused: Liger's fused linear cross-entropy (pip install liger-kernel; needs a CUDA/ROCm GPU with Triton) "
    "keeps the logits from ever being stored whole"
)
LIGER_CE_ONLY_CONFIG = {
    LIGER["rope"]: False,
    LIGER["rms_norm"]: False,
    LIGER["swiglu"]: False,
    LIGER["geglu"]: False,
    LIGER["fused_linear_cross_entropy"]: True,
}
"""`liger_kernel_config` for --loss fused-ce: transformers passes it to liger's `_apply_liger_kernel_to_instance`,
which keeps the keys the model's patch function takes (swiglu for Llama, geglu for Gemma)."""


def uses_liger(plan: TrainingPlan) -> bool:
    """Any Liger kernel: --loss fused (use_liger_kernel's full set) or fused-ce (the fused cross-entropy alone);
    not trl-fused, TRL's own head (TRL's default, nothing to write)."""
    return plan.loss in (Loss.FUSED, Loss.FUSED_CE)


WARMUP_RATIO = 0.1
"""Linear warmup over the first 10 % of the steps, then cosine decay: LLaMA-Factory's SFT examples
(examples/train_lora/llama3_lora_sft.yaml, examples/train_full/llama3_full_sft.yaml) and Axolotl's
use warmup_ratio 0.1 with lr_scheduler cosine. transformers ≥ 5.0 reads a `warmup_steps` below 1 as
this ratio (TrainingArguments.get_warmup_steps); `warmup_ratio` was deprecated in 5.0 and removed in
5.2 (huggingface/transformers#41326), so the HF-based formats write warmup_steps: 0.1."""

LR_SCHEDULER = "cosine"


def default_learning_rate(plan: TrainingPlan) -> float:
    return 2.0e-4 if plan.is_peft else 1.0e-5


def uses_deepspeed(plan: TrainingPlan) -> bool:
    """ZeRO stages, or offload without FSDP (ZeRO-Offload needs DeepSpeed)."""
    if plan.shard in (Shard.ZERO1, Shard.ZERO2, Shard.ZERO3):
        return True
    return plan.shard is Shard.NONE and plan.offload is not Offload.NONE


def uses_fsdp(plan: TrainingPlan) -> bool:
    return plan.shard.is_fsdp


# ---------------------------------------------------------------------------------------------
# Rendering


def _gib(n: int) -> str:
    from memdoc.units import format_bytes

    return format_bytes(n, unit="GiB")


def header_text(ctx: EmitContext, *, one_line: bool = False) -> str | list[str]:
    gpu = f" on {ctx.gpu_name} ({_gib(ctx.gpu_memory)})" if ctx.gpu_name and ctx.gpu_memory else ""
    made = f"Made by memdoc: {ctx.command}"
    peak = (
        f"Billed peak per GPU: {_gib(ctx.peak_allocated)} allocated, {_gib(ctx.process_total)} process total{gpu}"
        f" ({ctx.plan.world_size} GPU{'s' if ctx.plan.world_size > 1 else ''})"
    )
    return f"{made} | {peak}" if one_line else [made, peak]


def render_main(ctx: EmitContext, emitted: Emitted) -> str:
    """The main config file text: header, launch command and notes as comment lines, then the YAML, each
    placeholder's and each key's comment on the lines before its key (`text.yaml_document`)."""
    head = [*header_text(ctx), f"Launch: {emitted.launch}"]
    if emitted.notes:
        head.append("Notes (how the plan maps here; knobs without an exact equivalent):")
        head += [f"  - {note}" for note in emitted.notes]
    key_comments: dict[str, list[str]] = {}
    for key in emitted.config:
        if key in emitted.placeholders:
            key_comments[key] = [f"PLACEHOLDER: {emitted.placeholders[key]}"]
        elif key in emitted.comments:
            key_comments[key] = [emitted.comments[key]]
    return yaml_document(head, emitted.config, key_comments)


def render_side(ctx: EmitContext, side: SideFile) -> str:
    """A side file's text: JSON as is (DeepSpeed reads no comments), YAML after the header comment lines."""
    if side.kind == "json":
        return dump_json(side.data)
    return yaml_document(list(header_text(ctx)), side.data)
