"""`ModelSpec`: the architecture numbers of an HF config that memory depends on.

Built from a plain `config.json` dict without importing torch or transformers. Field names
differ between families (GPT-2 says `n_embd`, Falcon `num_kv_heads`, …); `memdoc.core.model.config_keys`
lists every spelling read. A config that lacks a required number raises `ConfigError` naming the key.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from memdoc.core.model.config_check import check_config
from memdoc.core.model.config_keys import CONFIG_KEYS, config_value
from memdoc.core.model.families import FAMILIES, Family, HeadDim, Layout, family_of
from memdoc.core.model.params import LayerLayout, ParamCounts, count_params, generic_layout, layer_groups, layer_layout
from memdoc.core.model.vision.registry import image_family
from memdoc.core.model.vision.spec import VisionSpec
from memdoc.errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """What memdoc knows about one model. Counts are exact (see `memdoc.core.model.params`)."""

    id: str
    """The id the user gave, normalised to the catalog's spelling when found there."""
    model_type: str
    """HF `model_type` (llama, qwen2, mixtral, …)."""
    family: str
    """memdoc's architecture family (a key of `FAMILIES`); its facts are `arch`."""
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    """Dense MLP width (for MoE models: the width of dense layers, if any)."""
    vocab_size: int
    max_positions: int | None
    """Context length the model was trained for (`max_position_embeddings`), if stated."""
    tie_embeddings: bool
    num_experts: int = 0
    """Routed experts per MoE layer (0 for dense models)."""
    experts_per_token: int = 0
    """Routed experts each token visits (top-k)."""
    moe_intermediate_size: int = 0
    """Width of one routed expert's MLP."""
    params: ParamCounts
    """Exact parameter counts by component."""
    source: str = "catalog"
    """Where the config came from: local, cache, catalog or hub."""
    config_of: str | None = None
    """For a fine-tuned variant billed with its base's catalog config (`id` stays the variant's): the base id."""
    config: dict = field(default_factory=dict, repr=False, compare=False)
    """The raw config.json dict (a VLM's: its language model's config, `vision.vlm.text_config_of`)."""
    vision: VisionSpec | None = None
    """A VLM's vision encoder and projector (`memdoc.core.model.vision.vlm`); None for text models."""
    transformers: str | None = None
    """The transformers release whose modelling code runs (the stack's); None: the newest memdoc knows."""

    @property
    def arch(self) -> Family:
        """The family's record as `transformers` builds it: layout, norms, MLP shape, defaults and quirks
        (`memdoc.core.model.families`, `Family.as_of`)."""
        return FAMILIES[self.family].as_of(self.transformers)

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    @functools.cached_property
    def layer_groups(self) -> tuple[tuple[int, LayerLayout, int], ...]:
        """The distinct decoder-layer layouts as (first index, layout, number of layers), in order.

        At most two (dense and MoE layers): every per-layer sum is a sum over these groups, so
        the cost never scales with `num_layers`. Unknown families get a generic decoder layer
        built from the config's sizes (q/k/v/o projections, a two-matrix MLP): their parameter
        counts come from the meta device, and the activation estimate for them is only as good
        as that generic shape (the bill says so).
        """
        if not self.arch.has_layout:
            generic = generic_layout(self.hidden_size, self.q_dim, self.kv_dim, self.intermediate_size)
            return ((0, generic, self.num_layers),)
        return tuple(
            (index, layer_layout(self.config, self.arch, index), count)
            for index, count in layer_groups(self.config, self.arch, self.num_layers)
        )

    @property
    def layouts(self) -> LayerLayouts:
        """The layout of decoder layer i as `layouts[i]` (a lazy sequence over `layer_groups`)."""
        return LayerLayouts(self)

    @property
    def linear_names(self) -> frozenset[str]:
        """Names of the decoder's adaptable linear modules (as LoRA targets match them)."""
        if not self.arch.has_layout:
            return frozenset()
        names = set()
        for _, layout, _ in self.layer_groups:
            for linear in layout.linears:
                if linear.adaptable:
                    names.add(linear.name.split(".")[-1])
        return frozenset(names)

    @property
    def image_family(self) -> str:
        """The image processor's rules this model's checkpoints follow (`vision.registry.image_family`)."""
        if self.vision is None:
            return self.model_type
        return image_family(self.model_type, self.vision.kind, self.vision.image_size)

    @property
    def default_lora_targets(self) -> tuple[str, ...]:
        """The adapters peft puts on this architecture when none are named (its per-model defaults)."""
        return self.arch.lora_targets

    def summary(self) -> dict:
        """Plain-data form for --json and `memdoc models` (a VLM's also counts its parts)."""
        parts = {}
        if self.vision is not None:
            parts = {
                "vision_params": self.params.vision,
                "projector_params": self.params.projector,
                "language_params": self.params.language,
            }
        return {
            "id": self.id,
            "model_type": self.model_type,
            "params": self.params.total,
            "active_params": self.params.active,
            "layers": self.num_layers,
            "hidden": self.hidden_size,
            "heads": self.num_heads,
            "kv_heads": self.num_kv_heads,
            "vocab": self.vocab_size,
            "context": self.max_positions,
            "experts": f"{self.experts_per_token}/{self.num_experts}" if self.is_moe else None,
            **parts,
        }


class LayerLayouts:
    """`model.layouts[i]`: decoder layer i's layout, looked up in the model's layer groups."""

    def __init__(self, model: ModelSpec):
        self._model = model

    def __len__(self) -> int:
        return self._model.num_layers

    def __getitem__(self, index: int) -> LayerLayout:
        if not -len(self) <= index < len(self):
            raise IndexError(index)
        index %= len(self)
        groups = self._model.layer_groups
        if len(groups) == 1:
            return groups[0][1]
        return layer_layout(self._model.config, self._model.arch, index)


def _get(config: dict, name: str, model_id: str) -> int:
    value = config_value(config, name)
    if value is None:
        raise ConfigError(f"config of {model_id} has no {' / '.join(CONFIG_KEYS[name])}")
    return int(value)


def spec_from_config(
    config: dict, *, model_id: str, source: str = "catalog", params: ParamCounts | None = None
) -> ModelSpec:
    """Read the architecture numbers out of an HF config dict (raises ConfigError when malformed).

    `params` overrides the analytic count (used for architectures without an analytic layout).
    """
    check_config(config, model_id=model_id)
    model_type = config["model_type"]
    family = family_of(model_type)
    check_config(config, model_id=model_id, family=family)
    hidden = _get(config, "hidden_size", model_id)
    layers = _get(config, "num_layers", model_id)
    heads = _get(config, "num_heads", model_id)
    vocab = _get(config, "vocab_size", model_id)
    kv_heads = int(
        config.get("num_key_value_heads")
        or config.get("num_kv_heads")
        or (1 if config.get("multi_query") else None)
        or heads
    )
    if family.layout is Layout.FALCON and not config.get("new_decoder_architecture"):
        kv_heads = 1 if config.get("multi_query", True) else heads  # num_kv_heads only counts in the new layout
    head_dim = int(config.get("head_dim") or hidden // heads)
    if family.head_dim is HeadDim.MLA:
        head_dim = int(config["qk_nope_head_dim"]) + int(config["qk_rope_head_dim"])
    intermediate = int(
        config.get("intermediate_size")
        or config.get("n_inner")
        or config.get("ffn_hidden_size")
        or config.get("ffn_dim")
        or 4 * hidden
    )
    params = params or count_params(config, family=family, model_id=model_id)
    num_experts = int(
        config.get("num_local_experts") or config.get("num_experts") or config.get("n_routed_experts") or 0
    )
    return ModelSpec(
        id=model_id,
        model_type=model_type,
        family=family.name,
        hidden_size=hidden,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=intermediate,
        vocab_size=vocab,
        max_positions=config.get("max_position_embeddings") or config.get("n_positions") or config.get("seq_length"),
        tie_embeddings=bool(config.get("tie_word_embeddings", family.tied_default)),
        num_experts=num_experts,
        experts_per_token=int(config.get("num_experts_per_tok") or 0) if num_experts else 0,
        moe_intermediate_size=int(config.get("moe_intermediate_size") or intermediate) if num_experts else 0,
        params=params,
        source=source,
        config=config,
    )


def model_json(model: ModelSpec, trainable_params: int | None) -> dict:
    """The one --json shape of a model in every command (docs/output.md, "One shape per concept"): its id,
    its total parameters and those the plan trains (0 for inference, None where the rows of a report train
    different counts); a vision-language model's parts as well."""
    parts = {}
    if model.vision is not None:
        parts = {"vision_params": model.params.vision, "projector_params": model.params.projector}
        parts["language_params"] = model.params.language
    return {"id": model.id, "params": model.params.total, "trainable_params": trainable_params, **parts}
