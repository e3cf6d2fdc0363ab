"""`VisionSpec`: the vision parts of one vision-language model, and their exact parameter counts.

Read from a VLM's `config.json` (`vision_config` plus the top-level projector keys) without torch, by
`vision.vlm.vision_spec`. Each count is the sum of the modules transformers 5.24 builds (each tower's and
projector's module names its `modeling_*.py`); `tests/unit/model/test_vision_params.py` builds every catalog VLM on
the meta device and asserts equality per part.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from memdoc.core.model.vision.records import Projector, Tower
from memdoc.core.model.vision.registry import TOWERS, VLMS


@dataclass(frozen=True, kw_only=True)
class VisionSpec:
    """The vision encoder and projector of a VLM: the sizes memory depends on, counts exact."""

    kind: str
    """The vision tower's kind (a key of `registry.TOWERS`: its record is `tower`)."""
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

    @property
    def tower(self) -> Tower:
        """The tower's record: its linears, norms, attention, what checkpointing keeps."""
        return TOWERS[self.kind]

    @property
    def depth(self) -> int:
        """Every encoder block: the local ones and Llama-3.2-Vision's global ones."""
        return self.layers + self.global_layers

    def linears(self) -> list[tuple[str, int, int]]:
        """(name, in, out) of one encoder block's `nn.Linear`s (names as peft sees them)."""
        return self.tower.linears(self.hidden_size, self.intermediate_size)


def projector_of(model_type: str) -> Projector:
    """The projector record of a VLM model_type (a key of `registry.VLMS`)."""
    return VLMS[model_type].projector
