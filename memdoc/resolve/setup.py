"""What a command, a benchmark or a script works on: the model, the validated plan and the GPU.

`resolve_setup` merges plan values (CLI flags, or keyword arguments in a script) over a recipe,
resolves the model (catalog, local path, HF cache, Hub) and the GPU (table name, size, or the local
card), and validates the plan as given and against the model:

    setup = resolve_setup("meta-llama/Llama-2-7b", gpu="24", method="lora", batch=4)
    compute_bill(setup.model, setup.plan, setup.gpu)
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path

from memdoc.core.model.gpu import GpuSpec, choice_note, resolve_gpu
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.plan import (
    FLAG_ALIASES,
    Method,
    Precision,
    Shard,
    TrainingPlan,
    flag_for,
    parse_plan,
)
from memdoc.core.model.plan_checks import check_plan_against_model, check_requested_plan
from memdoc.core.model.stack import Stack, moe_experts_layout, qlora_zero3_blockers
from memdoc.core.trainers.reading import ConfigReading
from memdoc.errors import NoGpuDetectedError, PlanError, UnknownGpuError
from memdoc.resolve.gpus import detect_local_gpu
from memdoc.resolve.models import mirror_note, resolve_model
from memdoc.resolve.recipes import load_recipe
from memdoc.resolve.stack import stack_in_use


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
    config: ConfigReading | None = None
    """What the user's own config files (`--config`) said, when any were given."""
    stack: Stack | None = None
    """The library versions whose defaults filled what the user left out (`stack_in_use`), when a config
    file or `--stack` was given; None otherwise (memdoc's own defaults, as before either existed)."""
    model_note: str | None = None
    """How MODEL was taken when it is a mirror of a catalog model (`memdoc.resolve.models.mirror_note`)."""

    @property
    def job(self) -> tuple[ModelSpec, TrainingPlan, GpuSpec | None]:
        """(model, plan, GPU): what every command bills for this setup."""
        return self.model, self.plan, self.gpu

    def inputs_json(self) -> dict:
        """What the config files said (`config`) and the stack whose defaults were used (`stack`), when given:
        the keys `bill --json` adds to its report."""
        return ({"config": self.config.to_json()} if self.config else {}) | (
            {"stack": self.stack.to_json()} if self.stack else {}
        )


def resolve_setup(
    model: str | None = None,
    *,
    gpu: str | None = None,
    recipe: str | Path | None = None,
    config: list[Path] | None = None,
    stack: str | None = None,
    need_gpu: bool = True,
    **plan_values,
) -> Setup:
    """Merge `plan_values` over the recipe, resolve model and GPU, and validate the plan against the model.

    `plan_values` are plan flags by CLI name (`batch`, `seq`, `lora_targets`, …) or field name
    (`micro_batch`), loosely typed as on a command line; None (and a false `allow_long`) means not
    given. Without `gpu` (or the recipe's), the local GPU is detected when `need_gpu`, else the
    setup has none. `config` files (TRL/HF/DeepSpeed/accelerate/… configs) sit between the recipe and
    the given values: recipe < config files < flags; MODEL defaults to the one the configs name.
    With config files or a `stack` SPEC (`--stack transformers==4.57,trl==0.19`), the stack's defaults
    fill what nobody set (`stack_defaults`); the config readers apply the trainers' own per version.
    """
    return resolve_setups(
        model, cards=[gpu], recipe=recipe, config=config, stack=stack, need_gpu=need_gpu, **plan_values
    )[0]


def resolve_setups(
    model: str | None = None,
    *,
    cards: list[str | None],
    recipe: str | Path | None = None,
    config: list[Path] | None = None,
    stack: str | None = None,
    need_gpu: bool = True,
    **plan_values,
) -> list[Setup]:
    """`resolve_setup` for each --gpu of `cards` (`memdoc plan --gpu A --gpu B`), one setup each: the stack,
    the config files and the recipe are read once for them all."""
    used_stack = stack_in_use(stack) if config or stack else None
    reading = read_configs(config, used_stack)
    model_name, recipe_gpu, values = _merge_over_recipe(model, recipe, plan_values, reading)
    inputs = _Inputs(model_name, values, reading, used_stack, str(recipe) if recipe else None)
    return [_setup_on(inputs, recipe_gpu if gpu is None else gpu, need_gpu=need_gpu) for gpu in cards]


@dataclass(frozen=True)
class _Inputs:
    """What every card's setup starts from: MODEL, the plan values (flags over configs over recipe), the
    config files' reading and the stack."""

    model_name: str
    values: dict
    reading: ConfigReading | None
    stack: Stack | None
    recipe: str | None


def _setup_on(inputs: _Inputs, gpu: str | None, *, need_gpu: bool) -> Setup:
    """The setup of `inputs` on the card `gpu` (the local one when None and `need_gpu`)."""
    values, reading, used_stack = dict(inputs.values), inputs.reading, inputs.stack
    if gpu is not None and not str(gpu).strip():
        raise UnknownGpuError(
            "--gpu is empty",
            hint="name a GPU (rtx-4090, h100), a size in GiB (24), or leave --gpu out for the local GPU",
        )
    card = resolve_gpu(gpu) if gpu else None
    if card is not None and (card.count > 1 or _COUNT_PREFIX.match(str(gpu))):
        values["gpus_per_node"] = gpus_from_count(card, values.get("gpus_per_node"), gpu)
        card = dataclasses.replace(card, count=1)
    plan = _plan_from(values, reading)
    spec = resolve_model(inputs.model_name)
    if plan.is_peft and "lora_targets" not in values:
        plan = plan.replace(lora_targets=spec.default_lora_targets)
    if used_stack is not None:
        spec = dataclasses.replace(spec, transformers=used_stack.versions.get("transformers"))
        plan = stack_defaults(plan, spec, used_stack, set_by_user=values.keys())
        check_plan_against_stack(plan, used_stack, reading)
    check_plan_against_model(
        plan,
        hidden_size=spec.hidden_size,
        max_positions=spec.max_positions,
        model_id=spec.id,
        linear_names=spec.linear_names,
        model_type=spec.image_family,
    )
    if card is None and need_gpu:
        card = detect_local_gpu()
        if card is None:
            raise NoGpuDetectedError("no local NVIDIA GPU found; pass --gpu (e.g. --gpu 24 or --gpu rtx-4090)")
    if card is not None:
        plan = precision_for_card(plan, card, explicit="precision" in values)
    return Setup(
        model=spec,
        plan=plan,
        gpu=card,
        recipe=inputs.recipe,
        explicit=frozenset(FLAG_ALIASES.get(k.replace("-", "_"), k.replace("-", "_")) for k in values),
        model_arg=inputs.model_name,
        gpu_note=choice_note(gpu, card) if gpu and card else None,
        config=reading,
        stack=used_stack,
        model_note=mirror_note(inputs.model_name, spec),
    )


def stack_defaults(plan: TrainingPlan, model: ModelSpec, stack: Stack, *, set_by_user) -> TrainingPlan:
    """`plan` with the stack's defaults for the fields nobody set (no flag, recipe or config key in
    `set_by_user`, plan field names): the MoE expert layout of the stack's transformers for an MoE model
    (`moe_experts_layout`: linear, quantised by QLoRA, before transformers 5; fused from 5 on).

    The other stack defaults depend on the trainer and are the config readers': transformers' `optim`
    (`memdoc.core.trainers.hf.defaults.default_optimizer`) and TRL's loss path (`trl_sft_defaults`)."""
    if model.is_moe and "moe_experts" not in set_by_user:
        plan = plan.replace(moe_experts=moe_experts_layout(stack))
    return plan


def check_plan_against_stack(plan: TrainingPlan, stack: Stack, reading: ConfigReading | None) -> None:
    """Refuse a plan the stack cannot run: ZeRO-3 over a 4-bit (QLoRA) base before the versions that support
    it (`qlora_zero3_blockers`), naming the config keys that asked for it."""
    if plan.method is not Method.QLORA or plan.shard is not Shard.ZERO3:
        return
    blockers = qlora_zero3_blockers(stack)
    if not blockers:
        return
    keys = [f"{k.file}: {k.key}" for k in (reading.read if reading else []) if k.field in ("method", "shard")]
    where = f" (set by {', '.join(dict.fromkeys(keys))})" if keys else ""
    raise PlanError(
        f"DeepSpeed ZeRO-3 with a 4-bit base{where} needs newer libraries than this stack has: {', '.join(blockers)}"
    )


def _plan_from(values: dict, reading: ConfigReading | None) -> TrainingPlan:
    """The validated plan; an error about a value a config file set also names where it was set."""
    try:
        plan = parse_plan(**values)
        check_requested_plan(plan)
    except PlanError as exc:
        message = str(exc)
        named = [k for k in (reading.read if reading else []) if k.field != "model" and flag_for(k.field) in message]
        if not named:
            raise
        where = ", ".join(dict.fromkeys(f"{k.file}: {k.key}" for k in named))
        raise PlanError(f"{message} (set by {where})") from None
    return plan


def read_configs(paths: list[Path] | None, stack: Stack | None = None) -> ConfigReading | None:
    """The merged reading of the user's config files under `stack` (default: `stack_in_use()`), or None
    without any."""
    if not paths:
        return None
    from memdoc.resolve.user_config import read_user_configs

    return read_user_configs(list(paths), stack or stack_in_use())


def _merge_over_recipe(
    model: str | None, recipe: str | Path | None, plan_values: dict, reading: ConfigReading | None
) -> tuple[str, str | None, dict]:
    """(model, the recipe's GPU text, plan values by field name): the given ones over the config files' over
    the recipe's."""
    values: dict = {}
    gpu = None
    if reading is not None:
        model = model or reading.model
    if recipe is not None:
        loaded = load_recipe(recipe)
        values.update(loaded.plan)
        model = model or loaded.model
        gpu = loaded.gpu
    if reading is not None:
        values.update(reading.plan)
    if model is None:
        raise PlanError(
            "no MODEL given (pass a model id, a config.json path, --recipe FILE, or a --config that names one)"
        )
    for flag, value in plan_values.items():
        if value is None or (flag == "allow_long" and not value):
            continue
        values[FLAG_ALIASES.get(flag, flag)] = value.value if hasattr(value, "value") else value
    return model, gpu, values


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


_COUNT_PREFIX = re.compile(r"\s*\d+\s*[x×*]", re.IGNORECASE)
"""`--gpu N×NAME`: the count prefix, 1× included (it still states the count, and a --gpus 2 beside it conflicts)."""


def gpus_from_count(gpu: GpuSpec, gpus_flag, gpu_text: str) -> int:
    """GPUs per node for `--gpu N×NAME`: N, unless --gpus (or the recipe's gpus) says otherwise."""
    if gpus_flag is not None and int(gpus_flag) != gpu.count:
        raise PlanError(
            f"--gpu {gpu_text.strip()} says {gpu.count} GPUs but --gpus says {gpus_flag}; give the count once"
        )
    return gpu.count


def card_as_emit_sees_it(setup: Setup) -> Setup:
    """The setup as `memdoc emit --gpu ID` would resolve this card: the note a loose id (a bare
    size, `24gib`) carries. `memdoc plan --emit` writes the chosen plan through it."""
    if setup.gpu is None:
        return setup
    text = setup.gpu.id if setup.gpu.id != "local" else str(setup.gpu.memory_bytes / 1024**3)
    card = resolve_gpu(text)
    return dataclasses.replace(setup, gpu=card, model_arg=setup.model.id, gpu_note=choice_note(text, card))
