"""SigLIP: the LayerNorm tower Gemma 3 and LLaVA-OneVision build on (Idefics3's is its copy, `idefics3.py`).

transformers 5.24 `modeling_siglip.py` `SiglipVisionTransformer`, `configuration_siglip.py` `SiglipVisionConfig`.
"""

from __future__ import annotations

from memdoc.core.model.vision.records import Tower, TowerSize, linear, square

DEFAULTS = {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12, "num_attention_heads": 12}
DEFAULTS |= {"num_channels": 3, "image_size": 224, "patch_size": 16}
"""`SiglipVisionConfig`'s defaults (Idefics3's, CLIP's and Pixtral's start from them)."""

ATTENTION = ("q_proj", "k_proj", "v_proj", "out_proj")
"""`SiglipAttention`'s linears (Idefics3's and CLIP's are named the same)."""
MLP = ("fc1", "fc2")
"""`SiglipMLP`'s linears."""


def count_siglip_like(v: dict, defaults: dict, *, head: bool) -> TowerSize:
    """`SiglipVisionTransformer` / `modeling_idefics3.py` `Idefics3VisionTransformer`: Conv2d patch embed with bias,
    a learned position per patch, LayerNorm blocks with biased q/k/v/out and fc1/fc2, a post-LayerNorm; SigLIP's
    attention-pooling head when `vision_use_head`."""
    c = defaults | v
    h, i, layers = int(c["hidden_size"]), int(c["intermediate_size"]), int(c["num_hidden_layers"])
    p, image = square(c["patch_size"]), square(c["image_size"])
    block = 4 * h + 4 * linear(h, h) + linear(h, i) + linear(i, h)
    embeddings = linear(int(c["num_channels"]) * p * p, h) + (image // p) ** 2 * h
    pooling = h + linear(h, 3 * h) + linear(h, h) + 2 * h + linear(h, i) + linear(i, h) if head else 0
    params = embeddings + layers * block + 2 * h + pooling
    return TowerSize(layers, h, int(c["num_attention_heads"]), i, p, image, params)


def _count(v: dict) -> TowerSize:
    return count_siglip_like(v, DEFAULTS, head=bool(v.get("vision_use_head", True)))


TOWER = Tower(
    kind="siglip",
    count=_count,
    attention=ATTENTION,
    mlp=MLP,
    source="modeling_siglip.py SiglipVisionModel",
)
