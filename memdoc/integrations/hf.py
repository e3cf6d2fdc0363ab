"""memdoc inside a Hugging Face training run: `MemdocCallback` (HF Trainer and TRL's trainers).

    trainer = Trainer(..., callbacks=[MemdocCallback()])      # or SFTTrainer, DPOTrainer, …

What it does, with no effect on training while memory is fine:

- **The first steady-state step** (the 2nd optimizer step: optimizer states exist; the 1st if the
  run has one step) is measured. On a GPU: the allocator's peak (`torch.cuda.max_memory_allocated`,
  `max_memory_reserved`, after `reset_peak_memory_stats()` at the step's start — skipped when the
  Trainer itself tracks memory, `skip_memory_metrics=False`). On CPU: the dispatch-level tensor
  tracking of `memdoc diagnose SCRIPT` (`memdoc.probe.script.session`), itemised.
- The plan is detected from the Trainer's arguments and model (precision from the weights' dtype
  and bf16/fp16, LoRA/QLoRA from peft, checkpointing, the optimizer's class, the step's largest
  micro-batch shape, Liger) and billed (`compute_bill`); "measured vs billed" goes to the
  Trainer's logger (`transformers.trainer`, INFO), and the JSON report is written.
- **Every step**: the memory held at its start (CUDA: `memory_allocated()`; CPU: the resident set)
  and its largest micro-batch shape. Growth gives the `memory-growth` finding (a WARNING log line).
  On a GPU, headroom below `warn_headroom` of the card after the measured step is a WARNING too.
- **Out of memory**: TrainerCallback has no exception event, so at `on_train_begin` the callback
  finds its Trainer (walking up the call stack to the frame of `Trainer._inner_training_loop`) and
  wraps that Trainer's `training_step` (forward + backward) and its optimizer's `step`. On
  `torch.OutOfMemoryError` there, the report gets the OOM's figures (parsed by the OOM doctor), the
  symptom, the prescriptions quantified on the failing batch's plan and the allocator's statistics;
  then the exception propagates unchanged (`auto_find_batch_size` still sees it). An OOM elsewhere
  (evaluation, saving) is not caught.
- **Inside TRL's trainers** (GRPO, RLOO, DPO, KTO, reward): the measured step by phase, generation (each
  round) and the reference forward included (`memdoc.probe.script.trl_phases`; on a GPU the allocator's counters
  per phase, `memdoc.integrations.post_cuda`), next to the bill's phases by name: the report's `post_training`.
- A failure inside memdoc is logged as a WARNING and training goes on (`MEMDOC_DEBUG=1` raises it).

The report (default `OUTPUT_DIR/memdoc-report.json`; `.rankN` before `.json` with several
processes) is rewritten after the measured step, when a finding appears, on an OOM and at the end.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import traceback
from pathlib import Path

from transformers import TrainerCallback
from transformers.utils import logging as hf_logging

from memdoc.core.billing.bill_json import with_bill
from memdoc.integrations.post_cuda import CudaPhases
from memdoc.integrations.record import RunRecord, batch_key, billed_json, oom_record
from memdoc.probe.script.trl_phases import knobs_of, post_line, post_report, task_of
from memdoc.units import format_bytes

logger = hf_logging.get_logger("transformers.trainer")

_WRAPPED = "_memdoc_wrapped"
MISMATCH = 0.25
"""A bill further than this from the measured peak gets a note in the report."""


def _safe(event):
    """A callback event that never breaks training: a failure inside memdoc is logged and the run goes on
    (MEMDOC_DEBUG=1 raises it instead)."""

    @functools.wraps(event)
    def guarded(self, *args, **kwargs):
        try:
            return event(self, *args, **kwargs)
        except Exception as exc:
            if os.environ.get("MEMDOC_DEBUG"):
                raise
            logger.warning(f"memdoc: internal error in {event.__name__} ({exc!r}); training goes on without it")
            return None

    return guarded


def _find_trainer():
    """The `transformers.Trainer` whose training loop called this callback event, or None."""
    from transformers import Trainer

    frame = inspect.currentframe()
    for _ in range(12):
        if frame is None:
            return None
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, Trainer):
            return candidate
        frame = frame.f_back
    return None


def _batch_shape(inputs) -> tuple[int, int] | None:
    """(batch, sequence) of a Trainer batch: its `input_ids`, else its first 2-D tensor."""
    import torch

    if not hasattr(inputs, "items"):
        return None
    ids = inputs.get("input_ids")
    tensors = [ids] if isinstance(ids, torch.Tensor) else [v for v in inputs.values() if isinstance(v, torch.Tensor)]
    for t in tensors:
        if t.dim() == 2:
            return int(t.shape[0]), int(t.shape[1])
    return None


def is_oom(exc: BaseException) -> bool:
    """torch.OutOfMemoryError, or a RuntimeError carrying an out-of-memory text (cuBLAS/cuDNN allocation
    failures, "CUDA error: out of memory")."""
    import torch

    from memdoc.core.doctor.oom import first_oom

    if isinstance(exc, torch.OutOfMemoryError):
        return True
    return isinstance(exc, RuntimeError) and first_oom(str(exc)) is not None


def _rss_bytes() -> int | None:
    """The process's resident set (Linux /proc), or None."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _optimizer_info(optimizer) -> dict | None:
    inner = getattr(optimizer, "optimizer", optimizer)  # accelerate's AcceleratedOptimizer wraps it
    if inner is None:
        return None
    defaults = getattr(inner, "defaults", {}) or {}
    return {"class": type(inner).__name__, "foreach": defaults.get("foreach"), "fused": defaults.get("fused")}


def _checkpointing_on(hf) -> bool:
    """Whether the model has activation checkpointing switched on (the property's 5.x name first)."""
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        if hasattr(type(hf), name):
            return bool(getattr(hf, name))
    return False


def _checkpointing_asked(args) -> bool:
    """TrainingArguments' checkpointing switch (`activation_checkpointing` in transformers 5, formerly
    `gradient_checkpointing`, which is now a deprecated alias)."""
    value = getattr(args, "activation_checkpointing", None)
    return bool(args.gradient_checkpointing if value is None else value)


class MemdocCallback(TrainerCallback):
    """Measure the first steady-state step against memdoc's bill, watch memory, and explain an OOM.

    `report`: the JSON report's path (default: `OUTPUT_DIR/memdoc-report.json`).
    `warn_headroom`: on a GPU, warn when less than this share of the card is left at the measured
    step's peak (reserved + what the rest of the device uses).
    """

    def __init__(self, report: str | os.PathLike | None = None, warn_headroom: float = 0.05):
        if not 0 <= warn_headroom < 1:
            raise ValueError(f"warn_headroom must be a fraction of the GPU's memory in [0, 1), got {warn_headroom!r}")
        self.report = report
        self.warn_headroom = warn_headroom
        self.record: RunRecord | None = None
        self._path: Path | None = None
        self._trainer = None
        self._model = None
        self._optimizer = None
        self._args = None
        self._cuda = False
        self._steps_begun = 0
        self._measure_at = 2
        self._measuring = None  # (ExitStack, Session) while the measured step runs
        self._step = 0
        self._step_batch: tuple[int, int] | None = None
        self._step_start: int | None = None

    # ------------------------------------------------------------------ events
    @_safe
    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        self._args = args
        self._cuda = args.device.type == "cuda"
        self._trainer = _find_trainer()
        self._model = model if model is not None else getattr(self._trainer, "model", None)
        self._optimizer = getattr(self._trainer, "optimizer", None) or optimizer
        self._measure_at = 2 if (state.max_steps or 2) >= 2 else 1
        self._steps_begun = 0
        name = f"memdoc-report.rank{args.process_index}.json" if args.world_size > 1 else "memdoc-report.json"
        path = Path(self.report) if self.report is not None else Path(args.output_dir) / name
        if self.report is not None and args.world_size > 1:
            path = path.with_name(f"{path.stem}.rank{args.process_index}{path.suffix}")
        self._path = path
        earlier = self.record.oom if self.record is not None else None
        device = "cpu"
        if self._cuda:
            import torch

            device = f"{args.device} ({torch.cuda.get_device_name(args.device)})"
        self.record = RunRecord(device=device, memory_source="cuda-allocated" if self._cuda else "cpu-rss")
        if earlier is not None:  # auto_find_batch_size retries the loop with a smaller batch after an OOM
            self.record.note(
                f"an earlier attempt ran out of memory in step {earlier['step']} (batch {earlier['batch']}, "
                f"{earlier['symptom']}); the Trainer restarted with a smaller batch"
            )
        self._install_wrappers()

    @_safe
    def on_step_begin(self, args, state, control, **kwargs):
        if self.record is None:
            return
        self._steps_begun += 1
        self._step = state.global_step + 1
        self._step_batch = None
        self._step_start = self._memory_now()
        if self._steps_begun == self._measure_at and self._measuring is None:
            self._start_measuring()

    @_safe
    def on_step_end(self, args, state, control, **kwargs):
        if self.record is None:
            return
        if self._measuring is not None:
            self._finish_measuring()
        finding = self.record.log_step(self._step, self._step_start, self._step_batch)
        if finding is not None:
            logger.warning(f"memdoc: {finding.message} ({finding.prescribe}); report: {self._path}")
            self._write()

    @_safe
    def on_train_end(self, args, state, control, **kwargs):
        if self.record is None:
            return
        if self._measuring is not None:
            self._stop_measuring()
        if self.record.status == "running":
            self.record.status = "finished"
        self._write()
        largest = self.record.largest_batch
        if largest is not None and self.record.plan is not None:
            bill = self._bill(tuple(largest["shape"]))
            if bill is not None:
                largest["billed_peak_allocated"] = bill.peak_allocated
                self._write()

    # ------------------------------------------------------------------ wrappers (the OOM hook)
    def _install_wrappers(self) -> None:
        trainer = self._trainer
        if trainer is None:
            self.record.note("the Trainer was not found from the callback: out-of-memory errors are not reported")
            return
        if not getattr(trainer.training_step, _WRAPPED, False):
            trainer.training_step = self._wrap(trainer.training_step, "training_step", watch_batch=True)
        opt = trainer.optimizer
        if opt is not None and not getattr(opt.step, _WRAPPED, False):
            opt.step = self._wrap(opt.step, "optimizer.step", watch_batch=False)

    def _wrap(self, original, where: str, *, watch_batch: bool):
        def wrapped(*args, **kwargs):
            if watch_batch:
                self._saw_batch(args[1] if len(args) > 1 else kwargs.get("inputs"))
            try:
                return original(*args, **kwargs)
            except BaseException as exc:
                self._on_exception(exc, where)
                raise

        functools.update_wrapper(wrapped, original)  # keeps attributes others set (the LR scheduler's step counter)
        setattr(wrapped, _WRAPPED, True)
        return wrapped

    def _saw_batch(self, inputs) -> None:
        shape = _batch_shape(inputs)
        if shape is not None and (self._step_batch is None or batch_key(shape) > batch_key(self._step_batch)):
            self._step_batch = shape

    def _on_exception(self, exc: BaseException, where: str) -> None:
        try:
            if self._measuring is not None:
                self._stop_measuring()
            if is_oom(exc) and self.record is not None:
                self._report_oom(exc, where)
        except Exception as report_error:  # never mask the user's exception with memdoc's own failure
            logger.warning(f"memdoc: could not write the OOM report: {report_error!r}")

    def _report_oom(self, exc: BaseException, where: str) -> None:
        record = self.record
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        bill = self._bill(self._step_batch) if self._step_batch else None
        oom = oom_record(
            str(exc),
            text,
            step=self._step,
            where=where,
            batch=self._step_batch,
            longest_before=record.max_seq_before(self._step),
            first_step=self._steps_begun <= 1,
            bill=bill,
        )
        if bill is not None:
            oom["billed"] = billed_json(bill)
            oom["plan"] = bill.plan.to_dict()
        if self._cuda:
            import torch

            from memdoc.probe.cuda_stats import digest_stats

            with contextlib.suppress(RuntimeError):
                oom["cuda"] = digest_stats(torch.cuda.memory_stats())
        record.oom = oom
        record.status = "oom"
        self._write()
        logger.warning(
            f"memdoc: out of memory in step {self._step} ({where}); looks like {oom['symptom']}: "
            f"{oom['prescribe']}; report: {self._path}"
        )

    # ------------------------------------------------------------------ the measured step
    def _memory_now(self) -> int | None:
        if self._cuda:
            import torch

            return int(torch.cuda.memory_allocated(self._args.device))
        return _rss_bytes()

    def _start_measuring(self) -> None:
        from memdoc.probe.script.session import Session, instrument, make_tracker

        session = Session(steps=1 << 62, timeout=None)
        # the model and optimizer exist before the step: their states count from its first op on
        if self._model is not None:
            session.roots[id(self._model)] = self._model
        if self._optimizer is not None:
            session.optimizers.append(getattr(self._optimizer, "optimizer", self._optimizer))
        if self._trainer is not None and task_of(self._trainer) is not None:
            session.saw_trainer(self._trainer)  # TRL's trainer: its generation and reference phases (trl_phases)
        stack = contextlib.ExitStack()
        stack.enter_context(instrument(session))  # phases, and the embedding's input shape
        if self._cuda:
            import torch

            if self._args.skip_memory_metrics:
                torch.cuda.reset_peak_memory_stats(self._args.device)
                if session.trainer is not None:  # TRL's phases from the peak counters (reset per phase)
                    session.post_listener = CudaPhases(self._args.device)
            else:
                self.record.note(
                    "the Trainer tracks memory (skip_memory_metrics=False): the peak counters "
                    "were not reset, the measured peak is the run's so far"
                )
        else:
            stack.enter_context(make_tracker(session))  # every tensor op: the CPU's allocated bytes
        self._measuring = (stack, session)

    def _stop_measuring(self):
        stack, session = self._measuring
        self._measuring = None
        stack.close()
        session.in_report = True
        return session

    def _finish_measuring(self) -> None:
        session = self._stop_measuring()
        record = self.record
        if self._cuda:
            measured = self._cuda_measured(session)
        else:
            session.sweep()
            _, peak_phase, measured = session.peaks()
            measured = {"source": "cpu-dispatch", "peak_phase": peak_phase, **measured}
        measured["step"] = self._step
        record.measured = measured
        if self._step_batch is None and session.first_input_shape:  # no Trainer found: the embedding's input
            self._step_batch = tuple(int(n) for n in session.first_input_shape)
        if session.post_listener is not None:
            post = session.post_listener.report(session.trainer, self._step)
        else:
            post = post_report(session, first_step=self._step) if not self._cuda else None
        bill = self._bill(self._step_batch)
        if post is not None:
            record.post = with_bill(post, bill)
            logger.info(post_line(record.post))
        if bill is not None:
            record.billed = billed_json(bill)
            gap = bill.peak_allocated / measured["peak_allocated"] - 1 if measured["peak_allocated"] else 0.0
            if abs(gap) > MISMATCH:
                record.note(
                    f"the bill is {gap:+.0%} off the measured peak: the step runs code the bill does not model "
                    "(a trainer's own loss head, custom kernels, extra tensors kept); the measurement is what ran"
                )
            line = (
                f"memdoc: step {self._step} ({self._step_batch[0]} × {self._step_batch[1]} tokens) measured "
                f"{format_bytes(measured['peak_allocated'])} peak allocated, billed "
                f"{format_bytes(bill.peak_allocated)} "
                f"({bill.plan.method.value}, {bill.plan.precision.value}, {bill.plan.optimizer.value}, "
                f"checkpointing {bill.plan.checkpointing.value}); report: {self._path}"
            )
        else:
            line = (
                f"memdoc: step {self._step} measured {format_bytes(measured['peak_allocated'])} peak "
                f"allocated; report: {self._path}"
            )
        logger.info(line)
        if record.headroom_bytes is not None and self._cuda:
            import torch

            total = torch.cuda.mem_get_info(self._args.device)[1]
            if record.headroom_bytes < self.warn_headroom * total:
                logger.warning(
                    f"memdoc: only {format_bytes(record.headroom_bytes)} of {format_bytes(total)} left at the "
                    f"peak of step {self._step}: a longer batch will run out of memory "
                    f"(memdoc prescribe --symptom long-sample-oom)"
                )
        self._write()

    def _cuda_measured(self, session) -> dict:
        import torch

        dev = self._args.device
        peak_allocated, peak_reserved = (
            int(torch.cuda.max_memory_allocated(dev)),
            int(torch.cuda.max_memory_reserved(dev)),
        )
        if session.post_listener is not None:  # the counters were reset at each post-training phase
            peak_allocated, peak_reserved = session.post_listener.step_peaks()
        free, _total = torch.cuda.mem_get_info(dev)
        # free now, less what the allocator reserved at the peak beyond what it holds now
        self.record.headroom_bytes = int(free - (peak_reserved - torch.cuda.memory_reserved(dev)))
        weights, _grads, opt = session.state_bytes()
        return {
            "source": "cuda-allocator",
            "peak_allocated": peak_allocated,
            "peak_reserved": peak_reserved,
            "weights": sum(weights.values()),
            "optimizer": sum(opt.values()),
        }

    # ------------------------------------------------------------------ the plan and its bill
    def _bill(self, shape: tuple[int, int] | None):
        """The bill of the detected plan at batch `shape` (None when the model is not a billable HF model)."""
        from memdoc.core.billing.bill import compute_bill
        from memdoc.core.model.gpu import generic_gpu
        from memdoc.core.model.vision.vlm import model_spec
        from memdoc.errors import MemdocError
        from memdoc.probe.script.detect import (
            detect_plan,
            find_hf_model,
            model_identity,
            with_task,
        )
        from memdoc.units import GiB

        if shape is None:
            self.record.note("no batch shape was seen (no input_ids): the step is not billed")
            return None
        found = find_hf_model([self._model]) if self._model is not None else None
        if found is None:
            self.record.note("not a transformers model: nothing to bill")
            return None
        hf, peft_model = found
        args = self._args
        plan, detected = detect_plan(
            hf,
            peft_model,
            autocast="bf16" if args.bf16 else ("fp16" if args.fp16 else None),
            checkpointing=bool(_checkpointing_asked(args) or _checkpointing_on(hf)),
            optimizer=_optimizer_info(self._optimizer),
            input_shape=shape,
            cuda=self._cuda,
            fused_loss=bool(getattr(args, "use_liger_kernel", False)),
        )
        if self._trainer is not None and task_of(self._trainer) is not None:
            post = {"task": task_of(self._trainer), "knobs": knobs_of(self._trainer)}
            plan, detected = with_task(plan, detected, post, shape)
        model_id, config = model_identity(hf)
        gpu = None
        if self._cuda:
            import torch

            gpu = generic_gpu(torch.cuda.get_device_properties(args.device).total_memory / GiB)
        try:
            spec = model_spec(config, model_id=model_id, source="local")
        except MemdocError as exc:
            self.record.note(f"no bill for {model_id}: {exc}")
            return None
        if self.record.plan is None:
            self.record.model, self.record.plan, self.record.detected = model_id, plan.to_dict(), detected
        if args.world_size > 1 and (getattr(args, "deepspeed", None) or getattr(args, "fsdp", None)):
            self.record.note("DeepSpeed/FSDP sharding is not detected: the bill is for one unsharded GPU")
        return compute_bill(spec, plan, gpu)

    def _write(self) -> None:
        if self._path is not None and self.record is not None:
            self.record.write(self._path)
