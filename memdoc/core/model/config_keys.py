"""The spellings of an architecture number across HF config families, in one table.

Field names differ between families (GPT-2 says `n_embd`, older configs `n_layer`, …). The
model spec (`memdoc.core.model.model_spec`) and the tracer (`memdoc.probe.tracer`) read configs
through this table.
"""

from __future__ import annotations

CONFIG_KEYS: dict[str, tuple[str, ...]] = {
    "hidden_size": ("hidden_size", "n_embd", "d_model"),
    "num_layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
    "num_heads": ("num_attention_heads", "n_head"),
    "vocab_size": ("vocab_size",),
}
"""Each architecture number and the config keys that may hold it, in order of preference."""


def config_value(config: dict, name: str):
    """The first value present (not None) among the spellings of `name`, or None."""
    for key in CONFIG_KEYS[name]:
        if config.get(key) is not None:
            return config[key]
    return None


__all__ = ["CONFIG_KEYS", "config_value"]
