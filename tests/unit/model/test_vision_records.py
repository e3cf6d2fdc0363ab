"""Every tower, VLM and processor record answers every field, each answer checked against transformers' own build.

One catalog VLM per tower kind is built on the meta device (`AutoModelForImageTextToText.from_config`, transformers
5.24 as installed); its vision tower's first block is read for the linears (names and shapes), the norm classes, the
MLP's gate, the fused qkv, the `GradientCheckpointingLayer` base; the tower's children for rotary embeddings and a
final LayerNorm; the config classes for defaults. `TOWER_CHECKS` and `VLM_CHECKS` name a check for every field of
`Tower` and `Vlm`: a field added to a record without its check fails `test_every_field_has_a_check`.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import importlib

import pytest

from memdoc.core.model.vision.records import Tower, Vlm
from memdoc.core.model.vision.registry import RULES, TOWERS, VLMS, tower_kind
from memdoc.core.model.vision.vlm import is_vlm
from memdoc.resolve.models import catalog_config, catalog_ids

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.slow  # one meta-device build per tower kind and VLM type

VLM_IDS = sorted(i for i in set(catalog_ids().values()) if is_vlm(catalog_config(i)))
_TOWER_ROOTS = ("model.visual", "model.vision_tower", "model.vision_model")


@functools.cache
def _built(model_id: str):
    """The catalog model on the meta device, its language model cut to 4 layers (the vision parts whole)."""
    from transformers import AutoConfig, AutoModelForImageTextToText

    config = copy.deepcopy(catalog_config(model_id))
    text = config.get("text_config") or config
    text["num_hidden_layers"] = 4
    text.pop("layer_types", None)
    if "cross_attention_layers" in text:
        text["cross_attention_layers"] = [3]
    with torch.device("meta"):
        return AutoModelForImageTextToText.from_config(AutoConfig.for_model(**config))


def _tower_module(model):
    """The vision tower, by the module paths transformers 5.24's VLM classes give it."""
    return next(module for name, module in model.named_modules() if name in _TOWER_ROOTS)


def _first_of(vlm_ids, key):
    """{key(model_id): the first catalog model_id with it}."""
    out: dict = {}
    for model_id in vlm_ids:
        out.setdefault(key(model_id), model_id)
    return out


def _kind_of(model_id: str) -> str:
    config = catalog_config(model_id)
    return tower_kind(config.get("vision_config") or {}, VLMS[config["model_type"]].tower)


TOWER_MODELS = _first_of(VLM_IDS, _kind_of)
"""Tower kind → the catalog model that shows it."""
VLM_MODELS = _first_of(VLM_IDS, lambda i: catalog_config(i)["model_type"])
"""VLM model_type → the catalog model that shows it."""


@dataclasses.dataclass
class Built:
    """What transformers builds of one tower: its module, its config, its blocks and the first block's parts."""

    tower: object
    config: object
    blocks: list
    linears: dict  # name (last part) -> (in, out)
    attention: set
    children: dict

    @classmethod
    def of(cls, model_id: str) -> Built:
        model = _built(model_id)
        tower = _tower_module(model)
        blocks = max((m for m in tower.modules() if isinstance(m, torch.nn.ModuleList)), key=len)
        first = blocks[0]
        linears = {
            name.split(".")[-1]: (m.in_features, m.out_features)
            for name, m in first.named_modules()
            if isinstance(m, torch.nn.Linear)
        }
        attention = {
            name.split(".")[-1]
            for name, m in first.named_modules()
            if isinstance(m, torch.nn.Linear) and ("attn" in name or "attention" in name)
        }
        return cls(tower, tower.config, list(blocks), linears, attention, dict(first.named_children()))


def _class_in(source: str, modules) -> bool:
    """`source` ("modeling_x.py ClassName") names the class of one of `modules`, defined in that file."""
    filename, class_name = source.split()[:2]
    for module in modules:
        cls = type(module)
        if cls.__name__ == class_name and importlib.import_module(cls.__module__).__file__.endswith(filename):
            return True
    return False


def _final_layernorm(b: Built) -> bool:
    """A LayerNorm over the tower's hidden size after its blocks: `post_layernorm` / `layernorm_post`, or (Qwen3-VL,
    no post norm) its merger's LayerNorm over the N encoder tokens."""
    post = [m for n, m in b.tower.named_children() if "post" in n and isinstance(m, torch.nn.LayerNorm)]
    merger = getattr(b.tower, "merger", None)
    merger_norm = getattr(merger, "norm", None)
    hidden = b.config.hidden_size
    return bool(post) or (isinstance(merger_norm, torch.nn.LayerNorm) and merger_norm.normalized_shape == (hidden,))


def _other_roles(b: Built) -> bool:
    """Blocks with roles beyond the repeating stack: DeepStack taps (Qwen3-VL), a global transformer (mllama)."""
    return bool(getattr(b.config, "deepstack_visual_indexes", None)) or hasattr(b.tower, "global_transformer")


TOWER_CHECKS = {
    "kind": lambda t, b: b.config.model_type.startswith(t.kind),
    "count": lambda t, b: (
        t.count(b.config.to_dict()).layers == len(b.blocks)
        and t.count(b.config.to_dict()).hidden == b.config.hidden_size
    ),
    "attention": lambda t, b: set(t.attention) == b.attention,
    "mlp": lambda t, b: set(t.mlp) == set(b.linears) - b.attention,
    "fused_qkv": lambda t, b: t.fused_qkv == ("qkv" in b.linears),
    "rms_norm": lambda t, b: t.rms_norm == any("RMSNorm" in type(m).__name__ for m in b.children.values()),
    "gated_mlp": lambda t, b: t.gated_mlp == ("gate_proj" in b.linears),
    "rotary": lambda t, b: t.rotary == any("Rotary" in type(m).__name__ for m in b.tower.children()),
    "final_norm": lambda t, b: t.final_norm == _final_layernorm(b),
    "checkpointed": lambda t, b: t.checkpointed == _is_checkpoint_layer(b.blocks[0]),
    "depth_key": lambda t, b: getattr(b.config, t.depth_key) == len(b.blocks),
    "repeats": lambda t, b: not (t.repeats and _other_roles(b)),  # one way: CLIP's identical blocks trace whole
    "full_attention": lambda t, b: (
        t.full_attention
        == (tuple(type(b.config)().fullatt_block_indexes) if hasattr(b.config, "fullatt_block_indexes") else None)
    ),
    "out_hidden": lambda t, b: t.out_hidden == hasattr(b.config, "out_hidden_size"),
    "source": lambda t, b: _class_in(t.source, b.tower.modules()),
}
"""Tower field → its check against the build. The linears' shapes: `test_linears_are_the_built_ones`."""


def _is_checkpoint_layer(block) -> bool:
    from transformers.modeling_layers import GradientCheckpointingLayer

    return isinstance(block, GradientCheckpointingLayer)


def test_every_field_has_a_check():
    assert set(TOWER_CHECKS) == {f.name for f in dataclasses.fields(Tower)}
    assert set(VLM_CHECKS) == {f.name for f in dataclasses.fields(Vlm)}


def test_every_tower_and_vlm_is_shown_by_a_catalog_model():
    assert set(TOWER_MODELS) == set(TOWERS)
    assert set(VLM_MODELS) == set(VLMS)


@pytest.mark.parametrize("field", sorted(TOWER_CHECKS))
@pytest.mark.parametrize("kind", sorted(TOWERS))
def test_every_tower_answers_every_field(kind, field):
    assert TOWER_CHECKS[field](TOWERS[kind], Built.of(TOWER_MODELS[kind]))


@pytest.mark.parametrize("kind", sorted(TOWERS))
def test_linears_are_the_built_ones(kind):
    b = Built.of(TOWER_MODELS[kind])
    shapes = TOWERS[kind].linears(b.config.hidden_size, b.config.intermediate_size)
    assert {name: (i, o) for name, i, o in shapes} == b.linears


def _projector_module(model):
    names = ("model.visual.merger", "model.multi_modal_projector", "model.connector")
    return next(module for name, module in model.named_modules() if name in names)


def _projector_linears(vlm: Vlm, model_id: str) -> bool:
    """The projector record's linears are the built projector's `nn.Linear`s, with their shapes."""
    from memdoc.core.model.vision.vlm import vlm_spec_from_config

    vision = vlm_spec_from_config(catalog_config(model_id), model_id=model_id).vision
    module = _projector_module(_built(model_id))
    built = [
        (name.split(".")[-1] or "multi_modal_projector", m.in_features, m.out_features)  # mllama's is one Linear
        for name, m in module.named_modules()
        if isinstance(m, torch.nn.Linear)
    ]
    return vlm.projector.linear_shapes(vision.projector_in, vision.projector_out) == built


def _config_class(vlm: Vlm, **kwargs):
    from transformers import AutoConfig

    return AutoConfig.for_model(vlm.model_type, **kwargs)


def _embedding_rows(model_id: str) -> int:
    model = _built(model_id)
    return model.get_input_embeddings().num_embeddings - model.config.get_text_config().vocab_size


def _tower_at_path(vlm: Vlm, model_id: str) -> bool:
    """The module at `tower_path` is the tower: the class its Tower record names."""
    tower = TOWERS[_kind_of(model_id)]
    return _class_in(tower.source, [_built(model_id).model.get_submodule(vlm.tower_path)])


def _projector_at_paths(vlm: Vlm, model_id: str) -> bool:
    """The parameters under `projector_paths` (and LLaVA-OneVision's bare `image_newline`) are the projector's."""
    from memdoc.core.model.vision.vlm import vlm_spec_from_config

    base = _built(model_id).model
    params = sum(p.numel() for path in vlm.projector_paths for p in base.get_submodule(path).parameters())
    params += getattr(base, "image_newline", torch.zeros(0)).numel()
    return params == vlm_spec_from_config(catalog_config(model_id), model_id=model_id).vision.projector_params


def _ties_from_text(vlm: Vlm) -> bool:
    """A `text_config` with `tie_word_embeddings` true ties the model (the config class forwards it)."""
    return bool(getattr(_config_class(vlm, text_config={"tie_word_embeddings": True}), "tie_word_embeddings", False))


VLM_CHECKS = {
    "model_type": lambda v, i: catalog_config(i)["model_type"] == v.model_type,
    "tower": lambda v, i: (
        tower_kind({"model_type": _config_class(v).vision_config.model_type}, "") == tower_kind({}, v.tower)
    ),
    "text_type": lambda v, i: _config_class(v).get_text_config().model_type == v.text_type,
    "projector": _projector_linears,
    "tower_path": _tower_at_path,
    "projector_paths": _projector_at_paths,
    "tied": lambda v, i: v.tied is bool(getattr(_config_class(v), "tie_word_embeddings", False)),
    "tie_from_text": lambda v, i: v.tied or v.tie_from_text == _ties_from_text(v),
    "tokens_per_image": lambda v, i: (
        (v.tokens_per_image is not None) == hasattr(_config_class(v), "mm_tokens_per_image")
    ),
    "extra_embeddings": lambda v, i: _embedding_rows(i) == v.extra_embeddings,
    "cross_attention": lambda v, i: (
        v.cross_attention == tuple(getattr(_config_class(v).get_text_config(), "cross_attention_layers", None) or ())
    ),
    "source": lambda v, i: _class_in(v.source, [_config_class(v)]),
}
"""Vlm field → its check against the config class and the build (`tied`: MllamaConfig has no such attribute, and
`PreTrainedModel.get_expanded_tied_weights_keys` then reads False)."""


KNOWN_DISAGREEMENTS = {
    ("mistral3", "projector"): "`Mistral3PatchMerger.merging_layer` (Linear(h·m², h), no bias) is not among the "
    "projector record's linears, so LoRA on the projector and `vision_linear_params` miss it; its parameters are "
    "counted (`mistral3._projector`). Fixing it changes Mistral 3's LoRA bills: a change of its own",
}
"""(VLM model_type, field) → why the record disagrees with transformers today (strict xfail: fails once fixed)."""


def _vlm_cases():
    for model_type in sorted(VLMS):
        for field in sorted(VLM_CHECKS):
            why = KNOWN_DISAGREEMENTS.get((model_type, field))
            marks = [pytest.mark.xfail(reason=why, strict=True)] if why else []
            yield pytest.param(model_type, field, marks=marks, id=f"{model_type}-{field}")


@pytest.mark.parametrize(("model_type", "field"), list(_vlm_cases()))
def test_every_vlm_answers_every_field(model_type, field):
    assert VLM_CHECKS[field](VLMS[model_type], VLM_MODELS[model_type])


def test_every_processor_rule_is_checked_against_its_processor():
    """`tests/fidelity/test_image_tokens.py` runs each rule against the processor's own output."""
    assert set(RULES) <= {"qwen2_vl", *VLMS, "smolvlm", "pixtral"}
