"""`memdoc bill`: the itemised per-GPU memory bill, the verdict, and the cost-increasing ladder."""

import dataclasses
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from memdoc.commands.html_page import check_html, write_html
from memdoc.commands.options import (
    DatasetOpt,
    ForceOpt,
    HostRamOpt,
    HtmlOpt,
    JsonOpt,
    KvCacheOpt,
    ModelArg,
    PlanFlags,
    PrefillChunkOpt,
    TextFieldOpt,
    TokenizerOpt,
    WeightsOpt,
    plan_options,
    print_setup_notes,
)
from memdoc.commands.serve_options import ServingFlags, serving_options
from memdoc.core.billing.inference import KvCache, Weights


class MaxKnob(str, Enum):
    """The knob `--max` searches."""

    BATCH = "batch"
    SEQ = "seq"


CheckOpt = Annotated[
    bool, typer.Option("--check", help="Exit 3 when the plan does not fit the GPU (a close call that fits exits 0).")
]
NoLadderOpt = Annotated[bool, typer.Option("--no-ladder", help="Do not search the ladder when it does not fit.")]
MaxOpt = Annotated[
    Optional[MaxKnob],
    typer.Option("--max", help="Find the largest 'batch' or 'seq' that fits comfortably, and that fits at all."),
]
InferenceOpt = Annotated[
    bool,
    typer.Option(
        "--inference",
        help="Bill inference instead (batch = sequences at once, seq = their context): weights + KV cache + the "
        "prefill's peak, its own ladder, and what vLLM would make of the card.",
    ),
]
EXAMPLES = """
Examples:

  memdoc bill meta-llama/Llama-2-7b --gpu 24

  memdoc bill meta-llama/Llama-3.1-8B --gpu rtx-4090 --method lora --checkpointing full --batch 4

  memdoc bill Qwen/Qwen2.5-14B --gpu 24 --method qlora --max seq

  memdoc bill meta-llama/Llama-3.1-70B --gpu h100-sxm --gpus 8 --shard fsdp --json

  memdoc bill Qwen/Qwen2.5-7B --gpu 24 --method lora --seq 4096 --dataset train.jsonl --tokenizer ./qwen-tokenizer

  memdoc bill --recipe recipes/llama2-7b-lora-24gb.yaml --check

  memdoc bill meta-llama/Llama-3.1-8B --gpu 24 --inference --batch 8 --seq 8192 --kv-cache fp8

  memdoc bill meta-llama/Llama-3.1-70B-Instruct --gpu h100-sxm --inference --tp 4 --max-model-len 32768

Exit status: 0 computed (fits or not), 2 bad input, 3 with --check when the plan does not fit.
"""


@plan_options
@serving_options
def bill(
    model: ModelArg = None,
    *,
    plan: PlanFlags,
    serving: ServingFlags,
    json_out: JsonOpt = False,
    html: HtmlOpt = None,
    force: ForceOpt = False,
    check: CheckOpt = False,
    no_ladder: NoLadderOpt = False,
    max_of: MaxOpt = None,
    inference: InferenceOpt = False,
    kv_cache: KvCacheOpt = KvCache.AUTO,
    weights: WeightsOpt = Weights.AUTO,
    prefill_chunk: PrefillChunkOpt = None,
    dataset: DatasetOpt = None,
    tokenizer: TokenizerOpt = None,
    text_field: TextFieldOpt = None,
    host_ram_gib: HostRamOpt = None,
) -> None:
    """Itemise the per-GPU memory of one training step and say whether it fits.

    Weights, gradients, optimizer states, activations (with the fp32 logits of the loss) and
    temporaries, at the peak of forward, backward and the optimizer step; then peak allocated
    (≈ torch.cuda.max_memory_allocated), reserved, and the process total nvidia-smi would show.
    When it does not fit, the ladder applies the cheapest remedies first until it does.
    """
    from memdoc import render
    from memdoc.core.reports.bill import bill_report
    from memdoc.resolve.host import host_ram

    _check_flags(dataset, tokenizer or text_field, inference, html, force, (serving, kv_cache, weights, prefill_chunk))
    setup, tp = _resolve(plan, model, inference)
    knob = max_of.value if max_of else None
    section = (
        None if dataset is None else _dataset_section(dataset, tokenizer or model, text_field, setup, plan, json_out)
    )
    setup = _packed_documents(setup, section)
    if not json_out:
        print_setup_notes(setup)
    if inference:
        engine = (serving.engine(tp), serving.vllm_args(tp))
        return _bill_inference(
            setup, kv_cache, weights, prefill_chunk, knob, json_out, check, no_ladder, (html, force), engine
        )
    report = bill_report(
        setup.model, setup.plan, setup.gpu, ladder=not no_ladder, max_of=knob, dataset=section, fixed=setup.explicit
    )
    write_html(html, report.to_json() | _setup_json(setup), title=f"memdoc bill: {setup.model.id}", force=force)
    if json_out:
        render.print_json(report.to_json() | _setup_json(setup))
    else:
        host = host_ram(host_ram_gib) if report.bill.host else None
        render.render_bill(report.bill, report.ladder, command_line=None, time=report.time, host=host, run=report.run)
        if report.maximum is not None:
            render.render_max(report.maximum)
        if section is not None:
            render.render_dataset(section)
    if check and report.fits is False:
        raise typer.Exit(3)


def _resolve(plan: PlanFlags, model: str | None, inference: bool):
    """The setup and vLLM's tensor-parallel size: with --inference, --tp is vLLM's `--tensor-parallel-size`
    (one rank of the served model), not a split of a training step."""
    if not inference:
        return plan.resolve(model), 1
    return PlanFlags({**plan.values, "tp": None}).resolve(model), plan.values.get("tp") or 1


def _packed_documents(setup, section: dict | None):
    """`--packing` with `--dataset` and no `--document-tokens`: the dataset's length-weighted mean document
    (`dataset_fit.packed_rows`) sets the packed rows' attention."""
    if section is None or not setup.plan.packing or setup.plan.document_tokens is not None:
        return setup
    documents = section["packed"]["document_tokens"]
    return dataclasses.replace(setup, plan=setup.plan.replace(document_tokens=documents)) if documents else setup


def _check_flags(dataset, tokenizer_given, inference: bool, html, force: bool, inference_flags: tuple) -> None:
    """Refuse flags that do not go together, before any work (and an existing --html FILE without --force);
    `inference_flags`: the serving flags, --kv-cache, --weights and --prefill-chunk."""
    from memdoc.errors import PlanError

    check_html(html, force)
    serving, kv_cache, weights, prefill_chunk = inference_flags
    if not inference and (serving.any_given or serving.values.get("engine") is not None):
        raise PlanError("--engine and vLLM's serving flags describe inference: add --inference")
    if not inference and (kv_cache is not KvCache.AUTO or weights is not Weights.AUTO or prefill_chunk is not None):
        raise PlanError("--kv-cache, --weights and --prefill-chunk describe inference: add --inference")
    if dataset is None and tokenizer_given:
        raise PlanError("--tokenizer and --text-field go with --dataset FILE")
    if dataset is not None and inference:
        raise PlanError("--dataset fits training samples; it does not apply to --inference")


def _setup_json(setup) -> dict:
    """What the config files said (`config`) and the stack whose defaults were used (`stack`), when given."""
    return ({"config": setup.config.to_json()} if setup.config else {}) | (
        {"stack": setup.stack.to_json()} if setup.stack else {}
    )


def _dataset_section(path: Path, tokenizer: str | None, text_field, setup, plan: PlanFlags, quiet: bool) -> dict:
    """Tokenize the dataset (a progress bar unless `quiet`) and fit its lengths to the plan: the JSON
    `dataset` object."""
    from memdoc import render
    from memdoc.resolve.dataset import dataset_section

    seq_cap = setup.plan.seq_len if plan.given("seq") else None
    tokenizer = tokenizer or setup.model.id
    if quiet:
        return dataset_section(path, tokenizer, text_field, setup.model, setup.plan, setup.gpu, seq_cap=seq_cap)
    with render.progress_reporter(f"tokenizing {path.name}") as progress:
        return dataset_section(
            path, tokenizer, text_field, setup.model, setup.plan, setup.gpu, seq_cap=seq_cap, progress=progress
        )


def _bill_inference(setup, kv_cache, weights, prefill_chunk, knob, json_out, check, no_ladder, page, engine):
    """`bill --inference`: the inference bill, its ladder, --max, and vLLM's start-up on the card (`engine`:
    the engine asked for, or None, and vLLM's arguments)."""
    from memdoc import render
    from memdoc.core.billing.inference import InferencePlan
    from memdoc.core.reports.bill import inference_report
    from memdoc.render.inference import render_inference, render_vllm_startup

    plan = InferencePlan(plan=setup.plan, kv_cache=kv_cache, weights=weights, prefill_chunk=prefill_chunk)
    name = None if engine[0] is None else engine[0].value
    report = inference_report(
        setup.model, plan, setup.gpu, ladder=not no_ladder, max_of=knob, engine=name, vllm=engine[1]
    )
    data = report.to_json() | _setup_json(setup)
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
