"""Plan values as users write them (CLI strings, recipe YAML, config files) -> the typed fields of
`memdoc.core.model.plan.TrainingPlan`, strictly, with errors that name the flag (`flag_for`).

`coerce(name, value)` is what `TrainingPlan.from_dict` applies to every field.
"""

from __future__ import annotations

from memdoc.core.model.network import parse_interconnect
from memdoc.core.model.plan_enums import (
    Allocator,
    Attention,
    Checkpointing,
    CpImpl,
    Loss,
    MasterWeights,
    Method,
    Offload,
    OffloadTarget,
    Optimizer,
    Precision,
    Shard,
)
from memdoc.core.model.plan_post import POST_TRAINING_BOOLS, POST_TRAINING_FLOATS, Task, Vllm
from memdoc.core.model.plan_vision import VISION_BOOLS, VISION_OPTIONAL, PartPolicy, parse_image_size
from memdoc.core.model.stack import MoeExperts
from memdoc.errors import PlanError, did_you_mean, quoted

FLAG_ALIASES = {
    "batch": "micro_batch",
    "seq": "seq_len",
    "accum": "grad_accum",
    "gpus": "gpus_per_node",
    "generations": "num_generations",
    "iterations": "num_iterations",
}
"""CLI flag (and recipe key) -> plan field, where they differ; every other flag is the field with dashes."""

_ENUMS = {
    "method": Method,
    "precision": Precision,
    "optimizer": Optimizer,
    "checkpointing": Checkpointing,
    "attention": Attention,
    "loss": Loss,
    "shard": Shard,
    "offload": Offload,
    "offload_to": OffloadTarget,
    "allocator": Allocator,
    "moe_experts": MoeExperts,
    "master_weights": MasterWeights,
    "cp_impl": CpImpl,
    "task": Task,
    "vllm": Vllm,
    "vision_tower": PartPolicy,
    "projector": PartPolicy,
}

ENGINE_COUNTS = (
    "reduce_bucket_size",
    "allgather_bucket_size",
    "stage3_prefetch_bucket_size",
    "stage3_param_persistence_threshold",
    "stage3_max_live_parameters",
    "sub_group_size",
)
"""DeepSpeed's element-count knobs (`deepspeed/runtime/zero/config.py` `DeepSpeedZeroConfig`, 0.19.8)."""


def flag_for(field_name: str) -> str:
    """The CLI flag that sets plan field `field_name` (micro_batch -> --batch, lora_rank -> --lora-rank)."""
    return "--" + _FIELD_TO_FLAG.get(field_name, field_name).replace("_", "-")


_FIELD_TO_FLAG = {v: k for k, v in FLAG_ALIASES.items()}


_BOOLS = (
    "allow_long",
    "kbit_upcast",
    "overlap_comm",
    "contiguous_gradients",
    "eval_keeps_logits",
    "save_gather",
    "save_only_model",
    "low_mem_load",
    "activation_offload",
    "packing",
    *POST_TRAINING_BOOLS,
    *VISION_BOOLS,
)
"""Plan fields that are true or false."""
_OPTIONAL = (
    "lora_alpha",
    "eval_accumulation_steps",
    "save_gather",
    "document_tokens",
    "beta",
    "num_generations",
    "generation_batch",
    "prompt_len",
    *VISION_OPTIONAL,
    *ENGINE_COUNTS,
)
"""Plan fields where None means "the default rule" (2 × rank, HF's None, as emitted, DeepSpeed's "auto")."""


def coerce(name: str, value):
    """Turn recipe/CLI values into field types, strictly, with an error naming the field.

    No silent conversion: `micro_batch: 2.9` or `true` is not 2 or 1, `allow_long: "false"` is
    false, not true (a bool or exactly "true"/"false"); integers may be written as digits ("4", as
    on a command line, or 4.0). YAML's `false` for checkpointing/offload means none, `true` for
    checkpointing full.
    """
    if name in _ENUMS:
        return _coerce_enum(name, _ENUMS[name], value)
    if name == "lora_targets":
        if isinstance(value, str):
            value = [t.strip() for t in value.split(",")]
        if not isinstance(value, (list, tuple)) or not all(isinstance(t, str) for t in value):
            raise PlanError(
                f"{flag_for(name)} must be module names (a comma-separated string or a list), got {quoted(value)}"
            )
        return tuple(value)
    if name in _OPTIONAL and value is None:
        return None
    if name in _BOOLS:
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):  # as typed on a command line
            return value.strip().lower() == "true"
        if not isinstance(value, bool):
            raise PlanError(f"{flag_for(name)} must be true or false, got {quoted(value)}")
        return value
    if name == "interconnect":
        parse_interconnect(value)  # a one-line PlanError naming the flag
        return value.strip().lower()
    if name == "image_size":
        width, height = parse_image_size(value)  # a one-line PlanError naming the flag
        return f"{width}x{height}"
    if name in ("lora_dropout", *POST_TRAINING_FLOATS):
        return _coerce_float(name, value)
    return _coerce_int(name, value)


def _coerce_float(name: str, value) -> float:
    """A real-number field (a number, or digits as typed); its range is the plan's to check."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise PlanError(f"{flag_for(name)} must be a number, got {quoted(value)}")
    try:
        return float(value)
    except ValueError:
        raise PlanError(f"{flag_for(name)} must be a number, got {quoted(value)}") from None


def _coerce_enum(name: str, enum, value):
    """An enum field from its CLI/recipe spelling (case-insensitive; YAML's false/true for checkpointing/offload)."""
    if isinstance(value, enum):
        return value
    if value is False and name in ("checkpointing", "offload"):
        value = "none"
    if value is True and name == "checkpointing":
        value = "full"
    choices = ", ".join(m.value for m in enum)
    if not isinstance(value, str):
        raise PlanError(f"{flag_for(name)} must be one of: {choices}; got {quoted(value)}")
    try:
        return enum(value.lower())
    except ValueError:
        hint = did_you_mean(value.lower(), [m.value for m in enum])
        raise PlanError(f"{flag_for(name)} {quoted(value)} is not one of: {choices}{hint}") from None


def _coerce_int(name: str, value) -> int:
    """An integer field: an int, an integral float (DeepSpeed JSON's 5e8, YAML's 4.0) or digits as typed."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if (
        isinstance(value, str) and value.strip().isdigit() and value.strip().isascii()
    ):  # "4", as typed on a command line
        value = int(value.strip())
    if not isinstance(value, int) or isinstance(value, bool):
        raise PlanError(f"{flag_for(name)} must be an integer, got {quoted(value)}")
    return value
