"""`memdoc diagnose MODEL`'s dry run: trace a step of the real transformers model on fake tensors (and run it
on the local GPU with `--device cuda`), or a prefill with `--inference`, and put it next to the bill in a
report of `memdoc.core.reports.diagnose`.

`reporter` is the progress bar of the human output (`memdoc.render.progress_reporter`: called with a title,
used as a context manager that yields `progress(message, fraction)`), None for --json.
"""

from __future__ import annotations

import contextlib
from typing import Callable

from memdoc.core.billing.bill import compute_bill
from memdoc.core.billing.inference import InferencePlan, inference_bill
from memdoc.core.model.gpu import GpuSpec
from memdoc.core.model.model_spec import ModelSpec
from memdoc.core.model.plan import TrainingPlan
from memdoc.core.reports.diagnose import TracedPrefillReport, TracedStepReport
from memdoc.errors import PlanError
from memdoc.probe.quiet import quiet_libraries

Reporter = Callable[[str], contextlib.AbstractContextManager]


def check_one_process(plan: TrainingPlan) -> None:
    """Refuse --cp/--tp: a dry run traces one process, and they split a step over several."""
    if plan.cp > 1 or plan.tp > 1:
        raise PlanError(
            "diagnose traces one process and --cp/--tp split a step over several: use memdoc bill "
            "(docs/parallelism.md: its per-rank bill against torch TP and DeepSpeed Ulysses)"
        )


def step_tracer(plan: TrainingPlan, device: str):
    """The tracer of the plan's step: the supervised one (`probe/tracer.py`), or the post-training one
    (`probe/posttrain.py`, for --task dpo|grpo|rloo: generation and reference phases); refuses what neither
    traces, and `device` "cuda" without a usable GPU, before any tracing."""
    if plan.task.value != "sft":
        from memdoc.probe.posttrain import check_traceable, trace_posttrain_step

        if device == "cuda":
            raise PlanError(
                f"--device cuda runs a supervised step; --task {plan.task.value} traces on fake tensors only"
            )
        check_traceable(plan)
        return trace_posttrain_step
    if device == "cuda":
        from memdoc.probe.cuda_step import require_cuda

        require_cuda(plan)
    from memdoc.probe.tracer import trace_training_step

    return trace_training_step


def _progress(reporter: Reporter | None, title: str) -> contextlib.AbstractContextManager:
    return contextlib.nullcontext() if reporter is None else reporter(title)


def dry_run_step(
    tracer,
    config: dict,
    model: ModelSpec,
    plan: TrainingPlan,
    gpu: GpuSpec | None,
    *,
    device: str,
    reporter: Reporter | None = None,
) -> TracedStepReport:
    """Trace one steady-state step of `config` under `plan` with `tracer` (`step_tracer`), bill it, and with
    `device` "cuda" run it for real on the local GPU too."""
    with _progress(reporter, f"tracing {model.id}") as progress, quiet_libraries():
        measurement = tracer(config, plan, progress=progress)
    bill = compute_bill(model, plan, gpu)
    cuda = None
    if device == "cuda":
        from memdoc.probe.cuda_step import run_cuda_step

        with quiet_libraries():
            cuda = run_cuda_step(config, plan)
    return TracedStepReport(model=model, plan=plan, gpu=gpu, measurement=measurement, bill=bill, cuda=cuda)


def dry_run_prefill(
    config: dict, model: ModelSpec, inference: InferencePlan, gpu: GpuSpec | None, *, reporter: Reporter | None = None
) -> TracedPrefillReport:
    """Trace a prefill of `config` under `inference` on fake tensors, next to its inference bill."""
    from memdoc.probe.inference_trace import trace_prefill

    plan, chunk = inference.plan, inference.prefill_chunk
    with quiet_libraries(), _progress(reporter, f"tracing a prefill of {model.id}"):
        traced = trace_prefill(config, plan, chunk=chunk, vocab_size=model.vocab_size)
    return TracedPrefillReport(traced=traced, bill=inference_bill(model, inference, gpu))
