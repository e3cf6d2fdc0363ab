"""Which symptom an OOM is: the phase from the traceback, the size of the request, the causes.

`infer_symptom(event, log_text)` maps a parsed OOM (plus the log around it) to one of the symptom
ids of `memdoc/data/symptoms.yaml`. It never refuses a parsed OOM: when the log has no traceback
it decides from the figures and says which assumption it made (`SymptomGuess.assumptions`).

Phase, from the traceback frames (`memdoc.core.doctor.logtext.traceback_frames`), by priority:
generate (`generate`/decoding loops, `/generation/`, vLLM/SGLang engine frames) > startup
(`from_pretrained`, state-dict loading, `model.to(`/`.cuda()`/`Module._apply`, DeepSpeed/accelerate
initialisation, optimizer-state creation) > optimizer (`optimizer.step`, torch/optim, DeepSpeed
`_optimizer_step`) > backward (autograd, `.backward(`) > loss (`cross_entropy`, `ForCausalLMLoss`,
`log_softmax`) > eval (`evaluate`, `evaluation_loop`, `prediction_step`) > forward (`forward`,
`Module._call_impl`) > training-step (`trainer.train()`, `_inner_training_loop`, `training_step`
with nothing deeper shown). A backward frame outside a forward frame is checkpoint recomputation:
backward wins by the priority.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from memdoc.core.doctor.logtext import Frame, traceback_frames
from memdoc.core.doctor.oom_causes import Cause, read_causes
from memdoc.core.doctor.oom_event import OomEvent
from memdoc.units import format_bytes

__all__ = ["LARGE_BLOCK_UNKNOWN", "PHASES", "SymptomGuess", "infer_symptom", "phase_of"]

PHASES = ("generate", "startup", "optimizer", "backward", "loss", "eval", "forward", "training-step")
"""Values of `SymptomGuess.phase`, highest priority first."""

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
    phase: str | None = None
    """What the traceback shows was running (one of `PHASES`), None without frames."""
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


def _rx(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


# (phase, function names, source-line pattern, path pattern)
_RULES: tuple[tuple[str, frozenset[str], re.Pattern[str] | None, re.Pattern[str] | None], ...] = (
    (
        "generate",
        frozenset(
            {
                "generate",
                "_sample",
                "sample",
                "greedy_search",
                "beam_search",
                "_beam_search",
                "_assisted_decoding",
                "contrastive_search",
                "_contrastive_search",
                "generate_until",
                "run_engine_loop",
                "engine_step",
                "execute_model",
                "capture_model",
                "profile_run",
                "determine_num_available_blocks",
                "_initialize_kv_caches",
                "determine_available_memory",
                "raise_if_cache_size_invalid",
            }
        ),
        _rx(r"\.generate\(|\bpipeline\(|\bLLM\(|llm\.generate|inference_mode"),
        _rx(r"/generation/|/vllm/|/sglang/|/text_generation"),
    ),
    (
        "startup",
        frozenset(
            {
                "from_pretrained",
                "_load_pretrained_model",
                "load_state_dict",
                "_load_state_dict_into_meta_model",
                "load_checkpoint_in_model",
                "set_module_tensor_to_device",
                "dispatch_model",
                "_move_model_to_device",
                "prepare_model_for_kbit_training",
                "initialize_optimizer_states",
                "_configure_zero_optimizer",
                "_configure_optimizer",
                "_configure_distributed_model",
                "cuda",
                "_apply",
                "load_model",
                "_prepare_deepspeed",
                "prepare_model",
                "_wrap_model",
                "_create_model",
                "init_device_mesh",
            }
        ),
        _rx(
            r"from_pretrained\(|\b(?:model|module|net|self\.model)\.(?:to|cuda)\(|\bmodel\.cuda\(\)|deepspeed\.initialize\(|"
            r"accelerator\.prepare\(|load_state_dict\("
        ),
        None,
    ),
    (
        "optimizer",
        frozenset(
            {
                "_optimizer_step",
                "optimizer_step",
                "_multi_tensor_adamw",
                "_multi_tensor_adam",
                "_single_tensor_adamw",
                "_single_tensor_adam",
                "adamw",
                "adam",
                "_fused_adamw",
                "_fused_adam",
                "_foreach_add_",
                "step",
            }
        ),
        _rx(r"optimizer\.step\(|\.optimizer\.step\(|opt\.step\("),
        _rx(r"torch/optim/|bitsandbytes/optim/"),
    ),
    (
        "backward",
        frozenset(
            {"backward", "_engine_run_backward", "run_backward", "_backward", "reduce_gradients", "clip_grad_norm_"}
        ),
        _rx(r"\.backward\(|accelerator\.backward\(|autograd\.backward\("),
        _rx(r"torch/autograd/"),
    ),
    (
        "loss",
        frozenset(
            {
                "cross_entropy",
                "ForCausalLMLoss",
                "fixed_cross_entropy",
                "loss_function",
                "log_softmax",
                "_log_softmax",
                "nll_loss",
                "cross_entropy_loss",
            }
        ),
        _rx(r"cross_entropy|nll_loss|log_softmax|loss_fct\(|self\.loss_function\("),
        None,
    ),
    (
        "eval",
        frozenset({"evaluate", "evaluation_loop", "prediction_step", "predict", "_maybe_log_save_evaluate"}),
        _rx(r"trainer\.evaluate\("),
        None,
    ),
    ("forward", frozenset({"forward", "_call_impl", "_wrapped_call_impl"}), None, None),
    (
        "training-step",
        frozenset({"train", "_inner_training_loop", "training_step", "train_step", "fit", "compute_loss"}),
        _rx(r"\btrainer\.train\(|\.fit\(|train_step\("),
        None,
    ),
)

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


def phase_of(frames: list[Frame]) -> tuple[str | None, Frame | None]:
    """(phase, the frame that decided it), by the priority of `PHASES`."""
    for phase, funcs, code, path in _RULES:
        for f in frames:
            if (
                f.func in funcs
                or (code is not None and code.search(f.code))
                or (path is not None and path.search(f.path))
            ):
                return phase, f
    return None, None


_SYMPTOM = {
    "generate": "inference-oom",
    "startup": "startup-oom",
    "optimizer": "mid-run-oom",
    "backward": "mid-run-oom",
    "loss": "mid-run-oom",
    "eval": "mid-run-oom",
    "forward": "mid-run-oom",
    "training-step": "mid-run-oom",
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


def infer_symptom(event: OomEvent | None, log_text: str = "") -> SymptomGuess:
    """Guess the symptom of `event`, using the traceback in `log_text` (the whole log is fine).

    Decision: vLLM KV-cache refusal → inference-oom; phase generate → inference-oom; startup →
    startup-oom; a large block (rule below) outside startup → long-sample-oom (also mid-run-oom);
    any training phase → mid-run-oom; no frames: fragmentation → mid-run-oom (it builds up over
    steps), a size-less library failure → startup-oom (assumed: the card was full before the first
    kernels ran), otherwise mid-run-oom (assumed: a training step, the commonest case).
    Large block: request ≥ T/8, or ≥ T/32 when a frame mentions attention/softmax/cross-entropy/
    logits/lm_head; 2 GiB stands in for T/8 when T is missing; and always ≥ 512 MiB. One tensor
    that large in a decoder is a sequence² score matrix or a tokens × vocabulary logits tensor,
    both set by the longest sample.
    """
    if event is None:
        return SymptomGuess(symptom=None, unknowns=("no out-of-memory message was found in the log",))
    reasons: list[str] = []
    unknowns: list[str] = []
    try:
        frames = traceback_frames(log_text or event.raw)
    except Exception:  # pragma: no cover
        frames = []
    phase, decided_by = phase_of(frames)
    reading = read_causes(event, log_text)
    unknowns.extend(reading.unknowns)
    fragmentation = any(c.id == "fragmentation" for c in reading.causes)
    if phase is not None:
        reasons.append(f"the traceback shows the {phase.replace('-', ' ')} phase: {decided_by.describe()}")
    elif event.format != "vllm-kv-cache":
        unknowns.append("what was running (no traceback frames in the log): startup, a training step, or generation")
    if not event.has_sizes and event.format != "vllm-kv-cache":
        reasons.append(
            f"{event.status or 'the error'} reports no sizes: a library could not allocate its handle or workspace, "
            "usually because the GPU was already full (this process or another one); a driver or library mismatch "
            "can produce the same text"
        )
        unknowns.append("how much memory was in use (the message has no figures): run `memdoc diagnose` or nvidia-smi")
    large = _large_block(event, frames, phase, reasons, unknowns)
    symptom, also, assumptions = _decide(
        event, phase, large=large, fragmentation=fragmentation, reasons=reasons, unknowns=unknowns
    )
    return SymptomGuess(
        symptom=symptom,
        phase=phase,
        fragmentation=fragmentation,
        causes=reading.causes,
        also=tuple(dict.fromkeys(a for a in also if a != symptom)),
        reasons=tuple(reasons),
        assumptions=tuple(assumptions),
        unknowns=tuple(unknowns),
    )


def _decide(
    event: OomEvent,
    phase: str | None,
    *,
    large: bool,
    fragmentation: bool,
    reasons: list[str],
    unknowns: list[str],
) -> tuple[str, list[str], list[str]]:
    """(symptom, other symptoms that fit, assumptions) by the decision `infer_symptom` documents."""
    if event.format == "vllm-kv-cache":
        reasons.append("vLLM sizes its KV cache at engine start from gpu_memory_utilization; it found too little room")
        return "inference-oom", [], []
    if phase in ("generate", "startup"):
        return _SYMPTOM[phase], [], []
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
