"""memdoc recipe files: a YAML of model + GPU + plan, with the batch arithmetic in comments.

model: meta-llama/Llama-2-7b-hf
gpu: rtx-4090          # a GPU table name or a size in GiB
gpus: 1                # optional, GPUs per node
description: 7B LoRA on one 24 GB card
plan:
  method: lora
  micro_batch: 2
  ...
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from memdoc.errors import ConfigError, quoted
from memdoc.resolve.inputs import read_text

_TOP_KEYS = {"model", "gpu", "plan", "description", "name"}


@dataclass(frozen=True)
class Recipe:
    path: Path
    model: str
    gpu: str | None
    plan: dict = field(default_factory=dict)
    description: str = ""


MAX_RECIPE_BYTES = 1024 * 1024
"""A recipe is a few lines; anything over 1 MiB is not one (and is not parsed)."""


def _parse(path: Path) -> object:
    """The YAML document of a recipe: a regular text file (`inputs.read_text`) of at most MAX_RECIPE_BYTES,
    without aliases (ConfigError otherwise).

    Aliases are refused rather than expanded: a few lines of nested aliases (a "billion laughs"
    document) expand to gigabytes, and no recipe needs them.
    """
    text = read_text(path, what="recipe", limit=MAX_RECIPE_BYTES, error=ConfigError)
    try:
        for event in yaml.parse(text, Loader=_LOADER):
            if isinstance(event, yaml.AliasEvent):
                mark = event.start_mark
                raise ConfigError(
                    f"recipe {path}:{mark.line + 1}: YAML aliases (*{event.anchor}) are not allowed in recipes"
                )
        return yaml.load(text, Loader=_LOADER)
    except yaml.YAMLError as exc:
        raise ConfigError(f"recipe {path} is not valid YAML: {str(exc).splitlines()[0]}") from None
    except RecursionError:
        raise ConfigError(f"recipe {path} is nested too deeply to be a recipe") from None


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _text(value, what: str, path: Path, *, numbers: bool = False) -> str:
    if isinstance(value, str) or (numbers and isinstance(value, (int, float)) and not isinstance(value, bool)):
        return str(value)
    raise ConfigError(f"recipe {path}: {what} must be a string, got {quoted(value)}")


def load_recipe(path: str | Path) -> Recipe:
    """Read and shape-check a recipe (plan values are validated, strictly typed, by TrainingPlan)."""
    path = Path(path)
    data = _parse(path)
    if not isinstance(data, dict):
        raise ConfigError(f"recipe {path} must be a mapping with model, gpu and plan")
    for key in data:
        if not isinstance(key, str):
            raise ConfigError(
                f"recipe {path}: key {quoted(key)} is not a name (allowed: {', '.join(sorted(_TOP_KEYS))})"
            )
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise ConfigError(
            f"recipe {path}: unknown key(s) {', '.join(sorted(unknown))} (allowed: {', '.join(sorted(_TOP_KEYS))})"
        )
    if not data.get("model"):
        raise ConfigError(f"recipe {path} has no model")
    plan = data.get("plan") or {}
    if not isinstance(plan, dict):
        raise ConfigError(f"recipe {path}: plan must be a mapping")
    for key in plan:
        if not isinstance(key, str):
            raise ConfigError(f"recipe {path}: plan key {quoted(key)} is not a name")
    gpu = data.get("gpu")
    return Recipe(
        path=path,
        model=_text(data["model"], "model", path),
        gpu=None if gpu is None else _text(gpu, "gpu", path, numbers=True),
        plan=plan,
        description=_text(data.get("description") or "", "description", path),
    )
