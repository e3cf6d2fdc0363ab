"""The options commands share, as named `Annotated` aliases; the plan flags are declared once in
`plan_flags.py`.

`plan_options` adds the plan flags (`PLAN_OPTIONS`, in the "Training plan" help panel) to a
command's signature and hands the command one `PlanFlags`; `PlanFlags.resolve` builds the
validated `Setup` (`memdoc.resolve.setup.resolve_setup`).

The plan's numbers (--batch, --seq, --lora-rank, …) have no `min=`: `TrainingPlan` validates them,
for flags and recipe values alike, with one message per field ("--batch must be a positive integer").
"""

import functools
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Optional

import typer

from memdoc.commands.plan_flags import PLAN_OPTIONS
from memdoc.core.billing.inference import KvCache, Weights
from memdoc.core.model.plan_checks import inapplicable_flags
from memdoc.core.model.ranges import MAX_HOST_RAM_GIB, MAX_SEQ
from memdoc.resolve.setup import Setup, resolve_setup, resolve_setups

HostRamOpt = Annotated[
    Optional[float],
    typer.Option(
        "--host-ram",
        metavar="GiB",
        min=0,
        max=MAX_HOST_RAM_GIB,
        help="Host RAM per node that offloaded states may use. [default: this machine's RAM when NVML sees a GPU "
        "here; else not judged]",
    ),
]
"""Host RAM per node (`bill`, `plan`): offloaded states are checked against it."""

DATA = "Dataset lengths"

DatasetOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--dataset",
        help="JSONL/JSON/Parquet/CSV training data: tokenize it and fit its lengths to the plan.",
        rich_help_panel=DATA,
    ),
]
TokenizerOpt = Annotated[
    Optional[str],
    typer.Option(
        "--tokenizer", help="Tokenizer directory or HF id for --dataset. [default: MODEL]", rich_help_panel=DATA
    ),
]
TextFieldOpt = Annotated[
    Optional[str],
    typer.Option(
        "--text-field",
        help="The dataset field with the text or chat messages. "
        "[default: messages, text, prompt+completion, … whichever exists]",
        rich_help_panel=DATA,
    ),
]
INFERENCE = "Inference (with --inference, or prescribe --symptom inference-oom)"

ModelArg = Annotated[
    Optional[str],
    typer.Argument(metavar="MODEL", help="HF model id, model directory or config.json (optional with --recipe)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON (bytes) instead of tables.")]
ForceOpt = Annotated[bool, typer.Option("--force", help="Replace existing files (all or none; mode from your umask).")]
"""Files memdoc writes (`emit -o`, `diagnose --snapshot`, `--html`) never replace existing ones without it
(`memdoc.output.files.write_all`)."""
HtmlOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--html",
        metavar="FILE",
        help="Also write the report as one self-contained HTML page (charts, no network) to FILE.",
        show_default=False,
    ),
]

# ------------------------------------------------------------------------------------- inference
KvCacheOpt = Annotated[
    KvCache,
    typer.Option(
        "--kv-cache",
        help="KV-cache storage: auto = the compute dtype; fp8 = vLLM/SGLang kv_cache_dtype fp8; "
        "int4 = transformers' quantized cache.",
        rich_help_panel=INFERENCE,
    ),
]
PrefillChunkOpt = Annotated[
    Optional[int],
    typer.Option(
        "--prefill-chunk",
        min=1,
        max=MAX_SEQ,
        help="Prefill the prompt N tokens at a time (generate's prefill_chunk_size). \\[default: all at once]",
        rich_help_panel=INFERENCE,
    ),
]
WeightsOpt = Annotated[
    Weights,
    typer.Option(
        "--weights",
        help="Weights for inference: auto = the compute dtype (NF4 for QLoRA plans); "
        "int8 / nf4 = bitsandbytes load_in_8bit / load_in_4bit.",
        rich_help_panel=INFERENCE,
    ),
]

"""Parameter name -> option, in --help order: the flags of every command that takes a plan."""


@dataclass(frozen=True)
class PlanFlags:
    """The plan flags of one invocation, as given (None: not given)."""

    values: dict

    def given(self, name: str) -> bool:
        return self.values.get(name) not in (None, False, [])

    @property
    def any_given(self) -> bool:
        return any(self.given(name) for name in self.values)

    def resolve(self, model: str | None, *, need_gpu: bool = True) -> Setup:
        """The setup these flags describe for MODEL (see `resolve_setup`)."""
        return resolve_setup(model, need_gpu=need_gpu, **self.values)

    def resolve_per_gpu(self, model: str | None, cards: list[str | None]) -> list[Setup]:
        """One setup per --gpu of `cards` (plan's repeated --gpu), the config files read once (`resolve_setups`)."""
        return resolve_setups(model, cards=cards, **{k: v for k, v in self.values.items() if k != "gpu"})


def print_setup_notes(setup: Setup, *, gpu_note: bool = True, searched: frozenset[str] = frozenset()) -> None:
    """On stderr: how a loose --gpu (unless not `gpu_note`) and a mirrored MODEL were taken, the flags that do
    not apply to the plan (`plan_checks.inapplicable_flags`; `searched`: the fields `memdoc plan` may still
    change), what the config files said (the files read, the stack, every key not billed). Every command that
    takes a plan prints these in its human output."""
    from memdoc import render

    ignored = inapplicable_flags(setup.plan, setup.explicit, searched)
    for text in (setup.gpu_note if gpu_note else None, setup.model_note, *ignored):
        if text:
            render.note(f"note: {text}")
    render.render_config_notes(setup.config, setup.stack)


def plan_options(command):
    """Decorator: add `PLAN_OPTIONS` to `command`'s CLI signature and pass them as `plan: PlanFlags`."""
    signature = inspect.signature(command)
    own = [p for name, p in signature.parameters.items() if name != "plan"]
    extra = [
        inspect.Parameter(
            name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=False if name == "allow_long" else None
        )
        for name, annotation in PLAN_OPTIONS.items()
    ]

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        values = {name: kwargs.pop(name) for name in PLAN_OPTIONS}
        return command(*args, plan=PlanFlags(values), **kwargs)

    positional = [p for p in own if p.kind is not inspect.Parameter.KEYWORD_ONLY]
    keyword = [p for p in own if p.kind is inspect.Parameter.KEYWORD_ONLY]
    wrapper.__signature__ = signature.replace(parameters=positional + keyword + extra)
    return wrapper
