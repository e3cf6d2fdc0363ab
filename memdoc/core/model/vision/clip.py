"""CLIP: the tower of LLaVA-1.5. transformers 5.24 `modeling_clip.py` `CLIPVisionModel`."""

from __future__ import annotations

from memdoc.core.model.vision import siglip
from memdoc.core.model.vision.records import Tower, TowerSize, linear, square

DEFAULTS = siglip.DEFAULTS | {"patch_size": 32}
"""`configuration_clip.py` `CLIPVisionConfig`'s defaults."""


def _count(v: dict) -> TowerSize:
    """A class embedding, Conv2d patch embed without bias, a learned position per patch and the class token,
    `pre_layrnorm`, SigLIP-like LayerNorm blocks, `post_layernorm`."""
    c = DEFAULTS | v
    h, i, layers = int(c["hidden_size"]), int(c["intermediate_size"]), int(c["num_hidden_layers"])
    p, image = square(c["patch_size"]), square(c["image_size"])
    block = 4 * h + 4 * linear(h, h) + linear(h, i) + linear(i, h)
    embeddings = h + int(c["num_channels"]) * p * p * h + ((image // p) ** 2 + 1) * h
    params = embeddings + 2 * h + layers * block + 2 * h
    return TowerSize(layers, h, int(c["num_attention_heads"]), i, p, image, params)


TOWER = Tower(
    kind="clip",
    count=_count,
    attention=siglip.ATTENTION,  # CLIPAttention
    mlp=siglip.MLP,  # CLIPMLP
    repeats=False,  # identical blocks, but the two-depth trace is not checked on it yet: traced whole
    source="modeling_clip.py CLIPVisionModel",
)
