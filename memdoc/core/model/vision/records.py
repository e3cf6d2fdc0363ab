"""The records a vision-language family is written in: a `Tower` (the vision encoder), a `Projector` (vision tokens
into the language model), a `Vlm` (one VLM `model_type`: its default tower, text model and projector) and a
`VisionRules` (its image processor: image → tokens, `ImageTokens`).

Every fact billing, the probe and the registry's users need about a tower or a VLM is a field here, so that no module
outside this package tells towers apart by their names. Each family's module (`qwen2_5_vl.py`, `siglip.py`, …)
fills the records after transformers' `modeling_*.py` and the checkpoints' processor configs, named on each entry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum


def linear(i: int, o: int, bias: bool = True) -> int:
    """Parameters of an `nn.Linear(i, o)`."""
    return i * o + (o if bias else 0)


def square(value) -> int:
    """A size that configs give as an int or a [height, width] pair (square here)."""
    return int(value[0] if isinstance(value, (list, tuple)) else value)


@dataclass(frozen=True)
class TowerSize:
    """What a tower's counter reads from a `vision_config`: the sizes and the encoder's exact parameters."""

    layers: int
    hidden: int
    heads: int
    inter: int
    patch: int
    image: int | None
    params: int
    temporal: int = 1
    global_layers: int = 0
    """Llama-3.2-Vision's gated global layers after the local ones."""
    max_tiles: int = 1
    """Llama-3.2-Vision's image tiles per image (`max_num_tiles`)."""


@dataclass(frozen=True, kw_only=True)
class Tower:
    """One vision-encoder architecture (a tower kind): how it is counted, its block's modules and what they save."""

    kind: str
    """Its name, and the prefix of the `vision_config` model_types that build it (as transformers' AutoModel)."""
    count: Callable[[dict], TowerSize]
    """`vision_config` → sizes and exact encoder parameters (patch embedding, positions, blocks, final norm)."""
    attention: tuple[str, ...]
    """One block's attention linears as peft names them, the output projection last."""
    mlp: tuple[str, ...]
    """One block's MLP linears, the down projection last (gated: gate, up, down; else fc1, fc2)."""
    fused_qkv: bool = False
    """Qwen-VL's attention: one fused qkv linear (h → 3h), rotary q/k, SDPA per `cu_seqlens` chunk then `torch.cat`
    (a new tensor for the output projection); else separate q/k/v whose SDPA output the projection saves."""
    rms_norm: bool = False
    """RMSNorm blocks (fp32 input copy and rsqrt saved); else LayerNorm (input, fp32 mean and rstd)."""
    gated_mlp: bool = False
    """A SiLU-gated MLP (gate, up, down); else two matrices with GELU between."""
    rotary: bool = False
    """2-D rotary positions: the blocks' rotary multiplications save the fp32 cos and sin."""
    final_norm: bool = True
    """A LayerNorm after the last block (`post_layernorm`)."""
    checkpointed: bool = True
    """Its blocks are `GradientCheckpointingLayer`s: gradient checkpointing keeps only their inputs."""
    depth_key: str = "num_hidden_layers"
    """The `vision_config` key of the block count."""
    repeats: bool = True
    """Its blocks repeat (identical, or with the full-attention period): a trace may extrapolate its depth."""
    full_attention: tuple[int, ...] | None = None
    """Qwen2.5-VL: the default `fullatt_block_indexes` (full-attention blocks among windowed ones)."""
    out_hidden: bool = False
    """The projector's output width is `vision_config.out_hidden_size` (Qwen-VL), else the text hidden size."""
    source: str
    """The transformers modeling file and class it follows."""

    def linears(self, hidden: int, inter: int) -> list[tuple[str, int, int]]:
        """(name, in, out) of one block's `nn.Linear`s."""
        qkv = [(self.attention[0], hidden, 3 * hidden)] if self.fused_qkv else []
        attention = qkv or [(name, hidden, hidden) for name in self.attention[:-1]]
        mlp = [(name, hidden, inter) for name in self.mlp[:-1]]
        return [*attention, (self.attention[-1], hidden, hidden), *mlp, (self.mlp[-1], inter, hidden)]

    def period(self, vision: dict, depth: int) -> int | None:
        """Blocks after which the tower repeats (1: identical blocks); None when it does not."""
        if not self.repeats:
            return None
        if self.full_attention is None:
            return 1
        full = list(vision.get("fullatt_block_indexes", self.full_attention))
        period = full[0] + 1 if full else 1
        regular = full == list(range(period - 1, depth, period))
        return period if regular and depth % period == 0 else None

    def cut(self, vision: dict, blocks: int) -> None:
        """Cut `vision` (a `vision_config`, in place) to its first `blocks` blocks."""
        vision[self.depth_key] = blocks
        if self.full_attention is not None:
            indexes = vision.get("fullatt_block_indexes", self.full_attention)
            vision["fullatt_block_indexes"] = [i for i in indexes if i < blocks]


class ProjectorShape(Enum):
    """What a projector saves for backward (`billing.activations.vision.projector_saved`)."""

    MERGER = "merger"
    """Qwen-VL's patch merger: a norm on the encoder tokens, then Linear(w, w) → GELU → Linear(w, out) merged."""
    POOL = "pool"
    """Gemma 3: an average pool, an RMSNorm and a bare projection matrix (no `nn.Linear`)."""
    LINEAR = "linear"
    """One Linear(w, out) on the merged tokens (Idefics3's connector, Llama-3.2-Vision's projection)."""
    MLP = "mlp"
    """Linear(w, out) → GELU → Linear(out, out) (LLaVA, Mistral 3)."""


@dataclass(frozen=True, kw_only=True)
class Projector:
    """A VLM's projector: its count and its shape."""

    count: Callable[[dict, TowerSize, int], tuple[int, int, int]]
    """(config, tower sizes, output width) → (parameters, merge factor, input width)."""
    shape: ProjectorShape
    linears: tuple[str, ...] = ()
    """Its `nn.Linear` names as peft sees them, in order."""

    def linear_shapes(self, width: int, out: int) -> list[tuple[str, int, int]]:
        """(name, in, out) of its `nn.Linear`s for input width `width` and output width `out`."""
        dims = {
            ProjectorShape.MERGER: [(width, width), (width, out)],
            ProjectorShape.MLP: [(width, out), (out, out)],
            ProjectorShape.LINEAR: [(width, out)],
            ProjectorShape.POOL: [],
        }[self.shape]
        return [(name, i, o) for name, (i, o) in zip(self.linears, dims, strict=True)]


@dataclass(frozen=True, kw_only=True)
class Vlm:
    """One VLM architecture (a VLM `model_type`): how its config nests, what its parts are."""

    model_type: str
    tower: str
    """The tower kind when `vision_config` names no model_type (the config class's default)."""
    text_type: str
    """The text model_type when `text_config` names none (the config class's default)."""
    projector: Projector
    tower_path: str
    """The tower's module path in the VLM's base model (`visual`, `vision_tower`, `vision_model`)."""
    projector_paths: tuple[str, ...]
    """The projector's module paths there (`multi_modal_projector`; Qwen-VL's `visual.merger`, …)."""
    tied: bool = False
    """The config class's `tie_word_embeddings` default."""
    tie_from_text: bool = False
    """A tied `text_config` ties the whole model (the config class forwards it: Qwen2.5-VL, LLaVA)."""
    tokens_per_image: Callable[[dict], int] | None = None
    """Fixed image tokens from the config (Gemma 3's `mm_tokens_per_image`); None where the image decides."""
    extra_embeddings: int = 0
    """Rows the text embedding has beyond `vocab_size` (`MllamaTextModel.embed_tokens`: 8)."""
    cross_attention: tuple[int, ...] = ()
    """Llama-3.2-Vision: the default `cross_attention_layers` of its text config (counted as the vision part's);
    its decoder layers then do not repeat."""
    source: str


@dataclass(frozen=True)
class ImageTokens:
    """One image's (or video's) cost in tokens."""

    text: int
    """Placeholder tokens added to the language model's sequence (Mllama: 1, the <|image|> token)."""
    encoder: int
    """The vision encoder's sequence, all views together: patches before merge/pooling (+ CLS, + padding)."""
    views: int
    """Views the encoder runs on: tiles, crops and the overview (Qwen: 1, or the temporal patches of a video)."""
    cross: int = 0
    """Mllama: the cross-attention states' length (keys/values the text attends to), 0 for the others."""


ImageRule = Callable[[int, int, "VisionRules", bool], ImageTokens]
"""(height, width, rules, pan-and-scan) → one image's tokens."""


@dataclass(frozen=True)
class VisionRules:
    """One processor's settings and its rule (the fields a processor does not use stay at their defaults)."""

    kind: str
    """The rule's name (qwen, anyres, gemma3, mllama, idefics3, pixtral, fixed): how the probe lays out its inputs."""
    image: ImageRule
    """The processor's image → tokens rule."""
    patch: int
    """The vision encoder's patch edge in pixels."""
    merge: int = 1
    """Patches merged per edge before the language model (Qwen's merger 2, Mistral-3's patch merger 2)."""
    min_pixels: int = 0
    """Qwen: the smallest resized area (`size["shortest_edge"]`, formerly `min_pixels`)."""
    max_pixels: int = 0
    """Qwen: the largest resized area (`size["longest_edge"]`, formerly `max_pixels`)."""
    tile: int = 0
    """The view's edge: anyres tile 384, Gemma 3 896, Mllama tile 560, Idefics3 `max_image_size` 364/384."""
    longest_edge: int = 0
    """Idefics3/SmolVLM `size["longest_edge"]`; Pixtral's largest image edge."""
    tokens_per_view: int = 0
    """Tokens of one view after pooling/pixel shuffle: Gemma 3 256, Idefics3 169, SmolVLM 81, OneVision 729."""
    max_tiles: int = 0
    """Mllama `max_image_tiles` 4; OneVision's anyres_max_9."""
    cls_token: bool = False
    """The encoder prepends a class token per view (Mllama)."""
    video: Callable[[int, int, int, VisionRules], ImageTokens] | None = None
    """(height, width, frames, rules) → a video's tokens, for processors that take video (Qwen-VL)."""
    video_min_pixels: int = 0
    """Qwen video processor `size["shortest_edge"]`."""
    video_max_pixels: int = 0
    """Qwen video processor `size["longest_edge"]`."""
    has_pixel_bounds: bool = False
    """The processor resizes within min_pixels/max_pixels (Qwen-VL's dynamic resolution)."""
    has_pan_and_scan: bool = False
    """The processor can crop extra views (Gemma 3's `do_pan_and_scan`)."""
    tile_from_checkpoint: bool = False
    """The tile and tokens per view are the checkpoint's (`vision_config.image_size`, `scale_factor`: Idefics3)."""
    type_ids: str | None = None
    """The model input that marks image positions (Qwen-VL `mm_token_type_ids`, Gemma 3 `token_type_ids`)."""
    rope_index: bool = False
    """The model's forward computes 3-D rope positions from the ids (Qwen-VL's `get_rope_index`)."""
