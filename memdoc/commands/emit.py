"""`memdoc emit`: write the plan as a config the trainer runs as is (TRL, HF, Axolotl, LLaMA-Factory)."""

import os
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from memdoc.commands.app import command
from memdoc.commands.options import JsonOpt, PlanArgs, plan_options
from memdoc.core.emit import FORMATS

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
"""The --format choices (from `memdoc.core.emit.FORMATS`)."""


def command_line(setup, fmt: str, *, output: Optional[str]) -> str:
    """The explicit memdoc command that reproduces this plan (non-default flags only)."""
    from memdoc.core.model.plan import TrainingPlan, flag_for

    parts = ["memdoc", "emit", setup.model.id]
    if setup.gpu is not None:
        parts += ["--gpu", setup.gpu.id]
    default = TrainingPlan().to_dict()
    for key, value in setup.plan.to_dict().items():
        if value == default.get(key) or (key == "lora_alpha" and value is None):
            continue
        if not setup.plan.is_peft and key.startswith("lora_"):
            continue
        flag = flag_for(key)
        if isinstance(value, bool):
            parts.append(flag)
        else:
            parts += [flag, ",".join(value) if isinstance(value, list) else str(value)]
    parts += ["--format", fmt]
    if output:
        parts += ["-o", output]
    return " ".join(parts)


def _note(text: str) -> None:
    print(text, file=sys.stderr)


@command("emit", epilog=EXAMPLES)
@plan_options
def emit(
    model: Annotated[
        Optional[str],
        typer.Argument(metavar="MODEL", help="HF model id, model directory or config.json (optional with --recipe)."),
    ] = None,
    *,
    plan: PlanArgs,
    fmt: Annotated[Format, typer.Option("--format", "-f", help="Target trainer config.")] = Format("trl"),
    output: Annotated[
        Optional[Path],
        typer.Option("--output", "-o", help="Write the config here (side files go next to it). Default: print it."),
    ] = None,
    fit: Annotated[
        bool, typer.Option("--fit", help="If the plan does not fit the GPU, emit the cheapest ladder plan that does.")
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Replace existing files (all or none; mode from your umask).")
    ] = False,
    dataset: Annotated[
        Optional[str],
        typer.Option("--dataset", help="Dataset (Hub id, path or LLaMA-Factory name) instead of the placeholder."),
    ] = None,
    output_dir: Annotated[
        Optional[str], typer.Option("--output-dir", help="Training output directory instead of the placeholder.")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Write the training plan as a config your trainer runs as is.

    TRL `trl sft --config` YAML, HF TrainingArguments YAML, Axolotl YAML or LLaMA-Factory YAML,
    mapping precision, LoRA/QLoRA, optimizer, batch, accumulation, sequence length,
    checkpointing, attention, sharding and offload; knobs a format cannot express are listed as
    comments at the top and on stderr. ZeRO plans also get a DeepSpeed JSON, FSDP plans an
    accelerate config. Every file starts with the memdoc command and the billed peak per GPU.
    """
    from memdoc.commands.files import write_all
    from memdoc.core.billing.bill import compute_bill
    from memdoc.core.emit import DEFAULT_FILENAMES, EmitContext, render_main, render_side
    from memdoc.core.emit import emit as emit_plan
    from memdoc.core.model.gpu import gpu_json
    from memdoc.errors import PlanError

    setup = plan.resolve(model, need_gpu=fit)
    the_bill = compute_bill(setup.model, setup.plan, setup.gpu)
    fit_message = None
    if fit and the_bill.fits is False:
        from dataclasses import replace

        from memdoc.core.remedies.climb import climb

        steps = climb(setup.model, setup.plan, setup.gpu)
        if not steps or not steps[-1].fits:
            _note(f"Error: no plan on the ladder fits {setup.gpu.name}; nothing emitted")
            raise typer.Exit(3)
        setup = replace(setup, plan=steps[-1].plan)
        the_bill = steps[-1].bill
        fit_message = "--fit: the plan did not fit; emitting the ladder plan after: " + ", ".join(
            s.rung.id for s in steps
        )
    fmt_value = fmt.value
    config_path = str(output) if output else DEFAULT_FILENAMES[fmt_value]
    side_dir = os.path.dirname(str(output)) if output else ""
    ctx = EmitContext(
        model_id=setup.model.id,
        plan=setup.plan,
        peak_allocated=the_bill.peak_allocated,
        process_total=the_bill.process_total,
        gpu_name=setup.gpu.name if setup.gpu else None,
        gpu_memory=setup.gpu.memory_bytes if setup.gpu else None,
        command=command_line(setup, fmt_value, output=str(output) if output else None),
        dataset=dataset,
        output_dir=output_dir,
        side_dir=side_dir,
        config_path=config_path,
        config_of=setup.model.config_of,
        asked_id=setup.model_arg if setup.model.source == "catalog" else None,
    )
    emitted = emit_plan(fmt_value, ctx)
    files = [(Path(config_path), render_main(ctx, emitted))]
    files += [(Path(ctx.side_path(side.name)), render_side(ctx, side)) for side in emitted.side_files]
    if output is not None:
        if output.is_dir():
            raise PlanError(
                f"-o {output} is a directory; give a file name such as {output / DEFAULT_FILENAMES[fmt_value]}"
            )
        write_all(files, force=force)
    if json_out:
        from memdoc import render

        render.print_json(
            {
                "format": fmt_value,
                "model": {
                    "id": setup.model.id,
                    "params": setup.model.params.total,
                    "trainable_params": the_bill.states.trainable_params,
                },
                "plan": setup.plan.to_dict(),
                "gpu": gpu_json(setup.gpu, setup.plan.world_size),
                "per_gpu": {
                    "peak_allocated": the_bill.peak_allocated,
                    "peak_reserved": the_bill.peak_reserved,
                    "process_total": the_bill.process_total,
                },
                "fits": the_bill.fits,
                "headroom_bytes": the_bill.headroom_bytes,
                "written": output is not None,
                "files": [{"path": str(path), "content": text} for path, text in files],
                "launch": emitted.launch,
                "notes": emitted.notes,
            }
        )
        return
    if setup.gpu_note:
        _note(f"note: {setup.gpu_note}")
    if fit_message:
        _note(fit_message)
    for text in emitted.notes:
        _note(f"note: {text}")
    if the_bill.fits is False:
        _note(f"warning: this plan does not fit {setup.gpu.name} per the bill; use --fit for one that does")
    if output is None:
        sys.stdout.write(files[0][1])
        for path, _ in files[1:]:
            _note(f"note: this plan also needs {path}; pass -o FILE to write it next to the config")
        _note(f"Launch: {emitted.launch}")
        return
    for path, _ in files:
        print(f"Wrote {path}")
    print(f"Launch: {emitted.launch}")
