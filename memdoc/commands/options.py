"""The plan flags shared by bill, diagnose, prescribe and emit, declared once.

`plan_options` adds every plan flag to a command's signature and hands the command one
`PlanArgs` (the raw flag values); `PlanArgs.resolve` merges them over a recipe and builds the
validated `Setup` (model, plan, GPU) the command works on.
"""

import dataclasses
import functools
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Optional

import typer

from memdoc.core.billing.inference import KvCache, Weights
from memdoc.core.model.gpu import GpuSpec, choice_note, resolve_gpu
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.plan import (
    FLAG_ALIASES,
    Allocator,
    Attention,
    Checkpointing,
    Loss,
    Method,
    Offload,
    OffloadTarget,
    Optimizer,
    Precision,
    Shard,
    TrainingPlan,
    check_plan_against_model,
    parse_plan,
)
from memdoc.errors import NoGpuDetectedError, PlanError
from memdoc.resolve.gpus import detect_local_gpu

PLAN = "Training plan"

JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON (bytes) instead of tables.")]

INFERENCE = "Inference (with --inference, or prescribe --symptom inference-oom)"
KvCacheOpt = Annotated[
    KvCache,
    typer.Option(
        "--kv-cache",
        help="KV-cache storage: auto = the compute dtype; fp8 = vLLM/SGLang kv_cache_dtype fp8; int4 = transformers' quantized cache.",
        rich_help_panel=INFERENCE,
    ),
]
PrefillChunkOpt = Annotated[
    Optional[int],
    typer.Option(
        "--prefill-chunk",
        help="Prefill the prompt N tokens at a time (generate's prefill_chunk_size). \\[default: all at once]",
        rich_help_panel=INFERENCE,
    ),
]
WeightsOpt = Annotated[
    Weights,
    typer.Option(
        "--weights",
        help="Weights for inference: auto = the compute dtype (NF4 for QLoRA plans); int8 / nf4 = bitsandbytes load_in_8bit / load_in_4bit.",
        rich_help_panel=INFERENCE,
    ),
]

_PLAN_PARAMS = {
    "gpu": Annotated[
        Optional[str],
        typer.Option(
            "--gpu",
            help="GPU name (rtx-4090, a100-80, h100-sxm, …) or memory in GiB (24, 80); N×GPU (8xh100) also sets --gpus N. \\[default: the local GPU]",
            rich_help_panel=PLAN,
        ),
    ],
    "gpus": Annotated[
        Optional[int], typer.Option("--gpus", help="GPUs per node. \\[default: 1]", rich_help_panel=PLAN)
    ],
    "nodes": Annotated[Optional[int], typer.Option("--nodes", help="Nodes. \\[default: 1]", rich_help_panel=PLAN)],
    "method": Annotated[
        Optional[Method], typer.Option("--method", help="What is trained. \\[default: full]", rich_help_panel=PLAN)
    ],
    "precision": Annotated[
        Optional[Precision],
        typer.Option(
            "--precision",
            help="bf16/fp16 = pure (weights, grads, states in 16 bit); amp-* = fp32 master weights + autocast. \\[default: bf16]",
            rich_help_panel=PLAN,
        ),
    ],
    "optimizer": Annotated[
        Optional[str],
        typer.Option(
            "--optimizer",
            metavar="[" + "|".join(o.value for o in Optimizer) + "]",
            help="Optimizer. adamw-fused = torch AdamW fused=True, the trainers' default (HF optim adamw_torch_fused, torch ≥ 2.8); adamw-foreach (or adamw) = torch AdamW's foreach path, one extra state-sized temporary in the step (HF adamw_torch). \\[default: adamw-fused]",
            rich_help_panel=PLAN,
        ),
    ],
    "batch": Annotated[
        Optional[int],
        typer.Option("--batch", help="Micro-batch per GPU (sequences). \\[default: 1]", rich_help_panel=PLAN),
    ],
    "seq": Annotated[
        Optional[int], typer.Option("--seq", help="Sequence length (tokens). \\[default: 2048]", rich_help_panel=PLAN)
    ],
    "accum": Annotated[
        Optional[int], typer.Option("--accum", help="Gradient accumulation steps. \\[default: 1]", rich_help_panel=PLAN)
    ],
    "checkpointing": Annotated[
        Optional[Checkpointing],
        typer.Option("--checkpointing", help="Activation checkpointing. \\[default: none]", rich_help_panel=PLAN),
    ],
    "checkpoint_every": Annotated[
        Optional[int],
        typer.Option(
            "--checkpoint-every",
            help="With --checkpointing full: checkpoint every Nth decoder layer only (layers 0, N, 2N, …). \\[default: 1, every layer]",
            rich_help_panel=PLAN,
        ),
    ],
    "attention": Annotated[
        Optional[Attention],
        typer.Option("--attention", help="Attention kernel. \\[default: sdpa]", rich_help_panel=PLAN),
    ],
    "loss": Annotated[
        Optional[Loss],
        typer.Option(
            "--loss",
            help="hf = transformers' loss (full fp32 logits); fused = Liger as use_liger_kernel=True applies it: fused linear cross-entropy (logits never stored whole) + RMSNorm, RoPE, SwiGLU kernels; fused-ce = the fused cross-entropy alone. \\[default: hf]",
            rich_help_panel=PLAN,
        ),
    ],
    "lora_rank": Annotated[
        Optional[int], typer.Option("--lora-rank", help="LoRA rank. \\[default: 16]", rich_help_panel=PLAN)
    ],
    "lora_alpha": Annotated[
        Optional[int], typer.Option("--lora-alpha", help="LoRA alpha. \\[default: 2 × rank]", rich_help_panel=PLAN)
    ],
    "lora_dropout": Annotated[
        Optional[float],
        typer.Option(
            "--lora-dropout",
            help="LoRA dropout; > 0 keeps an extra fp32 copy of each adapted input. \\[default: 0.0, peft's default]",
            rich_help_panel=PLAN,
        ),
    ],
    "lora_targets": Annotated[
        Optional[str],
        typer.Option(
            "--lora-targets",
            help="Comma-separated module names, or all-linear. \\[default: q_proj,v_proj]",
            rich_help_panel=PLAN,
        ),
    ],
    "kbit_upcast": Annotated[
        Optional[bool],
        typer.Option(
            "--kbit-upcast/--no-kbit-upcast",
            help="QLoRA: upcast embeddings, LM head and norms to fp32 as peft's prepare_model_for_kbit_training does (+2 bytes per non-quantised parameter; fp32 tensors between the 4-bit matmuls). \\[default: no, as TRL's SFTTrainer, Axolotl and LLaMA-Factory run QLoRA]",
            rich_help_panel=PLAN,
        ),
    ],
    "shard": Annotated[
        Optional[Shard],
        typer.Option("--shard", help="Shard model states over GPUs. \\[default: none]", rich_help_panel=PLAN),
    ],
    "offload": Annotated[
        Optional[Offload],
        typer.Option("--offload", help="Move states off the GPU. \\[default: none]", rich_help_panel=PLAN),
    ],
    "offload_to": Annotated[
        Optional[OffloadTarget],
        typer.Option("--offload-to", help="Where offloaded states live. \\[default: cpu]", rich_help_panel=PLAN),
    ],
    "allocator": Annotated[
        Optional[Allocator],
        typer.Option(
            "--allocator",
            help="CUDA caching allocator: default, or expandable (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True). \\[default: default]",
            rich_help_panel=PLAN,
        ),
    ],
    "allow_long": Annotated[
        bool, typer.Option("--allow-long", help="Allow --seq beyond the model's context length.", rich_help_panel=PLAN)
    ],
    "recipe": Annotated[
        Optional[Path],
        typer.Option(
            "--recipe", help="A memdoc recipe YAML (model + plan + GPU); flags override it.", rich_help_panel=PLAN
        ),
    ],
}


@dataclass(frozen=True)
class Setup:
    """What a command works on: the model, the validated plan, and the GPU (None if not needed)."""

    model: ModelSpec
    plan: TrainingPlan
    gpu: GpuSpec | None
    recipe: str | None = None
    explicit: frozenset[str] = frozenset()
    """Plan fields the user set (a flag or the recipe); the rest are defaults (`memdoc plan` searches those)."""
    model_arg: str | None = None
    """MODEL as the user gave it (the catalog may spell it differently in `model.id`)."""
    gpu_note: str | None = None
    """What a loose --gpu was taken to mean (a short name's variant, the real cards near a bare size);
    human output prints it, --json leaves it out."""


@dataclass(frozen=True)
class PlanArgs:
    """The raw plan flags of one invocation."""

    values: dict

    def resolve(self, model_arg: str | None, *, need_gpu: bool = True) -> Setup:
        """Merge flags over the recipe, resolve model and GPU, and validate the plan against the model."""
        from memdoc.resolve.models import resolve_model
        from memdoc.resolve.recipes import load_recipe

        values = dict(self.values)
        recipe_path = values.pop("recipe", None)
        gpu_text = values.pop("gpu", None)
        plan_values: dict = {}
        model_name = model_arg
        if recipe_path is not None:
            recipe = load_recipe(recipe_path)
            plan_values.update(recipe.plan)
            model_name = model_name or recipe.model
            gpu_text = gpu_text or recipe.gpu
        if model_name is None:
            raise PlanError("no MODEL given (pass a model id, a config.json path, or --recipe FILE)")
        for flag, value in values.items():
            if value is None or (flag == "allow_long" and not value):
                continue
            plan_values[FLAG_ALIASES.get(flag, flag)] = value.value if hasattr(value, "value") else value
        gpu = resolve_gpu(gpu_text) if gpu_text else None
        if gpu is not None and gpu.count > 1:
            plan_values["gpus_per_node"] = gpus_from_count(gpu, plan_values.get("gpus_per_node"), gpu_text)
            gpu = dataclasses.replace(gpu, count=1)
        plan = parse_plan(**plan_values)
        if plan.checkpoint_every > 1 and plan.checkpointing.value != "full":
            raise PlanError("--checkpoint-every N needs --checkpointing full (it checkpoints every Nth decoder layer)")
        if plan.kbit_upcast and plan.method.value != "qlora":
            raise PlanError("--kbit-upcast upcasts what a 4-bit model keeps in 16 bit: it needs --method qlora")
        model = resolve_model(model_name)
        if plan.is_peft and "lora_targets" not in plan_values:
            plan = plan.replace(lora_targets=model.default_lora_targets)
        check_plan_against_model(
            plan,
            hidden_size=model.hidden_size,
            max_positions=model.max_positions,
            model_id=model.id,
            linear_names=model.linear_names,
        )
        if gpu is None and need_gpu:
            gpu = detect_local_gpu()
            if gpu is None:
                raise NoGpuDetectedError("no local NVIDIA GPU found; pass --gpu (e.g. --gpu 24 or --gpu rtx-4090)")
        if gpu is not None:
            plan = precision_for_card(plan, gpu, explicit="precision" in plan_values)
        return Setup(
            model=model,
            plan=plan,
            gpu=gpu,
            recipe=str(recipe_path) if recipe_path else None,
            explicit=frozenset(FLAG_ALIASES.get(k.replace("-", "_"), k.replace("-", "_")) for k in plan_values),
            model_arg=model_name,
            gpu_note=choice_note(gpu_text, gpu) if gpu_text and gpu else None,
        )


def precision_for_card(plan: TrainingPlan, gpu: GpuSpec, *, explicit: bool) -> TrainingPlan:
    """A card without bf16 (compute capability < 8.0: T4, V100) trains in fp16 AMP: the default
    precision becomes amp-fp16 (full fine-tune: fp32 master weights + fp16 autocast and loss scaling)
    or fp16 (LoRA/QLoRA: frozen base in fp16, fp32 adapters, fp16 autocast); asking for bf16 is an error."""
    if gpu.supports_bf16 or plan.precision not in (Precision.BF16, Precision.AMP_BF16):
        return plan
    fallback = Precision.FP16 if plan.is_peft else Precision.AMP_FP16
    if explicit:
        raise PlanError(
            f"{gpu.name} has no bf16 (compute capability {gpu.compute_capability}; bf16 needs 8.0+), so --precision "
            f"{plan.precision.value} cannot run there; use --precision {fallback.value}"
        )
    return plan.replace(precision=fallback)


def gpus_from_count(gpu: GpuSpec, gpus_flag, gpu_text: str) -> int:
    """GPUs per node for `--gpu N×NAME`: N, unless --gpus (or the recipe's gpus) says otherwise."""
    if gpus_flag is not None and int(gpus_flag) != gpu.count:
        raise PlanError(
            f"--gpu {gpu_text.strip()} says {gpu.count} GPUs but --gpus says {gpus_flag}; give the count once"
        )
    return gpu.count


def plan_options(command):
    """Decorator: add the plan flags to `command`'s CLI signature and pass them as `plan: PlanArgs`."""
    signature = inspect.signature(command)
    own = [p for name, p in signature.parameters.items() if name != "plan"]
    extra = [
        inspect.Parameter(
            name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=False if name == "allow_long" else None
        )
        for name, annotation in _PLAN_PARAMS.items()
    ]

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        plan_values = {name: kwargs.pop(name) for name in _PLAN_PARAMS}
        return command(*args, plan=PlanArgs(plan_values), **kwargs)

    positional = [p for p in own if p.kind is not inspect.Parameter.KEYWORD_ONLY]
    keyword = [p for p in own if p.kind is inspect.Parameter.KEYWORD_ONLY]
    wrapper.__signature__ = signature.replace(parameters=positional + keyword + extra)
    return wrapper
