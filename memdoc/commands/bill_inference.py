"""`memdoc bill --inference`: the serving bill, its ladder, --max, and vLLM's start-up on the card."""

import typer

from memdoc.commands.html_page import write_html
from memdoc.commands.options import PlanFlags
from memdoc.core.billing.inference import KvCache, Weights


def check_inference_flags(inference: bool, serving, kv_cache, weights, prefill_chunk) -> None:
    """Refuse the serving flags, --kv-cache, --weights and --prefill-chunk without --inference."""
    from memdoc.errors import PlanError

    if not inference and (serving.any_given or serving.values.get("engine") is not None):
        raise PlanError("--engine and vLLM's serving flags describe inference: add --inference")
    if not inference and (kv_cache is not KvCache.AUTO or weights is not Weights.AUTO or prefill_chunk is not None):
        raise PlanError("--kv-cache, --weights and --prefill-chunk describe inference: add --inference")


def resolve_for(plan: PlanFlags, model: str | None, inference: bool):
    """The setup and vLLM's tensor-parallel size: with --inference, --tp is vLLM's `--tensor-parallel-size`
    (one rank of the served model), not a split of a training step."""
    if not inference:
        return plan.resolve(model), 1
    return PlanFlags({**plan.values, "tp": None}).resolve(model), plan.values.get("tp") or 1


def bill_inference(setup, options: tuple, *, json_out: bool, check: bool, page: tuple) -> None:
    """The inference bill of `setup` under `options` (--kv-cache, --weights, --prefill-chunk, --max, --no-ladder,
    and the engine asked for or None with vLLM's arguments), printed or as JSON, and --html `page`."""
    from memdoc import render
    from memdoc.core.billing.inference import InferencePlan
    from memdoc.core.reports.bill import inference_report
    from memdoc.render.inference import render_inference, render_vllm_startup

    kv_cache, weights, prefill_chunk, knob, no_ladder, (engine, vllm_args) = options
    plan = InferencePlan(plan=setup.plan, kv_cache=kv_cache, weights=weights, prefill_chunk=prefill_chunk)
    name = None if engine is None else engine.value
    report = inference_report(
        setup.model, plan, setup.gpu, ladder=not no_ladder, max_of=knob, engine=name, vllm=vllm_args
    )
    data = report.to_json() | setup.inputs_json()
    write_html(page[0], data, title=f"memdoc bill --inference: {setup.model.id}", force=page[1])
    if json_out:
        render.print_json(data)
    elif name == "vllm" and report.vllm is not None:
        render_vllm_startup(report.vllm)
    else:
        render_inference(report.bill, report.ladder, report.vllm)
        if report.maximum is not None:
            render.render_max(report.maximum, inference=True)
    if check and report.fits is False:
        raise typer.Exit(3)
