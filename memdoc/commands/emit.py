"""`memdoc emit`: write the plan as a config the trainer runs as is (TRL, HF, Axolotl, LLaMA-Factory)."""

import sys
from enum import Enum
from typing import Annotated, Optional

import typer

from memdoc.commands.options import ForceOpt, JsonOpt, ModelArg, PlanFlags, plan_options, print_setup_notes
from memdoc.core.trainers.registry import FORMATS

EXAMPLES = """
Examples:

  memdoc emit --recipe recipes/llama2-7b-lora-24gb.yaml --format trl -o sft.yaml

  memdoc emit meta-llama/Llama-3.1-8B --gpu 24 --fit --format axolotl -o axolotl.yaml

  memdoc emit Qwen/Qwen2.5-14B --gpu rtx-4090 --method qlora --checkpointing full --format llamafactory

  memdoc emit --recipe recipes/llama3.1-8b-full-zero3-8x80gb.yaml --format hf -o run/args.yaml --dataset my/data

Multi-GPU plans also write ds_config.json (ZeRO) or fsdp.yaml (FSDP) next to -o FILE.
All files are written or none, with the mode your umask gives; existing ones only with --force.
Without -o the config is printed on stdout. The config loads MODEL as given.
Exit status: 0 written, 2 bad input (or an existing file without --force), 3 with --fit when nothing fits.
"""


Format = Enum("Format", {fmt: fmt for fmt in FORMATS}, type=str)
"""The --format choices (from `memdoc.core.trainers.FORMATS`)."""


FormatOpt = Annotated[Format, typer.Option("--format", "-f", help="Target trainer config.")]
OutputOpt = Annotated[
    Optional[str],
    typer.Option(
        "--output",
        "-o",
        metavar="PATH",
        help="Write the config here (side files go next to it); a directory (or PATH/) gets the default name "
        "inside it. Default: print it.",
    ),
]
FitOpt = Annotated[
    bool,
    typer.Option(
        "--fit",
        help="If the plan is not a comfortable fit for the GPU, emit the ladder's plan that is (keeping the "
        "values you set while it can).",
    ),
]
DatasetOpt = Annotated[
    Optional[str],
    typer.Option("--dataset", help="Dataset (Hub id, path or LLaMA-Factory name) instead of the placeholder."),
]
OutputDirOpt = Annotated[
    Optional[str], typer.Option("--output-dir", help="Training output directory instead of the placeholder.")
]


def _note(text: str) -> None:
    print(text, file=sys.stderr)


@plan_options
def emit(
    model: ModelArg = None,
    *,
    plan: PlanFlags,
    fmt: FormatOpt = Format("trl"),
    output: OutputOpt = None,
    fit: FitOpt = False,
    force: ForceOpt = False,
    dataset: DatasetOpt = None,
    output_dir: OutputDirOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Write the training plan as a config your trainer runs as is.

    TRL YAML (`trl sft|dpo|kto|reward|grpo|rloo --config`, by --task), HF TrainingArguments YAML, Axolotl YAML or
    LLaMA-Factory YAML, mapping the task, precision, LoRA/QLoRA, optimizer, batch, accumulation, sequence length,
    checkpointing, attention, sharding and offload; knobs a format cannot express are listed as
    comments at the top and on stderr. ZeRO plans also get a DeepSpeed JSON, FSDP plans an
    accelerate config. Every file starts with the memdoc command and the billed peak per GPU.
    """
    from memdoc.output.emit import emit_files

    setup = plan.resolve(model, need_gpu=fit)
    result = emit_files(setup, fmt.value, output=output, force=force, fit=fit, dataset=dataset, output_dir=output_dir)
    if result is None:
        _note(f"Error: no plan on the ladder fits {setup.gpu.name}; nothing emitted")
        raise typer.Exit(3)
    if json_out:
        from memdoc import render

        render.print_json(result.to_json())
        return
    print_setup_notes(setup)
    print_emitted(result, gpu_note=None)


def print_emitted(result, *, gpu_note: str | None) -> None:
    """Notes and warnings on stderr; the config on stdout when not written, else the files written."""
    if gpu_note:
        _note(f"note: {gpu_note}")
    if result.fit_message:
        _note(result.fit_message)
    for text in result.notes:
        _note(f"note: {text}")
    if result.bill.comfortable is False:
        kind = "does not fit" if result.bill.fits is False else "is a close call on"
        _note(f"warning: this plan {kind} {result.gpu.name} per the bill; use --fit for a comfortable one")
    if not result.written:
        sys.stdout.write(result.files[0][1])
        for path, _ in result.files[1:]:
            _note(f"note: this plan also needs {path}; pass -o FILE to write it next to the config")
        _note(f"Launch: {result.launch}")
        return
    for path, _ in result.files:
        print(f"Wrote {path}")
    print(f"Launch: {result.launch}")
