"""Qwen3-VL: the LayerNorm tower with learned positions, the merger and DeepStack mergers; Qwen2-VL's processor.

Tower: transformers 5.24 `modeling_qwen3_vl.py` `Qwen3VLVisionModel`; the processor is `Qwen2VLImageProcessor`
(`qwen2_5_vl.qwen_rules`) and `Qwen3VLVideoProcessor`.
"""

from __future__ import annotations

from memdoc.core.model.vision.qwen2_5_vl import qwen_rules
from memdoc.core.model.vision.records import Projector, ProjectorShape, Tower, TowerSize, Vlm, linear


def _count(v: dict) -> TowerSize:
    """Mergers excluded: Conv3d patch embed with bias, learned position embeddings, blocks of two LayerNorms, fused
    qkv and proj, a two-matrix MLP, all with biases."""
    h, i, depth = int(v.get("hidden_size", 1152)), int(v.get("intermediate_size", 4304)), int(v.get("depth", 27))
    p, t = int(v.get("patch_size", 16)), int(v.get("temporal_patch_size", 2))
    block = 4 * h + linear(h, 3 * h) + linear(h, h) + linear(h, i) + linear(i, h)
    patch = int(v.get("in_channels", 3)) * t * p * p * h + h
    positions = int(v.get("num_position_embeddings", 2304)) * h
    return TowerSize(depth, h, int(v.get("num_heads", 16)), i, p, None, patch + positions + depth * block, t)


TOWER = Tower(
    kind="qwen3_vl",
    count=_count,
    attention=("qkv", "proj"),  # Qwen3VLVisionAttention
    mlp=("linear_fc1", "linear_fc2"),  # Qwen3VLVisionMLP
    fused_qkv=True,
    rotary=True,
    depth_key="depth",
    repeats=False,  # its DeepStack taps give some blocks another role: traced whole
    out_hidden=True,
    source="modeling_qwen3_vl.py Qwen3VLVisionModel",
)


def _mergers(config: dict, t: TowerSize, out: int) -> tuple[int, int, int]:
    """`Qwen3VLVisionPatchMerger`: the merger (LayerNorm over h) plus one DeepStack merger per
    `deepstack_visual_indexes` entry (LayerNorm over h·m²), each Linear(h·m², h·m²) → GELU → Linear(h·m², out)."""
    vision = config["vision_config"]
    m = int(vision.get("spatial_merge_size", 2))
    wide = t.hidden * m * m
    mlp = linear(wide, wide) + linear(wide, out)
    deepstack = len(vision.get("deepstack_visual_indexes", [8, 16, 24]))
    return 2 * t.hidden + mlp + deepstack * (2 * wide + mlp), m, wide


VLM = Vlm(
    model_type="qwen3_vl",
    tower="qwen3_vl",
    text_type="qwen3_vl_text",
    projector=Projector(count=_mergers, shape=ProjectorShape.MERGER, linears=("linear_fc1", "linear_fc2")),
    tower_path="visual",
    projector_paths=("visual.merger", "visual.deepstack_merger_list"),
    source="configuration_qwen3_vl.py Qwen3VLConfig",
)

RULES = qwen_rules(16, (65536, 16777216), (131072, 786432))
"""Qwen/Qwen3-VL-8B-Instruct preprocessor_config.json: size 65536 .. 16777216 px, patch 16 (the processor is
Qwen2VLImageProcessor); video: `Qwen3VLVideoProcessor.size` 128×32×32 .. 768×32×32."""
