"""`VisionSpec`: the vision parts of a vision-language model, and their exact parameter counts.

Read from a VLM's `config.json` (`vision_config` plus the top-level projector keys) without torch.
Each count is the sum of the modules transformers 5.24 builds (the `modeling_*.py` named on each
function); `tests/unit/test_vision_params.py` builds every catalog VLM on the meta device and asserts
equality per part. The encoder is the vision tower (patch embedding, position embeddings, blocks,
final norm); the projector is what maps its output into the language model's embedding space
(Qwen-VL's merger and DeepStack mergers, LLaVA's MLP, Gemma 3's projection, Idefics3's connector,
Mistral 3's patch merger and MLP, Llama-3.2-Vision's linear projection).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from memdoc.errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class VisionSpec:
    """The vision encoder and projector of a VLM: the sizes memory depends on, counts exact."""

    kind: str
    """The vision tower's architecture: qwen2_5_vl, qwen3_vl, siglip, idefics3, pixtral, mllama or clip."""
    layers: int
    """Encoder blocks (Llama-3.2-Vision: the local transformer; `global_layers` more follow)."""
    hidden_size: int
    num_heads: int
    intermediate_size: int
    patch_size: int
    temporal_patch_size: int = 1
    """Frames per patch (Qwen-VL's Conv3d); 1 for image-only towers."""
    image_size: int | None = None
    """The tower's native square image side (None: dynamic resolution, Qwen-VL)."""
    merge: int = 1
    """Patches merged per side into one token: Qwen-VL's `spatial_merge_size`, Mistral 3's patch merger,
    Idefics3's pixel-shuffle `scale_factor`, Gemma 3's average-pool kernel; 1: none."""
    global_layers: int = 0
    """Llama-3.2-Vision's gated global transformer layers (after the local ones)."""
    max_tiles: int = 1
    """Llama-3.2-Vision: image tiles per image (`max_num_tiles`)."""
    projector_in: int = 0
    """Width of the projector's input (vision hidden × merged patches or feature layers)."""
    projector_out: int = 0
    """Width of the projector's output: the language model's hidden size."""
    cross_attention_layers: tuple[int, ...] = ()
    """Llama-3.2-Vision: indices of the decoder's cross-attention layers (in `text_config`)."""
    image_token_id: int | None = None
    tokens_per_image: int | None = None
    """Fixed image tokens (Gemma 3's `mm_tokens_per_image`); None where the count depends on the image."""
    encoder_params: int
    """The vision tower without the projector."""
    projector_params: int
    cross_attention_params: int = 0
    """Llama-3.2-Vision: the cross-attention decoder layers (they sit inside the language model)."""
    config: dict = field(default_factory=dict, repr=False, compare=False)
    """The whole VLM config.json."""

    @property
    def params(self) -> int:
        """Encoder and projector (the cross-attention layers count with the language model)."""
        return self.encoder_params + self.projector_params


def _linear(i: int, o: int, bias: bool = True) -> int:
    return i * o + (o if bias else 0)


def _size(value) -> int:
    """A size that configs give as an int or a [height, width] pair (square here)."""
    return int(value[0] if isinstance(value, (list, tuple)) else value)


@dataclass(frozen=True)
class Tower:
    """What every encoder counter returns: the sizes and the encoder's parameters."""

    layers: int
    hidden: int
    heads: int
    inter: int
    patch: int
    image: int | None
    params: int
    temporal: int = 1


def _qwen2_5_vl(v: dict) -> Tower:
    """`modeling_qwen2_5_vl.py` `Qwen2_5_VisionTransformerPretrainedModel` (merger excluded): Conv3d patch embed
    without bias; blocks of two RMSNorms, fused qkv and proj with biases, a gated MLP with biases."""
    h, i, depth = int(v.get("hidden_size", 3584)), int(v.get("intermediate_size", 3420)), int(v.get("depth", 32))
    p, t = int(v.get("patch_size", 14)), int(v.get("temporal_patch_size", 2))
    block = 2 * h + _linear(h, 3 * h) + _linear(h, h) + 2 * _linear(h, i) + _linear(i, h)
    patch = int(v.get("in_channels", v.get("in_chans", 3))) * t * p * p * h
    return Tower(depth, h, int(v.get("num_heads", 16)), i, p, None, patch + depth * block, t)


def _qwen3_vl(v: dict) -> Tower:
    """`modeling_qwen3_vl.py` `Qwen3VLVisionModel` (mergers excluded): Conv3d patch embed with bias, learned
    position embeddings, blocks of two LayerNorms, fused qkv and proj, a two-matrix MLP, all with biases."""
    h, i, depth = int(v.get("hidden_size", 1152)), int(v.get("intermediate_size", 4304)), int(v.get("depth", 27))
    p, t = int(v.get("patch_size", 16)), int(v.get("temporal_patch_size", 2))
    block = 4 * h + _linear(h, 3 * h) + _linear(h, h) + _linear(h, i) + _linear(i, h)
    patch = int(v.get("in_channels", 3)) * t * p * p * h + h
    positions = int(v.get("num_position_embeddings", 2304)) * h
    return Tower(depth, h, int(v.get("num_heads", 16)), i, p, None, patch + positions + depth * block, t)


_SIGLIP_DEFAULTS = {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12, "num_attention_heads": 12}
_SIGLIP_DEFAULTS |= {"num_channels": 3, "image_size": 224, "patch_size": 16}
"""`configuration_siglip.py` `SiglipVisionConfig`'s defaults (Idefics3's differ: `_IDEFICS3_DEFAULTS`)."""
_IDEFICS3_DEFAULTS = _SIGLIP_DEFAULTS | {"hidden_size": 1152, "num_attention_heads": 16, "patch_size": 32}
"""`configuration_idefics3.py` `Idefics3VisionConfig`'s defaults."""
_PIXTRAL_DEFAULTS = _SIGLIP_DEFAULTS | {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24}
_PIXTRAL_DEFAULTS |= {"num_attention_heads": 16, "image_size": 1024, "patch_size": 16}
"""`configuration_pixtral.py` `PixtralVisionConfig`'s defaults."""


def _siglip_like(v: dict, defaults: dict, *, head: bool) -> Tower:
    """`modeling_siglip.py` `SiglipVisionTransformer` / `modeling_idefics3.py` `Idefics3VisionTransformer`:
    Conv2d patch embed with bias, a learned position per patch, LayerNorm blocks with biased q/k/v/out and
    fc1/fc2, a post-LayerNorm; SigLIP's attention-pooling head when `vision_use_head`."""
    c = defaults | v
    h, i, layers = int(c["hidden_size"]), int(c["intermediate_size"]), int(c["num_hidden_layers"])
    p, image = _size(c["patch_size"]), _size(c["image_size"])
    block = 4 * h + 4 * _linear(h, h) + _linear(h, i) + _linear(i, h)
    embeddings = _linear(int(c["num_channels"]) * p * p, h) + (image // p) ** 2 * h
    pooling = h + _linear(h, 3 * h) + _linear(h, h) + 2 * h + _linear(h, i) + _linear(i, h) if head else 0
    params = embeddings + layers * block + 2 * h + pooling
    return Tower(layers, h, int(c["num_attention_heads"]), i, p, image, params)


def _siglip(v: dict) -> Tower:
    return _siglip_like(v, _SIGLIP_DEFAULTS, head=bool(v.get("vision_use_head", True)))


def _idefics3(v: dict) -> Tower:
    return _siglip_like(v, _IDEFICS3_DEFAULTS, head=False)


def _pixtral(v: dict) -> Tower:
    """`modeling_pixtral.py` `PixtralVisionModel`: Conv2d patch embed without bias, `ln_pre` RMSNorm, blocks
    of two RMSNorms, q/k/v/o and a gated MLP, no biases (2-D RoPE: no position parameters)."""
    c = _PIXTRAL_DEFAULTS | v
    h, i, layers = int(c["hidden_size"]), int(c["intermediate_size"]), int(c["num_hidden_layers"])
    p = _size(c["patch_size"])
    block = 2 * h + 4 * h * h + 3 * h * i
    params = int(c["num_channels"]) * p * p * h + h + layers * block
    return Tower(layers, h, int(c["num_attention_heads"]), i, p, _size(c["image_size"]), params)


_CLIP_DEFAULTS = _SIGLIP_DEFAULTS | {"patch_size": 32}
"""`configuration_clip.py` `CLIPVisionConfig`'s defaults."""


def _clip(v: dict) -> Tower:
    """`modeling_clip.py` `CLIPVisionModel`: a class embedding, Conv2d patch embed without bias, a learned position
    per patch and the class token, `pre_layrnorm`, SigLIP-like LayerNorm blocks, `post_layernorm`."""
    c = _CLIP_DEFAULTS | v
    h, i, layers = int(c["hidden_size"]), int(c["intermediate_size"]), int(c["num_hidden_layers"])
    p, image = _size(c["patch_size"]), _size(c["image_size"])
    block = 4 * h + 4 * _linear(h, h) + _linear(h, i) + _linear(i, h)
    embeddings = h + int(c["num_channels"]) * p * p * h + ((image // p) ** 2 + 1) * h
    params = embeddings + 2 * h + layers * block + 2 * h
    return Tower(layers, h, int(c["num_attention_heads"]), i, p, image, params)


_MLLAMA_DEFAULTS = {"hidden_size": 1280, "intermediate_size": 5120, "num_hidden_layers": 32, "num_global_layers": 8}
_MLLAMA_DEFAULTS |= {"attention_heads": 16, "num_channels": 3, "image_size": 448, "patch_size": 14, "max_num_tiles": 4}
"""`configuration_mllama.py` `MllamaVisionConfig`'s defaults (8 supported aspect ratios)."""


def _mllama(v: dict) -> Tower:
    """`modeling_mllama.py` `MllamaVisionModel`: Conv2d patch embed without bias, a class embedding, gated position
    and tile-position embeddings (per aspect-ratio id), pre/post LayerNorms, local LayerNorm blocks (q/k/v/o
    without bias, fc1/fc2 with), then gated global blocks (two gate scalars each)."""
    c = _MLLAMA_DEFAULTS | v
    h, i = int(c["hidden_size"]), int(c["intermediate_size"])
    local, glob = int(c["num_hidden_layers"]), int(c["num_global_layers"])
    p, image, tiles = _size(c["patch_size"]), _size(c["image_size"]), int(c["max_num_tiles"])
    ratios = len(c.get("supported_aspect_ratios") or range(8)) + 1
    patches = (image // p) ** 2 + 1  # + the class token
    positions = 1 + patches * h + ratios * tiles * patches * h
    tile_positions = 2 * (ratios * tiles * h + 1)
    block = 4 * h + 4 * h * h + _linear(h, i) + _linear(i, h)
    embeddings = int(c["num_channels"]) * p * p * h + h + positions + tile_positions + 4 * h
    params = embeddings + local * block + glob * (block + 2)
    return Tower(local, h, int(c["attention_heads"]), i, p, image, params)


_TOWERS: dict[str, Callable[[dict], Tower]] = {
    "mllama": _mllama,
    "clip": _clip,
    "qwen2_5_vl": _qwen2_5_vl,
    "qwen3_vl": _qwen3_vl,
    "siglip": _siglip,
    "idefics3": _idefics3,
    "pixtral": _pixtral,
}


def tower_kind(vision: dict, default: str) -> str:
    """The encoder architecture of a `vision_config`: by its model_type, as transformers' AutoModel picks it, else
    `default` (the VLM config class's own vision config)."""
    model_type = str(vision.get("model_type") or default)
    for kind in ("qwen2_5_vl", "qwen3_vl", "siglip", "idefics3", "pixtral", "mllama", "clip"):
        if model_type.startswith(kind):
            return kind
    raise ConfigError(f"vision_config model_type {model_type!r} is not a vision tower memdoc counts")


def count_tower(vision: dict, kind: str) -> Tower:
    """Sizes and exact parameters of the vision encoder of architecture `kind` described by `vision`."""
    return _TOWERS[kind](vision)
