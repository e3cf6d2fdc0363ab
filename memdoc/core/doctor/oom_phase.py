"""What was running when an OOM struck, from the log: the phase (traceback frames) and the step.

`phase_of(frames)` reads the traceback frames (`memdoc.core.doctor.logtext.traceback_frames`) by
priority, highest first: save (Trainer `save_model`/`_save_checkpoint`, DeepSpeed
`_zero3_consolidated_16bit_state_dict`/`save_16bit_model`, FSDP `FULL_STATE_DICT` and
`get_state_dict`/`get_model_state_dict`) > eval (`evaluate`, `evaluation_loop`, `prediction_step`,
`all_preds.add`) > generate (`generate`/`_sample`, `/generation/`, vLLM/SGLang engine frames) >
startup, i.e. loading (`from_pretrained`, `_load_state_dict_into_meta_model`, `torch.cuda.set_device`,
`model.to(`/`.cuda()`, DeepSpeed/accelerate initialisation, optimizer-state creation) > optimizer >
backward > loss > forward > training-step. Save and eval frames are outer frames: what they call
(a forward, an all-gather) is part of them. A backward frame outside a forward frame is checkpoint
recomputation: backward wins by the priority. Function names are those of transformers 5.24
(`trainer.py`), deepspeed 0.19.8 (`runtime/engine.py`), accelerate 1.15 (`accelerator.py`) and torch 2.13.

`read_step(text, position)` reads how far training got before the OOM (at `position` in the
normalised log): the first step, a later step, or unknown. Evidence, from the log before the OOM:

- a tqdm bar of the training loop, "  0%|    | 0/1250 [00:00<?, ?it/s]" (transformers
  `trainer_callback.py` `ProgressCallback.on_train_begin`: `tqdm(total=state.max_steps)`, no
  description; a description naming the epoch/steps is accepted, others — "Map", "Loading checkpoint
  shards" — are data or loading bars): N/T with N = 0 is the first step, N ≥ 1 a later one; finished
  bars (N = T) belong to something that ended;
- a logged metrics dict, "{'loss': '2.1', 'grad_norm': …, 'learning_rate': …, 'epoch': '0.01'}"
  (`ProgressCallback.on_log` writes floats as `f"{v:.4g}"` strings; older versions printed bare
  floats): at least one optimizer step finished;
- a step counter ("step 12", "Step: 3/500", "global_step=40", "iteration 7"): 0 is the first step,
  ≥ 2 is later whether the counter is 0- or 1-based and printed before or after the step; 1 is
  ambiguous and ignored;
- "Epoch N" with N ≥ 1 (0-based) or "Epoch N/M" with N ≥ 2 (1-based): a later step.

The training bar is the unfinished one of the most steps (an evaluation bar, also unlabelled, counts
eval batches). Precedence: the training bar past 0, then a counter ≥ 2, a metrics dict or a later epoch
(evidence of a finished step), then the training bar at 0 or a counter at 0 (the first step).

`loading_bar(text, position)`: without frames, an unfinished "Loading checkpoint shards" bar as the last
bar before the OOM places it in the startup (loading) phase.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from memdoc.core.doctor.logtext import Frame

__all__ = ["PHASES", "STEPS", "StepReading", "loading_bar", "phase_of", "read_step"]

PHASES = ("save", "eval", "generate", "startup", "optimizer", "backward", "loss", "forward", "training-step")
"""Values of `SymptomGuess.phase`, highest priority first ('startup' is loading the model/engine)."""

STEPS = ("first-step", "step-n", "unknown")
"""Values of `StepReading.reading`: the OOM struck in the first training step, in a later one, or the
log does not say."""


def _rx(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


# (phase, function names, source-line pattern, path pattern)
_RULES: tuple[tuple[str, frozenset[str], re.Pattern[str] | None, re.Pattern[str] | None], ...] = (
    (
        "save",
        frozenset(
            {
                "save_model",
                "_save_checkpoint",
                "_save",
                "save_checkpoint",
                "_save_zero_checkpoint",
                "_zero3_consolidated_16bit_state_dict",
                "save_16bit_model",
                "get_state_dict",
                "get_model_state_dict",
                "get_optimizer_state_dict",
                "_full_post_state_dict_hook",
                "_full_pre_state_dict_hook",
                "full_optim_state_dict",
                "save_pretrained",
                "state_dict",
            }
        ),
        _rx(r"FULL_STATE_DICT|full_state_dict|save_model\(|save_pretrained\(|save_checkpoint\(|save_16bit_model\("),
        None,
    ),
    (
        "eval",
        frozenset({"evaluate", "_evaluate", "evaluation_loop", "prediction_loop", "prediction_step", "predict"}),
        _rx(r"trainer\.evaluate\(|\.evaluate\(|all_preds\.add\(|all_preds\s*=|eval_loop\("),
        None,
    ),
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
                "set_device",
                "_lazy_init",
            }
        ),
        _rx(
            r"from_pretrained\(|\b(?:model|module|net|self\.model)\.(?:to|cuda)\(|\bmodel\.cuda\(\)|"
            r"deepspeed\.initialize\(|accelerator\.prepare\(|load_state_dict\(|cuda\.set_device\("
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
    ("forward", frozenset({"forward", "_call_impl", "_wrapped_call_impl"}), None, None),
    (
        "training-step",
        frozenset({"train", "_inner_training_loop", "training_step", "train_step", "fit", "compute_loss"}),
        _rx(r"\btrainer\.train\(|\.fit\(|train_step\("),
        None,
    ),
)


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


@dataclass(frozen=True, kw_only=True)
class StepReading:
    """How far training got before the OOM, and the log text that shows it."""

    reading: str = "unknown"
    """One of `STEPS`."""
    step: int | None = None
    """The step the evidence names (a bar's completed steps, a counter), when it names one."""
    evidence: str | None = None
    """The log text read, whitespace collapsed."""


_BAR = re.compile(r"^(?P<label>[^\n|%]{0,80}?)\s*(?:\d{1,3}%\s*)?\|[^|\n]{0,200}\|\s*(?P<n>\d+)/(?P<t>\d+)\s*\[", re.M)
_LOAD_LABEL = re.compile(r"load|shard|checkpoint", re.I)
_TRAIN_LABEL = re.compile(r"^\s*$|epoch|train|step|iter", re.I)
_LOSS_DICT = re.compile(
    r"\{\s*'(?:loss|train_loss)'\s*:\s*'?[-\d.e+]+'?[^{}\n]{0,400}?'epoch'\s*:\s*'?[\d.]+'?[^{}\n]{0,100}\}"
)
_COUNTER = re.compile(r"\b(?:global_step|step|iteration|iter)(?![a-z_])\s*[:=#]?\s*\[?\s*(\d+)(?!\d)(?!\s*%)", re.I)
_EPOCH = re.compile(r"\bEpoch\s*[:=]?\s*(\d+)(?:\s*/\s*(\d+))?", re.I)


def _later_epoch(m: re.Match[str]) -> bool:
    n = int(m.group(1))
    return n >= 2 if m.group(2) else n >= 1


def _reading(reading: str, step: int | None, m: re.Match[str]) -> StepReading:
    return StepReading(reading=reading, step=step, evidence=re.sub(r"\s+", " ", m.group(0)).strip())


def _training_bar(before: str) -> re.Match[str] | None:
    """The training loop's bar: unfinished, with a training label (or none), and of the most steps (an
    evaluation bar, also unlabelled, counts eval batches — fewer than the run's steps); the last such."""
    bars = [
        m
        for m in _BAR.finditer(before)
        if _TRAIN_LABEL.search(m.group("label").strip(" :")) and 0 <= int(m.group("n")) < int(m.group("t"))
    ]
    if not bars:
        return None
    most = max(int(m.group("t")) for m in bars)
    return [m for m in bars if int(m.group("t")) == most][-1]


def read_step(text: str, position: int | None = None) -> StepReading:
    """The step the OOM at `position` of the normalised log `text` struck in (rules in the module
    docstring); the whole text when `position` is None. Never raises."""
    before = text if position is None or position <= 0 else text[:position]
    bar = _training_bar(before)
    if bar is not None and int(bar.group("n")) > 0:
        return _reading("step-n", int(bar.group("n")), bar)
    counters = [m for m in _COUNTER.finditer(before) if int(m.group(1)) != 1]
    later_counters = [m for m in counters if int(m.group(1)) >= 2]
    if later_counters:
        return _reading("step-n", int(later_counters[-1].group(1)), later_counters[-1])
    later = [*_LOSS_DICT.finditer(before), *(m for m in _EPOCH.finditer(before) if _later_epoch(m))]
    if later:
        return _reading("step-n", None, max(later, key=lambda m: m.start()))
    if bar is not None:
        return _reading("first-step", 0, bar)
    if counters:
        return _reading("first-step", 0, counters[-1])
    return StepReading()


def loading_bar(text: str, position: int | None = None) -> str | None:
    """The last progress bar before the OOM when it is an unfinished loading bar ("Loading checkpoint
    shards:  25%|██▌ | 1/4 [", transformers `modeling_utils.py`): the process died loading weights.
    None otherwise. Read when the log has no traceback frames of the process that died."""
    before = text if position is None or position <= 0 else text[:position]
    bars = list(_BAR.finditer(before))
    if not bars:
        return None
    last = bars[-1]
    if _LOAD_LABEL.search(last.group("label")) and int(last.group("n")) < int(last.group("t")):
        return re.sub(r"\s+", " ", last.group(0)).strip()
    return None
