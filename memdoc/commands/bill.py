"""`memdoc bill`: the itemised per-GPU memory bill, the verdict, and the cost-increasing ladder."""

from pathlib import Path

import typer

from memdoc.commands.bill_inference import bill_inference, check_inference_flags, resolve_for
from memdoc.commands.command_options import CheckOpt, InferenceOpt, MaxOpt, NoLadderOpt
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
    from memdoc.resolve.dataset import check_dataset_flags
    from memdoc.resolve.host import host_ram

    check_html(html, force)
    check_dataset_flags(dataset, tokenizer_given=bool(tokenizer or text_field), inference=inference)
    check_inference_flags(inference, serving, kv_cache, weights, prefill_chunk)
    setup, tp = resolve_for(plan, model, inference)
    knob = max_of.value if max_of else None
    setup, section = _with_dataset(dataset, tokenizer or model, text_field, setup, plan.given("seq"), json_out)
    if not json_out:
        print_setup_notes(setup)
    if inference:
        options = (kv_cache, weights, prefill_chunk, knob, no_ladder, (serving.engine(tp), serving.vllm_args(tp)))
        return bill_inference(setup, options, json_out=json_out, check=check, page=(html, force))
    host = host_ram(host_ram_gib)
    report = bill_report(
        *setup.job, ladder=not no_ladder, max_of=knob, dataset=section, fixed=setup.explicit, host=host
    )
    write_html(html, report.to_json() | setup.inputs_json(), title=f"memdoc bill: {setup.model.id}", force=force)
    if json_out:
        render.print_json(report.to_json() | setup.inputs_json())
    else:
        _render_training(report, host, section)
    if check and report.fits is False:
        raise typer.Exit(3)


def _render_training(report, host, section) -> None:
    """The bill, the host RAM (when offloaded), the whole run and its verdict, --max and the dataset section."""
    from memdoc import render

    shown = host if report.bill.host else None
    render.render_bill(report.bill, report.ladder, command_line=None, time=report.time, host=shown, run=report.run)
    render.render_run_verdict(report.verdict)
    if report.maximum is not None:
        render.render_max(report.maximum)
    if section is not None:
        render.render_dataset(section)


def _with_dataset(path: Path | None, tokenizer: str | None, text_field, setup, seq_given: bool, quiet: bool):
    """(the setup, the JSON `dataset` object) of --dataset FILE: tokenized (a progress bar unless `quiet`), its
    lengths fitted to the plan (the sequence length a cap when given) and its documents set on a packed plan
    (`with_dataset_documents`); (setup, None) without --dataset."""
    if path is None:
        return setup, None
    from memdoc import render
    from memdoc.resolve.dataset import dataset_section, with_dataset_documents

    model, train, gpu, cap = setup.model, setup.plan, setup.gpu, setup.plan.seq_len if seq_given else None
    with render.progress_reporter(f"tokenizing {path.name}", quiet=quiet) as progress:
        section = dataset_section(
            path, tokenizer or model.id, text_field, model, train, gpu, seq_cap=cap, progress=progress
        )
    return with_dataset_documents(setup, section), section
