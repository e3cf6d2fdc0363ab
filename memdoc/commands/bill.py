"""`memdoc bill`: the itemised per-GPU memory bill, the verdict, and the cost-increasing ladder."""

from pathlib import Path
from typing import Annotated, Optional

import typer

from memdoc.commands.app import command
from memdoc.commands.options import JsonOpt, KvCacheOpt, PlanArgs, PrefillChunkOpt, WeightsOpt, plan_options

DATA = "Dataset lengths"

EXAMPLES = """
Examples:

  memdoc bill meta-llama/Llama-2-7b --gpu 24

  memdoc bill meta-llama/Llama-3.1-8B --gpu rtx-4090 --method lora --checkpointing full --batch 4

  memdoc bill Qwen/Qwen2.5-14B --gpu 24 --method qlora --max seq

  memdoc bill meta-llama/Llama-3.1-70B --gpu h100-sxm --gpus 8 --shard fsdp --json

  memdoc bill Qwen/Qwen2.5-7B --gpu 24 --method lora --seq 4096 --dataset train.jsonl --tokenizer ./qwen-tokenizer

  memdoc bill --recipe recipes/llama2-7b-lora-24gb.yaml --check

  memdoc bill meta-llama/Llama-3.1-8B --gpu 24 --inference --batch 8 --seq 8192 --kv-cache fp8

Exit status: 0 computed (fits or not), 2 bad input, 3 with --check when the plan does not fit.
"""


@command("bill", epilog=EXAMPLES)
@plan_options
def bill(
    model: Annotated[
        Optional[str],
        typer.Argument(metavar="MODEL", help="HF model id, model directory or config.json (optional with --recipe)."),
    ] = None,
    *,
    plan: PlanArgs,
    json_out: JsonOpt = False,
    check: Annotated[bool, typer.Option("--check", help="Exit 3 when the plan does not fit the GPU.")] = False,
    no_ladder: Annotated[
        bool, typer.Option("--no-ladder", help="Do not search the ladder when it does not fit.")
    ] = False,
    max_of: Annotated[Optional[str], typer.Option("--max", help="Find the largest 'batch' or 'seq' that fits.")] = None,
    inference: Annotated[
        bool,
        typer.Option(
            "--inference",
            help="Bill inference instead (batch = sequences at once, seq = their context): weights + KV cache + the prefill's peak, its own ladder, and what vLLM would make of the card.",
        ),
    ] = False,
    kv_cache: KvCacheOpt = "auto",
    weights: WeightsOpt = "auto",
    prefill_chunk: PrefillChunkOpt = None,
    dataset: Annotated[
        Optional[Path],
        typer.Option(
            "--dataset",
            help="JSONL/JSON/Parquet/CSV training data: tokenize it and fit its lengths to the plan.",
            rich_help_panel=DATA,
        ),
    ] = None,
    tokenizer: Annotated[
        Optional[str],
        typer.Option(
            "--tokenizer", help="Tokenizer directory or HF id for --dataset. [default: MODEL]", rich_help_panel=DATA
        ),
    ] = None,
    text_field: Annotated[
        Optional[str],
        typer.Option(
            "--text-field",
            help="The dataset field with the text or chat messages. [default: messages, text, prompt+completion, … whichever exists]",
            rich_help_panel=DATA,
        ),
    ] = None,
) -> None:
    """Itemise the per-GPU memory of one training step and say whether it fits.

    Weights, gradients, optimizer states, activations (with the fp32 logits of the loss) and
    temporaries, at the peak of forward, backward and the optimizer step; then peak allocated
    (≈ torch.cuda.max_memory_allocated), reserved, and the process total nvidia-smi would show.
    When it does not fit, the ladder applies the cheapest remedies first until it does.
    """
    from memdoc import render
    from memdoc.core.billing.bill import bill_json, compute_bill
    from memdoc.core.billing.steptime import step_time
    from memdoc.core.remedies.climb import climb
    from memdoc.core.remedies.maximum import max_fitting
    from memdoc.errors import PlanError

    if dataset is None and (tokenizer or text_field):
        raise PlanError("--tokenizer and --text-field go with --dataset FILE")
    if dataset is not None and inference:
        raise PlanError("--dataset fits training samples; it does not apply to --inference")
    setup = plan.resolve(model)
    data_section = None
    if dataset is not None:
        from memdoc.commands.bill_dataset import dataset_section

        data_section = dataset_section(
            dataset,
            tokenizer or model or setup.model.id,
            text_field,
            setup,
            seq_cap=setup.plan.seq_len if plan.values.get("seq") else None,
            quiet=json_out,
        )
    if setup.gpu_note and not json_out:
        render.note(f"note: {setup.gpu_note}")
    if max_of is not None and max_of not in ("batch", "seq"):
        raise PlanError(f"--max {max_of!r} must be 'batch' or 'seq'")
    if inference:
        _bill_inference(
            setup, kv_cache, weights, prefill_chunk, max_of=max_of, json_out=json_out, check=check, no_ladder=no_ladder
        )
        return
    if kv_cache != "auto" or weights != "auto" or prefill_chunk is not None:
        raise PlanError("--kv-cache, --weights and --prefill-chunk describe inference: add --inference")
    the_bill = compute_bill(setup.model, setup.plan, setup.gpu)
    time = step_time(setup.model, setup.plan, setup.gpu)
    ladder = [] if (no_ladder or the_bill.fits) else climb(setup.model, setup.plan, setup.gpu)
    maximum = None
    if max_of is not None:
        maximum = max_fitting(setup.model, setup.plan, setup.gpu, max_of)
    if json_out:
        data = bill_json(the_bill)
        data["time"] = time.to_json(setup.plan.world_size)
        data["ladder"] = [step.to_json() for step in ladder]
        if max_of is not None:
            data["max"] = {"knob": max_of, "value": maximum}
        if data_section is not None:
            data["dataset"] = data_section
        render.print_json(data)
    else:
        render.render_bill(the_bill, ladder, command_line=None, time=time)
        if max_of is not None:
            render.render_max(max_of, maximum, the_bill)
        if data_section is not None:
            render.render_dataset(data_section)
    if check and the_bill.fits is False:
        raise typer.Exit(3)


def _bill_inference(
    setup, kv_cache, weights, prefill_chunk, *, max_of, json_out: bool, check: bool, no_ladder: bool
) -> None:
    """`bill --inference`: the inference bill, its ladder, --max, and vLLM's budget on the card."""
    from memdoc import render
    from memdoc.core.billing.inference import InferencePlan, KvCache, Weights, inference_bill
    from memdoc.core.remedies.inference import climb_inference, max_inference, vllm_fit
    from memdoc.render.inference import render_inference

    plan = InferencePlan(
        plan=setup.plan, kv_cache=KvCache(kv_cache), weights=Weights(weights), prefill_chunk=prefill_chunk
    )
    result = inference_bill(setup.model, plan, setup.gpu)
    gpu = setup.gpu
    ladder = [] if (no_ladder or gpu is None) else climb_inference(setup.model, plan, gpu)
    maximum = None if max_of is None or gpu is None else max_inference(setup.model, plan, gpu, max_of)
    vllm = None if gpu is None else vllm_fit(setup.model, plan, gpu)
    if json_out:
        data = result.to_json()
        data["ladder"] = [step.to_json() for step in ladder]
        data["vllm"] = None if vllm is None else vllm.to_json()
        if max_of is not None:
            data["max"] = {"knob": max_of, "value": maximum}
        render.print_json(data)
    else:
        render_inference(result, ladder, vllm)
        if max_of is not None:
            render.render_max(max_of, maximum, result, inference=True)
    if check and result.fits is False:
        raise typer.Exit(3)
