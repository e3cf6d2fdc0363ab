"""`memdoc diagnose`: measure a training step — a dry run of a model, or the user's own script."""

from enum import Enum
from typing import Annotated, Optional

import typer

from memdoc.commands.html_page import check_html, script_timeline, write_html
from memdoc.commands.options import (
    ForceOpt,
    HtmlOpt,
    JsonOpt,
    PlanFlags,
    PrefillChunkOpt,
    plan_options,
    print_setup_notes,
)
from memdoc.core.model.ranges import INT32_MAX
from memdoc.errors import PlanError

EXAMPLES = """
Examples:

  memdoc diagnose meta-llama/Llama-3.2-1B --batch 4 --seq 2048

  memdoc diagnose Qwen/Qwen2.5-7B --method lora --checkpointing full --json

  memdoc diagnose meta-llama/Llama-3.1-8B --inference --batch 4 --seq 8192 --prefill-chunk 2048

  memdoc diagnose train.py -- --lr 1e-4 --batch-size 8

  memdoc diagnose train.py --steps 3 --snapshot mem.pickle --summary

Exit status: 0 measured (also when stopped by --steps or --timeout), 1 the script raised an
exception (its traceback is shown), 2 bad input (unknown model, unreadable script, syntax
error), 3 the script ran out of memory, 130 interrupted (Ctrl-C / KeyboardInterrupt), 143 stopped by
SIGTERM (a scheduler, timeout, docker stop). A script's
own non-zero sys.exit() or os._exit() status is passed through. The report is always printed
first, whatever the script does (exits, forks, closes stdout, ignores the timeout).
"""

RUN = "Script mode"
MAX_TIMEOUT_S = 7 * 24 * 3600
"""Longest --timeout (a week); longer is "never" (0), and SIGALRM cannot hold an infinite one."""


class Device(str, Enum):
    """Where a dry run's step runs."""

    CPU = "cpu"
    """Traced under fake tensors (no GPU needed)."""
    CUDA = "cuda"
    """Traced, then also run for real on the local GPU."""


TargetArg = Annotated[
    str,
    typer.Argument(
        metavar="TARGET",
        help="A training script (train.py) to run and measure, or an HF model id / directory / config.json to dry-run.",
        show_default=False,
    ),
]
ScriptArgs = Annotated[
    Optional[list[str]],
    typer.Argument(metavar="SCRIPT_ARGS", help="Arguments for the script, after `--`.", show_default=False),
]
StepsOpt = Annotated[
    int,
    typer.Option(
        "--steps",
        min=1,
        max=INT32_MAX,
        help="Stop the script after this many optimizer steps (the 2nd is the steady state: optimizer states "
        "exist; ≥ 3 also checks for memory that grows step by step).",
        rich_help_panel=RUN,
    ),
]
TimeoutOpt = Annotated[
    float,
    typer.Option("--timeout", min=0, help="Stop the script after this many seconds (0 = never).", rich_help_panel=RUN),
]
SnapshotOpt = Annotated[
    Optional[str],
    typer.Option(
        "--snapshot",
        metavar="PATH",
        help="Write the CUDA memory snapshot pickle here (for pytorch.org/memory_viz) and an offline HTML timeline "
        "next to it (FILE.html; for FILE.html, the pickle is FILE.pickle). Existing files only with --force.",
        rich_help_panel=RUN,
    ),
]
SummaryOpt = Annotated[
    bool, typer.Option("--summary", help="Print torch.cuda.memory_summary() (CUDA scripts).", rich_help_panel=RUN)
]
DeviceOpt = Annotated[
    Device,
    typer.Option(
        "--device",
        help="Dry run: 'cpu' traces under fake tensors (no GPU needed); 'cuda' also runs the step for real on "
        "the local GPU.",
    ),
]
InferenceOpt = Annotated[
    bool,
    typer.Option(
        "--inference",
        help="Dry run: trace a generation prefill (--batch sequences of --seq tokens into the KV cache) instead "
        "of a training step.",
    ),
]


@plan_options
def diagnose(
    target: TargetArg,
    script_args: ScriptArgs = None,
    *,
    plan: PlanFlags,
    json_out: JsonOpt = False,
    html: HtmlOpt = None,
    steps: StepsOpt = 2,
    timeout: TimeoutOpt = 300.0,
    snapshot: SnapshotOpt = None,
    force: ForceOpt = False,
    summary: SummaryOpt = False,
    device: DeviceOpt = Device.CPU,
    inference: InferenceOpt = False,
    prefill_chunk: PrefillChunkOpt = None,
) -> None:
    """Measure the memory of a training step and explain it.

    Given a MODEL: trace one steady-state training step of the real transformers model under fake
    tensors (no GPU, no weights) and print the measured line items next to the analytic bill.

    Given a SCRIPT: run it in-process (like `python train.py ARGS`), stop it after --steps optimizer
    steps (or when it ends, fails, runs out of memory or times out), and report the peak tensor
    memory itemised as weights, gradients, optimizer states, activations and other — measured vs
    billed for HF models — with findings that each name a `memdoc prescribe` entry.
    """
    from memdoc.errors import PlanError
    from memdoc.probe.script import is_script_target

    if not timeout <= MAX_TIMEOUT_S:  # also refuses inf and nan
        raise PlanError(f"--timeout {timeout:g} must be a number of seconds up to {MAX_TIMEOUT_S:,} (0 = never)")
    check_html(html, force)
    if is_script_target(target):
        run = ScriptRun(target, json_out=json_out, snapshot=snapshot, summary=summary, force=force, html=html)
        return run.start(list(script_args or []), plan=plan, steps=steps, timeout=timeout)
    if script_args:
        raise PlanError(
            f"arguments after the model are for scripts only: {' '.join(script_args)}",
            hint="a script must end with .py or be an existing file",
        )
    if inference and device is not Device.CPU:
        raise PlanError("--inference traces on fake tensors only (--device cpu)")
    if inference and html is not None:
        raise PlanError("--html draws a training step; a traced prefill has no page yet (use --json)")
    if inference:
        return _diagnose_inference(target, plan=plan, json_out=json_out, prefill_chunk=prefill_chunk)
    if prefill_chunk is not None:
        raise PlanError("--prefill-chunk goes with --inference")
    _diagnose_model(target, plan=plan, json_out=json_out, device=device.value, page=(html, force))


def _diagnose_inference(target: str, *, plan: PlanFlags, json_out: bool, prefill_chunk: int | None) -> None:
    """Trace a prefill of the real model on fake tensors and print it next to the inference bill."""
    from memdoc import render
    from memdoc.core.billing.inference import InferencePlan, inference_bill
    from memdoc.probe.inference_trace import trace_prefill
    from memdoc.probe.quiet import quiet_libraries
    from memdoc.render.inference import render_inference_trace
    from memdoc.resolve.models import load_config

    setup = plan.resolve(target, need_gpu=False)
    if not json_out:
        print_setup_notes(setup, gpu_note=False)
    inference = InferencePlan(plan=setup.plan, prefill_chunk=prefill_chunk)
    _, config, _ = load_config(setup.model.id if setup.model.source == "catalog" else target)
    with quiet_libraries():
        if json_out:
            traced = trace_prefill(config, setup.plan, chunk=prefill_chunk, vocab_size=setup.model.vocab_size)
        else:
            with render.progress_reporter(f"tracing a prefill of {setup.model.id}"):
                traced = trace_prefill(config, setup.plan, chunk=prefill_chunk, vocab_size=setup.model.vocab_size)
    billed = inference_bill(setup.model, inference, setup.gpu)
    if json_out:
        data = billed.to_json()
        render.print_json(
            {
                "mode": "inference-traced",
                "model": data["model"],
                "gpu": data["gpu"],
                "plan": data["plan"],
                "traced": traced.to_json(),
                "billed": {k: v for k, v in data["per_gpu"].items() if k != "process_total"},
            }
        )
    else:
        render_inference_trace(traced, billed)


def _diagnose_model(target: str, *, plan: PlanFlags, json_out: bool, device: str, page: tuple) -> None:
    """Trace one training step of MODEL on fake tensors (and on the GPU with --device cuda) and report it
    next to the bill; `page` is (--html FILE or None, --force)."""
    from memdoc import render
    from memdoc.core.billing.bill import bill_json, compute_bill
    from memdoc.core.reports.json_parts import gpu_json, model_json
    from memdoc.resolve.models import load_config

    setup = plan.resolve(target, need_gpu=False)
    if setup.plan.cp > 1 or setup.plan.tp > 1:
        raise PlanError(
            "diagnose traces one process and --cp/--tp split a step over several: use memdoc bill "
            "(docs/parallelism.md: its per-rank bill against torch TP and DeepSpeed Ulysses)"
        )
    if not json_out:
        print_setup_notes(setup, gpu_note=False)
    trace_step = _step_tracer(setup.plan, device)
    _, config, _ = load_config(setup.model.id if setup.model.source == "catalog" else target)
    from memdoc.probe.quiet import quiet_libraries

    if json_out:
        with quiet_libraries():
            measurement = trace_step(config, setup.plan)
    else:
        with render.progress_reporter(f"tracing {setup.model.id}") as progress, quiet_libraries():
            measurement = trace_step(config, setup.plan, progress=progress)
    the_bill = compute_bill(setup.model, setup.plan, setup.gpu)
    cuda = None
    if device == "cuda":
        from memdoc.probe.cuda_step import run_cuda_step

        with quiet_libraries():
            cuda = run_cuda_step(config, setup.plan)
    if json_out or page[0] is not None:
        data = measurement.to_json()
        data["billed"] = bill_json(the_bill)["per_gpu"]
        data["bill_peak_phase"] = the_bill.peak_phase
        data["bill"] = {"phases": {p: v for p, v in render.billed_phases(the_bill).items() if p in measurement.phases}}
        data["model"] = model_json(setup.model, the_bill.states.trainable_params)
        data["gpu"] = gpu_json(setup.gpu, setup.plan.world_size)
        data["plan"] = setup.plan.to_dict()
        if cuda is not None:
            data["cuda"] = cuda
        write_html(page[0], data, title=f"memdoc diagnose: {setup.model.id}", force=page[1])
    if json_out:
        render.print_json(data)
    else:
        render.render_traced(measurement, the_bill, cuda)


def _step_tracer(plan, device: str):
    """The tracer of the plan's step: the supervised one (`probe/tracer.py`), or the post-training one
    (`probe/posttrain.py`, for --task dpo|grpo|rloo: generation and reference phases); refuses what neither traces."""
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


class ScriptRun:
    """`memdoc diagnose SCRIPT`: run the script, then report (also from the watchdog when it ignores --timeout)."""

    def __init__(
        self, target: str, *, json_out: bool, snapshot: Optional[str], summary: bool, force: bool, html=None
    ) -> None:
        self.target, self.json_out, self.snapshot, self.summary = target, json_out, snapshot, summary
        self.force, self.html = force, html
        """--force (the snapshot's and the page's files), --html FILE or None."""

    def start(self, args: list[str], *, plan: PlanFlags, steps: int, timeout: float) -> None:
        from memdoc import render
        from memdoc.output.snapshot import check_snapshot
        from memdoc.probe.script import run_script

        if self.snapshot is not None:  # before the script runs: never after a long run
            check_snapshot(self.snapshot, force=self.force)
        if plan.any_given:
            render.note("note: plan flags are ignored for scripts: the plan is detected from what the script runs")
        result = run_script(
            self.target,
            args,
            steps=steps,
            timeout=timeout or None,
            stdout_to_stderr=self.json_out,
            want_snapshot=self.snapshot is not None,
            on_stuck=self.on_stuck,
        )
        self.report(result)
        if result.exit_code:
            raise typer.Exit(result.exit_code)

    def report(self, result) -> None:
        import sys

        from memdoc import render

        sys.stdout.flush()
        if result.oom:
            _read_oom(result.oom, result.traceback, result.steps)
        if result.traceback:
            sys.stderr.write(result.traceback)
            sys.stderr.flush()
        bill = _bill_for(result, render) if result.hf else None
        written = _write_snapshot(result, self.snapshot, force=self.force) if self.snapshot is not None else []
        if self.html is not None:
            data = self.data(result, bill, written) | {"timeline": script_timeline(result)}
            write_html(self.html, data, title=f"memdoc diagnose {result.script}", force=self.force)
            written.append(str(self.html))
        if not self.json_out:
            return render.render_script_report(result, bill, summary=self.summary, written=written)
        render.print_json(self.data(result, bill, written))

    @staticmethod
    def data(result, bill, written: list[str]) -> dict:
        """The script's report as JSON: the run, the bill of a detected HF model, the files written."""
        data = result.to_json()
        if bill is not None:
            from memdoc.core.billing.bill import bill_json

            data["hf"] = {
                "model_id": result.hf["model_id"],
                "detected_plan": result.hf["detected"],
                "billed": bill_json(bill)["per_gpu"],
                "bill_peak_phase": bill.peak_phase,
            }
        if result.post is not None:
            from memdoc.probe.script.trl_phases import with_bill

            data["post_training"] = with_bill(result.post, bill)
        data["written"] = written
        return data

    def on_stuck(self, result) -> None:
        """From the watchdog thread: report, then end the process."""
        import contextlib
        import sys

        from memdoc.probe.script.guard import end_process

        try:
            if result is None:
                print("Error: the script ignored --timeout and memdoc could not build its report", file=sys.stderr)
            else:  # the script still runs, its stdout redirected (--json): the report goes to the real stdout
                with contextlib.redirect_stdout(sys.__stdout__):
                    self.report(result)
        finally:
            end_process(result.exit_code if result is not None else 1)


def _read_oom(oom: dict, traceback_text: str | None, steps: int) -> None:
    """Add the doctor's diagnosis of the OOM (`memdoc.core.doctor.diagnosis.diagnose_oom`, the pipeline
    `memdoc prescribe --log` runs) to the report: its kind, symptom, causes and prescriptions; an OOM
    before the first optimizer step (`steps` == 0) is the first step."""
    from memdoc.core.doctor.diagnosis import RunContext, diagnose_oom

    text = f"{traceback_text or ''}\n{oom.get('message') or ''}"
    d = diagnose_oom(text, run=RunContext(step=oom.get("step"), first_step=steps == 0))
    data = d.to_json()
    oom["symptom"] = d.symptom.id
    oom["kind"] = d.kind
    oom["traceback_phase"] = d.phase
    oom["causes"] = data["causes"]
    oom["prescriptions"] = data["prescriptions"]
    oom["set_apart"] = data["set_apart"]
    oom["prescribe"] = f"memdoc prescribe --symptom {d.symptom.id}"


def _bill_for(result, render):
    """The bill of the detected plan for the script's HF model (None when the config is not billable)."""
    from memdoc.core.billing.bill import compute_bill
    from memdoc.core.model.model_spec import spec_from_config
    from memdoc.errors import MemdocError

    try:
        spec = spec_from_config(result.hf["config"], model_id=result.hf["model_id"], source="local")
        return compute_bill(spec, result.hf["plan"], None)
    except (MemdocError, Exception) as exc:  # an architecture the bill does not know: report without it
        render.note(f"note: no bill for {result.hf['model_id']}: {exc}")
        return None


def _write_snapshot(result, raw: str, *, force: bool) -> list[str]:
    """Write --snapshot FILE's pickle (a CUDA script only) and HTML timeline, all or none
    (`memdoc.output.snapshot.write_snapshot`), the timeline coloured by line item (`html_page.script_timeline`);
    the page names the pickle only when one is written."""
    import pickle

    from memdoc.output.snapshot import snapshot_paths, write_snapshot
    from memdoc.render.timeline import timeline_html

    timeline = script_timeline(result)
    pickled = pickle.dumps(result.snapshot) if result.snapshot is not None else None
    html_text = timeline_html(
        timeline["points"],
        title=f"memdoc diagnose {result.script}: allocated memory",
        notes=[f"Source: {timeline['source']}.", f"Peak phase: {result.peak_phase}."],
        marks=timeline["marks"],
        pickle_name=snapshot_paths(raw)[0].name if pickled is not None else None,
    )
    return write_snapshot(raw, pickled, html_text, force=force)
