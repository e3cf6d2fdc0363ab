"""`memdoc prescribe`: a symptom (or an OOM log) → causes and prescriptions, cheapest first."""

from typing import Annotated, Optional

import typer

from memdoc.commands.html_page import check_html, write_html
from memdoc.commands.options import (
    DatasetOpt,
    ForceOpt,
    HtmlOpt,
    JsonOpt,
    KvCacheOpt,
    PlanFlags,
    PrefillChunkOpt,
    TextFieldOpt,
    TokenizerOpt,
    WeightsOpt,
    plan_options,
    print_setup_notes,
)
from memdoc.core.billing.inference import KvCache, Weights

EXAMPLES = """
Examples:

  memdoc prescribe --list

  memdoc prescribe --symptom mid-run-oom

  memdoc prescribe --symptom startup-oom meta-llama/Llama-3.1-8B --gpu 24 --method full

  memdoc prescribe --log train.log          (or --log - to read stdin)

  memdoc prescribe --log oom.txt meta-llama/Llama-3.1-8B --method lora --seq 4096

  memdoc prescribe --symptom long-sample-oom Qwen/Qwen2.5-7B --method lora --dataset train.jsonl

  memdoc prescribe --symptom inference-oom meta-llama/Llama-3.1-8B --gpu 24 --batch 8 --seq 16384
"""


SymptomOpt = Annotated[Optional[str], typer.Option("--symptom", help="Symptom id (see --list).")]
LogOpt = Annotated[Optional[str], typer.Option("--log", help="Training log with an OOM traceback; '-' reads stdin.")]
ListOpt = Annotated[bool, typer.Option("--list", help="List the symptoms.")]


@plan_options
def prescribe(
    model: Annotated[
        Optional[str], typer.Argument(metavar="MODEL", help="Optional model: quantify each prescription with the bill.")
    ] = None,
    *,
    plan: PlanFlags,
    symptom: SymptomOpt = None,
    log: LogOpt = None,
    list_all: ListOpt = False,
    json_out: JsonOpt = False,
    html: HtmlOpt = None,
    force: ForceOpt = False,
    kv_cache: KvCacheOpt = KvCache.AUTO,
    weights: WeightsOpt = Weights.AUTO,
    prefill_chunk: PrefillChunkOpt = None,
    dataset: DatasetOpt = None,
    tokenizer: TokenizerOpt = None,
    text_field: TextFieldOpt = None,
) -> None:
    """Map a symptom, or the OOM message in a training log, to its causes and prescriptions.

    With --log, the figures of the OOM are read first: a memory-fraction cap, other processes,
    fragmentation, non-PyTorch memory each come as a cause with its evidence, before the
    symptom's ladder. A log without a traceback is still diagnosed (the assumption is printed);
    --symptom overrides the guess. Each cause's own fixes come first; the plan's ladder follows only
    when the plan needs less memory, cheapest first by its time column; rows the log shows already
    done, or already in the plan, are set apart. Given a model and plan, "Tried to allocate X" is
    matched to the plan's tensor of that size (oom.culprit; its prescriptions first among equal
    costs), and each prescription is quantified with the bill (the card from the log when --gpu is
    absent); for inference-oom, with the inference bill (--batch sequences of --seq tokens).
    """
    from memdoc import render
    from memdoc.core.reports.prescribe import prescribe as prescribe_for
    from memdoc.core.reports.prescribe import read_symptom
    from memdoc.errors import PlanError
    from memdoc.resolve.logs import read_log

    check_html(html, force)
    if list_all:
        return _list_symptoms(json_out)
    if symptom is None and log is None:
        raise PlanError("give --symptom NAME or --log FILE (or --list)")
    reading = read_symptom(symptom, None if log is None else read_log(log))
    setup = (
        plan.resolve(model, need_gpu=False)
        if model is not None or plan.given("recipe") or plan.given("config")
        else None
    )
    if setup is not None and not json_out:
        print_setup_notes(setup)
    on_plan = (setup.model, setup.plan, setup.gpu) if setup is not None else ()
    max_length = _p99_length(dataset, tokenizer, text_field, setup)
    result = prescribe_for(
        reading, *on_plan, kv_cache=kv_cache, weights=weights, prefill_chunk=prefill_chunk, max_length=max_length
    )
    write_html(html, result.to_json(), title="memdoc prescribe: OOM diagnosis", force=force)
    if json_out:
        render.print_json(result.to_json())
    else:
        render.render_prescriptions(result.diagnosis)


def _p99_length(dataset, tokenizer: str | None, text_field: str | None, setup) -> int | None:
    """The dataset's p99 token length (`remedies.dataset_fit.length_stats`), the value of a length cap."""
    from memdoc.errors import PlanError

    if dataset is None:
        if tokenizer or text_field:
            raise PlanError("--tokenizer and --text-field go with --dataset FILE")
        return None
    if setup is None:
        raise PlanError("--dataset needs a MODEL (its tokenizer counts the tokens; or pass --tokenizer with a MODEL)")
    from memdoc.core.remedies.dataset_fit import length_stats
    from memdoc.resolve.dataset import count_tokens

    return length_stats(count_tokens(dataset, tokenizer or setup.model.id, text_field).counts).p99_tokens or None


def _list_symptoms(json_out: bool) -> None:
    from memdoc import render
    from memdoc.core.doctor.symptoms import list_symptoms

    symptoms = list_symptoms()
    if json_out:
        render.print_json([{"id": s.id, "title": s.title} for s in symptoms])
    else:
        render.table("Symptoms", [("id", "left"), ("what you see", "left")], [[s.id, s.title] for s in symptoms])
