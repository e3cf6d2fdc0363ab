"""TRL's post-training trainers inside an instrumented run: which trainer, its task and knobs, and the
phases of its step that supervised training does not have (generation, the reference forward).

The trainers' methods are wrapped on their classes (so subclasses and instances made before or after
are covered) for as long as the instrumentation lasts (`memdoc.probe.script.session.instrument`):

- generation: `GRPOTrainer._generate` / `RLOOTrainer._generate` (trl 1.16 `trl/trainer/grpo_trainer.py`,
  `rloo_trainer.py`: transformers `generate`, vLLM or a rollout function, tool calls included);
- reference: a root module's forward under `no_grad` inside `DPOTrainer._compute_loss` / `KTOTrainer._compute_loss`
  (`ref_model`, or the base with the adapter disabled), `compute_ref_log_probs` (`precompute_ref_log_probs`),
  and `_get_per_token_logps_and_entropies` called
  with gradients disabled (GRPO/RLOO `_generate_and_score_completions`: the reference model's and the old
  policy's log-probabilities under `torch.no_grad()`);
- `RewardTrainer` has neither: it is recognised for its task only.

While a wrapped method runs, the session's bucket is that phase (`Session.post_phase`); the tensor
tracker then keeps its peak like any other phase's.
"""

from __future__ import annotations

import functools
import sys

from memdoc.core.billing.vocabulary import LINE_ITEMS, STEP_PHASES
from memdoc.core.user_config.trl_post import GENERATION_KEYS

TRAINERS = {
    "trl.trainer.grpo_trainer": ("GRPOTrainer", "grpo", {"_generate": "generation"}),
    "trl.trainer.rloo_trainer": ("RLOOTrainer", "rloo", {"_generate": "generation"}),
    "trl.trainer.dpo_trainer": ("DPOTrainer", "dpo", {"compute_ref_log_probs": "reference", "_compute_loss": "loss"}),
    "trl.trainer.kto_trainer": ("KTOTrainer", "kto", {"compute_ref_log_probs": "reference", "_compute_loss": "loss"}),
    "trl.trainer.reward_trainer": ("RewardTrainer", "rm", {}),
}
"""trl 1.16 module → (trainer class, memdoc's task, {method: the phase it runs}). "loss" is no phase of its own:
inside DPO's and KTO's `_compute_loss` a root forward under `torch.no_grad()` is the reference forward (trl 1.16
`DPOTrainer._compute_loss`: `self.ref_model(...)`, or the policy with the adapter disabled, under `no_grad`;
`KTOTrainer._compute_loss` also runs the policy's KL log-probs, `_compute_kl_logps`, under `no_grad`)."""

NO_GRAD_REFERENCE = "_get_per_token_logps_and_entropies"
"""GRPO/RLOO's log-prob forward: the reference (or old policy) phase when called with gradients disabled."""

KNOBS = (
    "beta",
    "loss_type",
    "max_length",
    "precompute_ref_log_probs",
    *GENERATION_KEYS,
    "use_liger_kernel",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
)
"""The trainer config fields reported (those the config has): TRL 1.16 `GRPOConfig`, `RLOOConfig`, `DPOConfig`,
`KTOConfig`, `RewardConfig`."""

_ORIGINAL = "_memdoc_original"


def task_of(trainer) -> str | None:
    """memdoc's task for a trainer instance (by the TRL class in its MRO), or None."""
    names = {cls: task for cls, task, _ in TRAINERS.values()}
    for klass in type(trainer).__mro__:
        if klass.__name__ in names and klass.__module__.startswith("trl."):
            return names[klass.__name__]
    return None


def knobs_of(trainer) -> dict:
    """The post-training fields of the trainer's config (`trainer.args`), as plain values."""
    args = getattr(trainer, "args", None)
    out = {}
    for name in KNOBS:
        if hasattr(args, name):
            value = getattr(args, name)
            plain = (bool, int, float, str, type(None))
            if isinstance(value, (list, tuple)) and all(isinstance(v, plain) for v in value):
                value = list(value)  # DPOConfig.loss_type is a list
            out[name] = value if isinstance(value, (plain, list)) else str(value)
    return out


def _wrap(session, method, phase: str | None):
    """`method` running under the session's post-training `phase` (None: reference when grad is disabled)."""

    @functools.wraps(method)
    def wrapped(self, *args, **kwargs):
        session.saw_trainer(self)
        name = phase
        if name is None:
            name = None if session.torch.is_grad_enabled() else "reference"
        if name == "loss":
            session.post_loss += 1
            try:
                return method(self, *args, **kwargs)
            finally:
                session.post_loss -= 1
        if name is None or session.post_phase is not None:
            return method(self, *args, **kwargs)
        session.enter_post(name)
        try:
            return method(self, *args, **kwargs)
        finally:
            session.leave_post()

    setattr(wrapped, _ORIGINAL, method)
    return wrapped


def patch_trl(session, patched: list) -> None:
    """Wrap the methods of every TRL trainer module already imported (once per class); `patched` collects
    (class, name, original) for `unpatch`."""
    done = {(id(k), n) for k, n, _ in patched}
    for module_name, (class_name, _task, methods) in TRAINERS.items():
        module = sys.modules.get(module_name)
        klass = getattr(module, class_name, None) if module is not None else None
        if klass is None:
            continue
        wanted = dict(methods)
        if hasattr(klass, NO_GRAD_REFERENCE):
            wanted[NO_GRAD_REFERENCE] = None
        # recognises the trainer (its args) without a phase of its own: called every step, after the patch
        wanted.setdefault("compute_loss", "")
        for name, phase in wanted.items():
            original = getattr(klass, name, None)
            if original is None or (id(klass), name) in done or hasattr(original, _ORIGINAL):
                continue
            own = klass.__dict__.get(name)
            setattr(klass, name, _recognise(session, original) if phase == "" else _wrap(session, original, phase))
            patched.append((klass, name, own))


def _recognise(session, method):
    @functools.wraps(method)
    def wrapped(self, *args, **kwargs):
        session.saw_trainer(self)
        return method(self, *args, **kwargs)

    setattr(wrapped, _ORIGINAL, method)
    return wrapped


def unpatch(patched: list) -> None:
    """Put the original methods back (newest first); an inherited one is deleted from the class again."""
    for klass, name, own in reversed(patched):
        if own is None:
            delattr(klass, name)
        else:
            setattr(klass, name, own)
    patched.clear()


def post_report(session, first_step: int = 1) -> dict | None:
    """{"trainer", "task", "knobs", "phases", "peak_phase", "generation_rounds"} of the run's TRL trainer: each
    phase's line items at its peak (STEP_PHASES order; the tracker's buckets), None when no TRL trainer ran.
    `first_step`: the number of the session's first step in the run (the callback measures one later step)."""
    trainer = session.trainer
    if trainer is None:
        return None
    phases = {}
    for phase in STEP_PHASES:
        items = session.phase_peak.get(phase)
        if items:
            phases[phase] = {k: int(items.get(k, 0)) for k in LINE_ITEMS} | {
                "peak_allocated": int(items["peak_allocated"]),
                "step": int(items.get("step", 1)) - 1 + first_step,
            }
    peak = max(phases, key=lambda p: (phases[p]["peak_allocated"], -STEP_PHASES.index(p)), default=None)
    return {
        "trainer": type(trainer).__name__,
        "task": task_of(trainer),
        "knobs": knobs_of(trainer),
        "phases": phases,
        "peak_phase": peak,
        "generation_rounds": [
            {k: v for k, v in r.items() if not k.startswith("_")} | {"step": r["step"] - 1 + first_step}
            for r in session.rounds
        ],
    }


def plan_fields(report: dict, input_shape: tuple | None) -> dict:
    """The plan's post-training fields (`memdoc.core.model.plan_post.PostTrainingFields`) from the trainer's
    knobs, and for the online tasks the prompt length: the trained row (`input_shape`'s sequence, the policy's
    grad-enabled forward) less `max_completion_length` (TRL pads completions to the longest one)."""
    from memdoc.core.model.plan_post import Task, Vllm

    knobs = report["knobs"]
    task = Task(report["task"])
    fields: dict = {"task": task}
    if knobs.get("beta") is not None:
        fields["beta"] = float(knobs["beta"])
    if task in (Task.DPO, Task.KTO):
        fields["precompute_ref"] = bool(knobs.get("precompute_ref_log_probs", False))
    if task.is_paired and input_shape:  # the forward's rows are chosen + rejected: the plan counts pairs
        fields["micro_batch"] = max(1, int(input_shape[0]) // 2)
    if task.is_online:
        for knob, field in (("num_generations", "num_generations"), ("num_iterations", "num_iterations")):
            if knobs.get(knob):
                fields[field] = int(knobs[knob])
        if knobs.get("max_completion_length"):
            fields["completion_len"] = int(knobs["max_completion_length"])
        if knobs.get("generation_batch_size"):
            fields["generation_batch"] = int(knobs["generation_batch_size"])
        if knobs.get("use_vllm"):
            fields["vllm"] = Vllm(knobs.get("vllm_mode") or "colocate")
            if knobs.get("vllm_gpu_memory_utilization") is not None:  # else the plan's default, TRL's
                fields["vllm_memory"] = float(knobs["vllm_gpu_memory_utilization"])
            fields["vllm_sleep"] = bool(knobs.get("vllm_enable_sleep_mode", False))
        if input_shape and fields.get("completion_len"):
            fields["seq_len"] = max(1, int(input_shape[1]) - fields["completion_len"])
    return fields


def post_notes(post: dict, measured: dict) -> list[str]:
    """A note when a post-training phase (generation, reference) peaks above the training phases' peak, which
    `measured` (forward, backward, optimizer) reports."""
    notes = []
    for phase in ("generation", "reference"):
        items = post["phases"].get(phase)
        if items and items["peak_allocated"] > measured.get("peak_allocated", 0):
            notes.append(
                f"{post['trainer']}'s {phase} peaks at {items['peak_allocated']} bytes, above the training phases' "
                "peak: see post_training"
            )
    return notes


def post_line(post: dict) -> str:
    """One log line: the trainer, its task and each phase's measured peak (and billed, where billed)."""
    parts = []
    for phase, items in post["phases"].items():
        billed = (post.get("billed") or {}).get(phase)
        parts.append(f"{phase} {items['peak_allocated']}" + (f" (billed {billed})" if billed is not None else ""))
    rounds = ", ".join(str(r["peak_allocated"]) for r in post["generation_rounds"])
    tail = f"; generation rounds' peaks: {rounds}" if rounds else ""
    return f"memdoc: {post['trainer']} ({post['task']}) peak bytes by phase: " + ", ".join(parts) + tail
