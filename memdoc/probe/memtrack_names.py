"""Module activations by name: torch's MemTracker module paths -> memdoc's per-instance module names."""

from __future__ import annotations

import re


def _clean_module_name(name: str) -> str:
    """'PeftModelForCausalLM.base_model.model.model.layers.3.mlp' -> 'model.layers.*.mlp' ('' for peft's wrappers)."""
    name = name.split(".", 1)[1] if "." in name else ""
    if name in ("base_model", "base_model.model"):
        return ""  # peft's wrappers around the whole model
    name = name.removeprefix("base_model.model.")
    name = re.sub(r"\.visual\.blocks\.\d+(?=\.|$)", ".visual.blocks.*", name)  # Qwen-VL's vision blocks
    return re.sub(r"\.layers\.\d+(?=\.|$)", ".layers.*", name)


def top_modules(acts: dict[str, int], limit: int = 12) -> list[tuple[str, int]]:
    """The `limit` largest per-instance modules' activation bytes (decoder layers merged as `layers.*`)."""
    merged: dict[str, int] = {}
    for fqn, b in acts.items():
        name = _clean_module_name(fqn)
        if not name or b <= 0:
            continue
        merged[name] = max(merged.get(name, 0), b)
    # containers of the decoder stack grow with depth: report per-instance modules only
    stacks = {name.split(".layers.*")[0] for name in merged if ".layers.*" in name or name.startswith("layers.*")}
    stacks |= {name.split(".blocks.*")[0] for name in merged if ".blocks.*" in name}  # Qwen-VL's vision tower
    merged = {k: v for k, v in merged.items() if k not in stacks and not any(s.startswith(k + ".") for s in stacks)}
    return sorted(merged.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]


__all__ = ["top_modules"]
