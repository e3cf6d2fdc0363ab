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

from memdoc.errors import ConfigError

_TOP_KEYS = {"model", "gpu", "plan", "description", "name"}


@dataclass(frozen=True)
class Recipe:
    path: Path
    model: str
    gpu: str | None
    plan: dict = field(default_factory=dict)
    description: str = ""


def load_recipe(path: str | Path) -> Recipe:
    """Read and shape-check a recipe (plan values are validated by TrainingPlan)."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read recipe {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"recipe {path} is not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"recipe {path} must be a mapping with model, gpu and plan")
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise ConfigError(f"recipe {path}: unknown key(s) {', '.join(sorted(unknown))} (allowed: {', '.join(sorted(_TOP_KEYS))})")
    if not data.get("model"):
        raise ConfigError(f"recipe {path} has no model")
    plan = data.get("plan") or {}
    if not isinstance(plan, dict):
        raise ConfigError(f"recipe {path}: plan must be a mapping")
    gpu = data.get("gpu")
    return Recipe(
        path=path,
        model=str(data["model"]),
        gpu=None if gpu is None else str(gpu),
        plan=plan,
        description=str(data.get("description") or ""),
    )
