"""`memdoc diagnose`: measure a training step — a dry run of a model, or the user's own script
(`diagnose_script.py`); the reports are built in `memdoc.core.reports.diagnose`."""

from memdoc.commands.command_options import (
    MAX_TIMEOUT_S,
    Device,
    DeviceOpt,
    ScriptArgs,
    SnapshotOpt,
    StepsOpt,
    SummaryOpt,
    TargetArg,
    TimeoutOpt,
    TraceInferenceOpt,
)
from memdoc.commands.html_page import check_html, write_html
from memdoc.commands.options import (
    ForceOpt,
    HtmlOpt,
    JsonOpt,
    PlanFlags,
    PrefillChunkOpt,
    plan_options,
    print_setup_notes,
)
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
    inference: TraceInferenceOpt = False,
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
    from memdoc.commands.diagnose_script import ScriptRun
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


def _config(setup, target: str) -> dict:
    """The HF config the dry run builds the model from: the catalog's for a catalog model, else TARGET's."""
    from memdoc.resolve.models import load_config

    return load_config(setup.model.id if setup.model.source == "catalog" else target)[1]


def _diagnose_inference(target: str, *, plan: PlanFlags, json_out: bool, prefill_chunk: int | None) -> None:
    """Trace a prefill of the real model on fake tensors and print it next to the inference bill."""
    from memdoc import render
    from memdoc.core.billing.inference import InferencePlan
    from memdoc.probe.dry_run import dry_run_prefill
    from memdoc.render.inference import render_inference_trace

    setup = plan.resolve(target, need_gpu=False)
    if not json_out:
        print_setup_notes(setup, gpu_note=False)
    inference = InferencePlan(plan=setup.plan, prefill_chunk=prefill_chunk)
    reporter = None if json_out else render.progress_reporter
    report = dry_run_prefill(_config(setup, target), setup.model, inference, setup.gpu, reporter=reporter)
    if json_out:
        render.print_json(report.to_json())
    else:
        render_inference_trace(report.traced, report.bill)


def _diagnose_model(target: str, *, plan: PlanFlags, json_out: bool, device: str, page: tuple) -> None:
    """Trace one training step of MODEL on fake tensors (and on the GPU with --device cuda) and report it
    next to the bill; `page` is (--html FILE or None, --force)."""
    from memdoc import render
    from memdoc.probe.dry_run import check_one_process, dry_run_step, step_tracer

    setup = plan.resolve(target, need_gpu=False)
    check_one_process(setup.plan)
    if not json_out:
        print_setup_notes(setup, gpu_note=False)
    tracer = step_tracer(setup.plan, device)
    reporter = None if json_out else render.progress_reporter
    config = _config(setup, target)
    report = dry_run_step(tracer, config, setup.model, setup.plan, setup.gpu, device=device, reporter=reporter)
    if page[0] is not None:
        write_html(page[0], report.to_json(), title=f"memdoc diagnose: {setup.model.id}", force=page[1])
    if json_out:
        render.print_json(report.to_json())
    else:
        render.render_traced(report.measurement, report.bill, report.cuda)
