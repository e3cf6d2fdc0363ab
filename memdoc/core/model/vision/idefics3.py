"""Idefics3 and SmolVLM: a SigLIP-copy tower, the pixel-shuffle connector, split tiles plus a global view.

transformers 5.24 `modeling_idefics3.py` `Idefics3VisionTransformer`, `Idefics3Connector`,
`configuration_idefics3.py`, `processing_idefics3.py` `Idefics3Processor` (SmolVLM's processor is its copy).
"""

from __future__ import annotations

from memdoc.core.model.vision import siglip, tiling
from memdoc.core.model.vision.records import (
    ImageTokens,
    Projector,
    ProjectorShape,
    Tower,
    TowerSize,
    VisionRules,
    Vlm,
)

DEFAULTS = siglip.DEFAULTS | {"hidden_size": 1152, "num_attention_heads": 16, "patch_size": 32}
"""`Idefics3VisionConfig`'s defaults."""

TOWER = Tower(
    kind="idefics3",
    count=lambda v: siglip.count_siglip_like(v, DEFAULTS, head=False),
    attention=siglip.ATTENTION,  # Idefics3VisionAttention
    mlp=siglip.MLP,  # Idefics3VisionMLP
    source="modeling_idefics3.py Idefics3VisionTransformer",
)


def _connector(config: dict, t: TowerSize, out: int) -> tuple[int, int, int]:
    """`Idefics3Connector`: pixel shuffle by `scale_factor`, Linear(h·s², out) without bias."""
    s = int(config.get("scale_factor", 2))
    return t.hidden * s * s * out, s, t.hidden * s * s


VLM = Vlm(
    model_type="idefics3",
    tower="idefics3",
    text_type="llama",
    projector=Projector(count=_connector, shape=ProjectorShape.LINEAR, linears=("proj",)),  # Idefics3SimpleMLP
    tower_path="vision_model",
    projector_paths=("connector",),
    source="configuration_idefics3.py Idefics3Config",
)


def _image(height: int, width: int, rules: VisionRules, _pan: bool) -> ImageTokens:
    """Split into rows × cols tiles of `max_image_size` plus a global view (or one view), each `image_seq_len`
    tokens after pixel shuffle (`Idefics3Processor`, `get_image_prompt_string`)."""
    rows, cols = tiling.idefics3_grid(height, width, rules.longest_edge, rules.tile)
    views = rows * cols + 1 if rows else 1
    return ImageTokens(
        text=views * rules.tokens_per_view, encoder=views * (rules.tile // rules.patch) ** 2, views=views
    )


def _rules(tile: int, tokens_per_view: int) -> VisionRules:
    return VisionRules(
        "idefics3", _image, 14, tile=tile, longest_edge=4 * tile, tokens_per_view=tokens_per_view,
        tile_from_checkpoint=True,
    )  # fmt: skip


RULES = _rules(364, 169)
"""HuggingFaceM4/Idefics3-8B-Llama3: size longest_edge 4×364, max_image_size 364, image_seq_len 169 (26×26 / 2²)."""
SMOLVLM_RULES = _rules(384, 81)
"""HuggingFaceTB/SmolVLM2-2.2B-Instruct: size longest_edge 4×384, max_image_size 384, image_seq_len 81 (27² / 3²)."""
