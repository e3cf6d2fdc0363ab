"""Llama-3.2-Vision (mllama): the tiled tower with gated global layers, the projection, cross-attention layers.

transformers 5.24 `modeling_mllama.py` `MllamaVisionModel`, `MllamaModel.multi_modal_projector`,
`MllamaCrossAttentionDecoderLayer`; `configuration_mllama.py`; `processing_mllama.py` `MllamaProcessor`.
"""

from __future__ import annotations

from memdoc.core.model.vision.records import (
    ImageTokens,
    Projector,
    ProjectorShape,
    Tower,
    TowerSize,
    VisionRules,
    Vlm,
    linear,
    square,
)

DEFAULTS = {"hidden_size": 1280, "intermediate_size": 5120, "num_hidden_layers": 32, "num_global_layers": 8}
DEFAULTS |= {"attention_heads": 16, "num_channels": 3, "image_size": 448, "patch_size": 14, "max_num_tiles": 4}
"""`MllamaVisionConfig`'s defaults (8 supported aspect ratios)."""


def _count(v: dict) -> TowerSize:
    """Conv2d patch embed without bias, a class embedding, gated position and tile-position embeddings (per
    aspect-ratio id), pre/post LayerNorms, local LayerNorm blocks (q/k/v/o without bias, fc1/fc2 with), then gated
    global blocks (two gate scalars each)."""
    c = DEFAULTS | v
    h, i = int(c["hidden_size"]), int(c["intermediate_size"])
    local, glob = int(c["num_hidden_layers"]), int(c["num_global_layers"])
    p, image, tiles = square(c["patch_size"]), square(c["image_size"]), int(c["max_num_tiles"])
    ratios = len(c.get("supported_aspect_ratios") or range(8)) + 1
    patches = (image // p) ** 2 + 1  # + the class token
    positions = 1 + patches * h + ratios * tiles * patches * h
    tile_positions = 2 * (ratios * tiles * h + 1)
    block = 4 * h + 4 * h * h + linear(h, i) + linear(i, h)
    embeddings = int(c["num_channels"]) * p * p * h + h + positions + tile_positions + 4 * h
    params = embeddings + local * block + glob * (block + 2)
    heads = int(c["attention_heads"])
    return TowerSize(local, h, heads, i, p, image, params, global_layers=glob, max_tiles=tiles)


TOWER = Tower(
    kind="mllama",
    count=_count,
    attention=("q_proj", "k_proj", "v_proj", "o_proj"),  # MllamaVisionAttention
    mlp=("fc1", "fc2"),  # MllamaVisionMLP
    checkpointed=False,  # MllamaVisionEncoderLayer is a plain nn.Module
    repeats=False,  # its global layers have another role: traced whole
    source="modeling_mllama.py MllamaVisionModel",
)


def _projector(config: dict, t: TowerSize, out: int) -> tuple[int, int, int]:
    """`MllamaModel.multi_modal_projector`: Linear(vision_output_dim, out) with bias."""
    width = int(config.get("vision_config", {}).get("vision_output_dim", 7680))
    return linear(width, out), 1, width


VLM = Vlm(
    model_type="mllama",
    tower="mllama_vision_model",
    text_type="mllama_text_model",
    projector=Projector(count=_projector, shape=ProjectorShape.LINEAR, linears=("multi_modal_projector",)),
    tower_path="vision_model",
    projector_paths=("multi_modal_projector",),
    extra_embeddings=8,  # MllamaTextModel.embed_tokens has vocab_size + 8 rows
    cross_attention=(3, 8, 13, 18, 23, 28, 33, 38),
    source="configuration_mllama.py MllamaConfig",
)


def cross_attention_params(layers: int, h: int, head_dim: int, q_dim: int, kv_dim: int, inter: int) -> int:
    """`MllamaCrossAttentionDecoderLayer`: q/k/v/o without bias, q/k RMSNorms over head_dim, two RMSNorms, two gate
    scalars and a gated MLP, per cross-attention layer."""
    return layers * (2 * h * q_dim + 2 * h * kv_dim + 2 * head_dim + 2 * h + 2 + 3 * h * inter)


def _image(_height: int, _width: int, rules: VisionRules, _pan: bool) -> ImageTokens:
    """The image tiled onto up to 4 tiles of 560² (`get_optimal_tiled_canvas`); pixel_values always hold
    `max_image_tiles` tiles (`pack_images`), so whatever the size the encoder runs on 4 tiles of 1600 patches + CLS,
    padded to a multiple of 8 (`MllamaVisionModel.forward`), and the cross-attention states hold 4 × 1601 per
    image; the text holds one <|image|> token (`MllamaProcessor`)."""
    per_tile = (rules.tile // rules.patch) ** 2 + int(rules.cls_token)
    padded = per_tile + (8 - per_tile % 8) % 8
    return ImageTokens(
        text=1, encoder=rules.max_tiles * padded, views=rules.max_tiles, cross=rules.max_tiles * per_tile
    )


RULES = VisionRules("mllama", _image, 14, tile=560, max_tiles=4, cls_token=True)
"""meta-llama/Llama-3.2-11B-Vision: size 560×560, max_image_tiles 4; one <|image|> token in the text."""
