"""Which symptom an OOM is: its kind, the phase and step from the log, the size of the request, the causes.

`infer_symptom(event, log_text)` maps a parsed OOM (plus the log around it) to one of the symptom
ids of `memdoc/data/symptoms.yaml`. It never refuses a parsed OOM: when the log has no traceback
it decides from the figures and says which assumption it made (`SymptomGuess.assumptions`).

The kind comes from the parser (`OomEvent.kind`); the phase from the traceback frames and the step
(first step, a later one) from progress bars, logged metrics and counters
(`memdoc.core.doctor.oom_phase`); whether one rank was heavier from several ranks' figures
(`memdoc.core.doctor.oom_ranks`). Causes: the kind's own (`oom_kind_causes`), then what the
figures show (`oom_causes.read_causes`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from memdoc.core.doctor.logtext import Frame, normalise_log, traceback_frames
from memdoc.core.doctor.oom import parse_oom_log
from memdoc.core.doctor.oom_causes import Cause, read_causes
from memdoc.core.doctor.oom_event import OomEvent
from memdoc.core.doctor.oom_kind_causes import kind_causes
from memdoc.core.doctor.oom_phase import PHASES, STEPS, StepReading, loading_bar, phase_of, read_step
from memdoc.core.doctor.oom_posttrain import posttrain_cause, posttrain_symptom
from memdoc.core.doctor.oom_ranks import rank_imbalance
from memdoc.units import format_bytes

__all__ = ["LARGE_BLOCK_UNKNOWN", "PHASES", "STEPS", "SymptomGuess", "infer_symptom", "phase_of"]

TRAINING_PHASES = ("optimizer", "backward", "loss", "forward", "training-step")
"""Phases of a training step: the step reading decides first step (startup-oom) vs later (mid-run-oom)."""
NO_FRAMES = "what was running (no traceback frames in the log): startup, a training step, or generation"

LARGE_BLOCK_UNKNOWN = "whether the large block is attention or logits (no such frame in the traceback)"
"""The unknown a culprit tensor (`memdoc.core.doctor.culprit`) answers."""
LONG_SAMPLE_SHARE_OF_TOTAL = 1 / 8
"""A single request ≥ this share of the card is a 'large block'."""
LONG_SAMPLE_SHARE_WITH_FRAMES = 1 / 32
"""With attention/softmax/loss frames in the traceback, ≥ this share already counts as large."""
LONG_SAMPLE_NO_TOTAL_BYTES = 2 * 1024**3
"""'Large block' threshold when the message does not state the capacity."""
LONG_SAMPLE_MIN_BYTES = 512 * 1024**2
"""…and never below this (on small cards an ordinary feature map is already 1/8 of the card)."""


@dataclass(frozen=True, kw_only=True)
class SymptomGuess:
    """Which symptom an OOM looks like, with the evidence, the causes and the gaps."""

    symptom: str | None
    """A symptom id from symptoms.yaml; None only when no OOM was found."""
    kind: str | None = None
    """The OOM's kind (`oom_event.KINDS`): cuda-oom, cuda-error, nccl-oom, host-oom, vllm-kv."""
    phase: str | None = None
    """What the traceback shows was running (one of `PHASES`), None without frames."""
    step: str = "unknown"
    """How far training got (one of `STEPS`): 'first-step', 'step-n' or 'unknown'."""
    step_number: int | None = None
    """The step the log's evidence names (completed steps of a progress bar, a step counter)."""
    fragmentation: bool = False
    """True when the fragmentation cause fires."""
    causes: tuple[Cause, ...] = ()
    """What the figures show, ranked (see `memdoc.core.doctor.oom_causes`)."""
    also: tuple[str, ...] = ()
    """Other symptom ids that fit the evidence too."""
    reasons: tuple[str, ...] = ()
    """Why this symptom, one sentence each, citing the figures or frames used."""
    assumptions: tuple[str, ...] = ()
    """What was assumed because the log does not say it (pass --symptom to override)."""
    unknowns: tuple[str, ...] = ()
    """What the log does not say and would change the answer."""


_BIG_BLOCK_CODE = re.compile(
    r"softmax|scaled_dot_product|attn_weights|attention_probs|\battn\b|attention\(|matmul\(query|"
    r"cross_entropy|nll_loss|log_softmax|lm_head|logits|\.float\(\)",
    re.I,
)
_BIG_BLOCK_FUNCS = {
    "eager_attention_forward",
    "sdpa_attention_forward",
    "flash_attention_forward",
    "cross_entropy",
    "ForCausalLMLoss",
    "fixed_cross_entropy",
    "loss_function",
    "log_softmax",
    "softmax",
    "_log_softmax",
}


_SYMPTOM = {
    "generate": "inference-oom",
    "startup": "startup-oom",
    "optimizer": "mid-run-oom",
    "backward": "mid-run-oom",
    "loss": "mid-run-oom",
    "eval": "eval-oom",
    "save": "save-oom",
    "forward": "mid-run-oom",
    "training-step": "mid-run-oom",
}


_POSTTRAIN_REASON = {
    "rl-generation-oom": "the traceback runs through GRPO/RLOO's generation (`_generate`): the KV cache of the "
    "generation batch, or colocated vLLM's share of the card",
    "reference-model-oom": "the traceback runs through the DPO/KTO trainer's reference model: a second copy of the "
    "weights with full fine-tuning",
}


def _large_block(
    event: OomEvent, frames: list[Frame], phase: str | None, reasons: list[str], unknowns: list[str]
) -> bool:
    A, T = event.requested, event.total
    if A is None:
        return False
    big_frames = any(f.func in _BIG_BLOCK_FUNCS or _BIG_BLOCK_CODE.search(f.code) for f in frames)
    if T:
        large = A >= LONG_SAMPLE_MIN_BYTES and (
            A >= LONG_SAMPLE_SHARE_OF_TOTAL * T or (big_frames and A >= LONG_SAMPLE_SHARE_WITH_FRAMES * T)
        )
        share = f"{A / T:.0%} of the card"
    else:
        large = A >= LONG_SAMPLE_NO_TOTAL_BYTES
        share = "card size unknown"
        unknowns.append("the card's capacity (not in the message): the large-block rule used 2 GiB instead")
    if large and phase == "startup":
        reasons.append(
            f"one request of {format_bytes(A)} ({share}) during startup: a flattened weight, gradient or "
            "optimizer-state buffer, not an activation"
        )
    elif large:
        what = "a frame in attention/softmax/loss/logits" if big_frames else "no attention/loss frame to confirm it"
        reasons.append(
            f"one request of {format_bytes(A)} ({share}) is a large block, typical of a sequence² attention "
            f"score matrix or a tokens × vocabulary logits tensor ({what})"
        )
        if not big_frames:
            unknowns.append(LARGE_BLOCK_UNKNOWN)
    return large


def _frames(event: OomEvent, log_text: str) -> list[Frame]:
    try:
        return traceback_frames(log_text or event.raw)
    except Exception:  # pragma: no cover
        return []


def _phase(event: OomEvent, frames: list[Frame], log_text: str, reasons: list[str]) -> tuple[str | None, Frame | None]:
    """The phase from the frames; without one, 'startup' when a loading bar was running (`loading_bar`)."""
    phase, decided_by = phase_of(frames)
    if phase is None:
        try:
            bar = loading_bar(normalise_log(log_text or event.raw), event.position or None)
        except Exception:  # pragma: no cover
            bar = None
        if bar:
            reasons.append(f"the log shows weights still loading: {bar}")
            return "startup", None
    return phase, decided_by


def _step(event: OomEvent, log_text: str, reasons: list[str]) -> StepReading:
    try:
        reading = read_step(normalise_log(log_text or event.raw), event.position or None)
    except Exception:  # pragma: no cover
        reading = StepReading()
    if reading.reading != "unknown":
        which = "the first training step" if reading.reading == "first-step" else "a later step (steps had finished)"
        reasons.append(f"the log shows {which}: {reading.evidence}")
    return reading


def _note_frames(
    event: OomEvent,
    frames: list[Frame],
    phase: str | None,
    decided_by: Frame | None,
    reasons: list[str],
    unknowns: list[str],
) -> None:
    """What the traceback shows (or that there is none), and what a size-less CUDA error implies."""
    if phase is not None and decided_by is not None:
        reasons.append(f"the traceback shows the {phase.replace('-', ' ')} phase: {decided_by.describe()}")
    elif phase is None and event.kind in ("cuda-oom", "cuda-error"):
        unknowns.append(
            NO_FRAMES if not frames else f"what was running: {len(frames)} traceback frames, none of a known phase"
        )
    if event.kind == "cuda-error":
        reasons.append(
            f"{event.status or 'the error'} reports no sizes: a library could not allocate its handle or workspace, "
            "usually because the GPU was already full (this process or another one); a driver or library mismatch "
            "can produce the same text"
        )
        unknowns.append("how much memory was in use (the message has no figures): run `memdoc diagnose` or nvidia-smi")


def infer_symptom(event: OomEvent | None, log_text: str = "") -> SymptomGuess:
    """Guess the symptom of `event`, using the traceback in `log_text` (the whole log is fine).

    Decision, first match: host kill → host-oom; NCCL → nccl-oom; vLLM KV-cache refusal →
    inference-oom; TRL's GRPO/RLOO generation frames → rl-generation-oom, its DPO/KTO reference-model frames →
    reference-model-oom (`oom_posttrain`); phase save → save-oom; eval → eval-oom; generate → inference-oom;
    startup (loading) → startup-oom; one rank heavier (`oom_ranks`) → rank-imbalance; a training phase or no
    frames, with the log showing the first step → startup-oom (the rigid part plus one step's activations do not
    fit); a large block (rule below) → long-sample-oom (also mid-run-oom); a training phase →
    mid-run-oom; no frames but a later step shown → mid-run-oom; otherwise, without frames:
    fragmentation → mid-run-oom (it builds up over steps), a size-less library failure → startup-oom
    (assumed: the card was full before the first kernels ran), else mid-run-oom (assumed: a training
    step, the commonest case).
    Large block: request ≥ T/8, or ≥ T/32 when a frame mentions attention/softmax/cross-entropy/
    logits/lm_head; 2 GiB stands in for T/8 when T is missing; and always ≥ 512 MiB. One tensor
    that large in a decoder is a sequence² score matrix or a tokens × vocabulary logits tensor,
    both set by the longest sample.
    """
    if event is None:
        return SymptomGuess(symptom=None, unknowns=("no out-of-memory message was found in the log",))
    reasons: list[str] = []
    unknowns: list[str] = []
    frames = _frames(event, log_text)
    phase, decided_by = _phase(event, frames, log_text, reasons)
    reading = read_causes(event, log_text)
    unknowns.extend(reading.unknowns)
    post = posttrain_cause(frames) if event.kind in ("cuda-oom", "cuda-error") else None
    causes = kind_causes(event, log_text) + ((post,) if post else ()) + reading.causes
    fragmentation = any(c.id == "fragmentation" for c in reading.causes)
    _note_frames(event, frames, phase, decided_by, reasons, unknowns)
    step = _step(event, log_text, reasons)
    large = event.kind == "cuda-oom" and _large_block(event, frames, phase, reasons, unknowns)
    imbalance = rank_imbalance(log_text, frames, _all_events(log_text)) if event.on_device else None
    symptom, also, assumptions = _decide(
        event,
        phase,
        posttrain=posttrain_symptom(frames) if post else None,
        step=step.reading,
        large=large,
        imbalance=imbalance,
        fragmentation=fragmentation,
        reasons=reasons,
        unknowns=unknowns,
    )
    return SymptomGuess(
        symptom=symptom,
        kind=event.kind,
        phase=phase,
        step=step.reading,
        step_number=step.step,
        fragmentation=fragmentation,
        causes=causes,
        also=tuple(dict.fromkeys(a for a in also if a != symptom)),
        reasons=tuple(reasons),
        assumptions=tuple(assumptions),
        unknowns=tuple(unknowns),
    )


def _all_events(log_text: str) -> list[OomEvent]:
    return parse_oom_log(log_text) if log_text else []


def _decide_kind(event: OomEvent, phase: str | None, reasons: list[str]) -> tuple[str, list[str], list[str]] | None:
    """The symptom a kind decides by itself (host RAM, NCCL, vLLM), or None for the CUDA kinds."""
    if event.kind == "host-oom":
        reasons.append(
            "the process was killed with SIGKILL, which is what the kernel's oom-killer (and a scheduler's memory "
            "limit) sends when host RAM runs out; the GPU did not report an OOM"
        )
        return "host-oom", [], []
    if event.kind == "nccl-oom":
        reasons.append("NCCL could not allocate its own buffers on the GPU: it needs room PyTorch's allocator left")
        return "nccl-oom", ["rank-imbalance"] if phase is None else [], []
    if event.kind == "vllm-kv":
        reasons.append("vLLM sizes its KV cache at engine start from gpu_memory_utilization; it found too little room")
        return "inference-oom", [], []
    return None


def _decide(
    event: OomEvent,
    phase: str | None,
    *,
    posttrain: str | None = None,
    step: str,
    large: bool,
    imbalance: str | None,
    fragmentation: bool,
    reasons: list[str],
    unknowns: list[str],
) -> tuple[str, list[str], list[str]]:
    """(symptom, other symptoms that fit, assumptions) by the decision `infer_symptom` documents."""
    by_kind = _decide_kind(event, phase, reasons)
    if by_kind is not None:
        return by_kind
    if posttrain is not None:  # TRL's generation or reference-model frames (`oom_posttrain`)
        reasons.append(_POSTTRAIN_REASON[posttrain])
        return posttrain, [_SYMPTOM[phase]] if phase in _SYMPTOM else [], []
    if phase in ("save", "eval", "generate", "startup"):
        return _SYMPTOM[phase], ["rank-imbalance"] if imbalance else [], []
    if imbalance:
        reasons.append(f"one rank is heavier than the others: {imbalance}")
        return "rank-imbalance", ["mid-run-oom"], []
    if step == "first-step" and (phase is None or phase in TRAINING_PHASES):
        reasons.append(
            "the first step did not finish: the weights, gradients and optimizer states plus one step's "
            "activations do not fit, before any long sample or fragmentation built up"
        )
        return "startup-oom", ["mid-run-oom"], []
    if large:
        if phase is None:
            unknowns.append("whether the OOM happened in a training step or in generation")
        return "long-sample-oom", ["mid-run-oom"], []
    if phase is not None:
        also = []
        if phase == "optimizer":
            also.append("startup-oom")
            reasons.append(
                "an OOM at the optimizer step means weights + gradients + optimizer states do not fit: "
                "activation levers will not help"
            )
        if phase == "forward":
            also.append("inference-oom")
            unknowns.append("whether the forward pass was training or evaluation/generation")
        return _SYMPTOM[phase], also, []
    if step == "step-n":
        reasons.append("steps had finished before the OOM, so it came in a later training step")
        return "mid-run-oom", ["long-sample-oom"], []
    return _decide_without_frames(event, fragmentation=fragmentation, reasons=reasons)


def _decide_without_frames(
    event: OomEvent, *, fragmentation: bool, reasons: list[str]
) -> tuple[str, list[str], list[str]]:
    """No traceback and no large block: fragmentation, a size-less failure, or the commonest case."""
    if fragmentation:
        reasons.append("fragmentation builds up over many steps, so this is most likely a mid-run OOM")
        return "mid-run-oom", [], []
    if not event.has_sizes:
        return (
            "startup-oom",
            ["mid-run-oom", "inference-oom"],
            [
                "no traceback: assumed the card was already full when the first kernels ran "
                "(startup-oom); pass --symptom to choose another"
            ],
        )
    return (
        "mid-run-oom",
        ["startup-oom", "inference-oom"],
        [
            "no traceback: assumed the OOM came in a training step (mid-run-oom, the commonest "
            "case); pass --symptom startup-oom or inference-oom if it was loading or generating"
        ],
    )
