"""Vision-language models: one module per family, its records written once.

* `records.py` — the record types: `Tower` (a vision encoder kind: its count, linears, norms, attention, what
  checkpointing keeps, how it repeats), `Projector`, `Vlm` (a VLM model_type), `VisionRules` (an image processor and
  its image → tokens rule) and `ImageTokens`.
* one module per family, after its `modeling_*.py` and processor: `qwen2_5_vl.py`, `qwen3_vl.py`, `siglip.py`,
  `clip.py`, `gemma3.py`, `llava.py` (LLaVA-1.5, LLaVA-OneVision), `idefics3.py` (and SmolVLM), `pixtral.py`,
  `mistral3.py`, `mllama.py`. A family built on another's tower imports it (Gemma 3 and LLaVA-OneVision name
  SigLIP's, Idefics3 counts with SigLIP's counter, Mistral 3 uses Pixtral's processor).
* `registry.py` — `TOWERS`, `VLMS`, `RULES` and the lookups (a `vision_config`'s tower kind, an image's tokens).
* `spec.py` — `VisionSpec`, the counted vision parts of one model; `vlm.py` — a VLM config → `ModelSpec`.
* `tiling.py` — the processors' resizing and tiling arithmetic.

Billing, the probe and emit read a tower's or a VLM's facts from these records; only this package and the family
registry (`core/model/families.py`) compare a kind or a model_type with a string (`tests/unit/test_structure.py`).
"""
