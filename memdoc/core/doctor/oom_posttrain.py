"""Post-training OOMs told from the traceback: GRPO/RLOO's generation, and the reference model of DPO/KTO.

`posttrain_symptom(frames)` maps traceback frames (`logtext.traceback_frames`) to a symptoms.yaml id, and
`posttrain_cause(frames)` to the `Cause` it states, whose prescriptions lead the table. Frames, TRL 1.16:
* generation: `GRPOTrainer`/`RLOOTrainer` `_generate_and_score_completions` → `_generate` → `_generate_single_turn`
  (trl/trainer/grpo_trainer.py, rloo_trainer.py), then transformers' `generate` (the KV cache of the generation
  batch) or vLLM (trl/generation/vllm_generation.py, vllm/…: the colocated engine's pool);
* the reference model: `DPOTrainer.__init__`/`KTOTrainer.__init__` building it ("Reference model":
  `self.ref_model = create_model_from_path(...)`, then `prepare_deepspeed`/`prepare_fsdp`/`prepare_model` of
  `self.ref_model`), the precompute pass (`_precompute_ref_logps` → `compute_ref_log_probs`), or the reference forward
  of a step (`_compute_loss`: `self.ref_model(**ref_model_kwargs, ...)`).
Pure: no I/O.
"""

from __future__ import annotations

import re

from memdoc.core.doctor.logtext import Frame
from memdoc.core.doctor.oom_causes import Cause

__all__ = ["posttrain_cause", "posttrain_symptom"]

_RL_TRAINER = re.compile(r"trl/trainer/(grpo|rloo)_trainer\.py$")
_REF_TRAINER = re.compile(r"trl/trainer/(dpo|kto)_trainer\.py$")
_RL_GENERATION = frozenset({"_generate_and_score_completions", "_generate", "_generate_single_turn"})
_REF_FUNCS = frozenset({"compute_ref_log_probs", "_precompute_ref_logps"})
_VLLM = re.compile(r"/vllm/|trl/generation/vllm_generation\.py$")


def _path(frame: Frame) -> str:
    return frame.path.replace("\\", "/")


def _generation(frames: list[Frame]) -> bool:
    return any(f.func in _RL_GENERATION and _RL_TRAINER.search(_path(f)) for f in frames)


def _reference(frames: list[Frame]) -> bool:
    for f in frames:
        if not _REF_TRAINER.search(_path(f)):
            continue
        if f.func in _REF_FUNCS or (f.func in ("__init__", "_compute_loss") and "ref_model" in f.code):
            return True
    return False


def posttrain_symptom(frames: list[Frame]) -> str | None:
    """'rl-generation-oom', 'reference-model-oom', or None when the frames show neither."""
    if _generation(frames):
        return "rl-generation-oom"
    if _reference(frames):
        return "reference-model-oom"
    return None


def posttrain_cause(frames: list[Frame]) -> Cause | None:
    """The cause the frames state, with the prescriptions that address it first; None for other OOMs."""
    symptom = posttrain_symptom(frames)
    if symptom == "rl-generation-oom":
        if any(_VLLM.search(_path(f)) for f in frames):
            return Cause(
                id="rl-vllm-pool",
                title="colocated vLLM's memory fraction and the training share the card",
                evidence="the traceback runs through GRPO/RLOO generation into vLLM",
                fix="give vLLM the fraction it needs, release it while training, or move it to another GPU",
                prescriptions=("rl-vllm-lower-memory", "rl-vllm-sleep", "rl-vllm-server"),
            )
        return Cause(
            id="rl-generation-cache",
            title="the KV cache of the generation batch",
            evidence="the traceback runs through GRPO/RLOO generation into transformers' generate",
            fix="generate fewer completions at once, or with vLLM",
            prescriptions=("rl-smaller-generation-batch", "rl-vllm-server"),
        )
    if symptom == "reference-model-oom":
        return Cause(
            id="reference-model",
            title="the frozen reference model: a second copy of the weights (full fine-tuning)",
            evidence="the traceback runs through the DPO/KTO trainer's reference model",
            fix="drop the reference copy: precompute its log-probs, train LoRA (the base with the adapter disabled), "
            "or shard it",
            prescriptions=("ref-precompute", "ref-lora", "ref-zero3"),
        )
    return None
