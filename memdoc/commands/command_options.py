"""Each command's own options, as named `Annotated` aliases, a section per command (the options commands
share are in `options.py`, the plan flags in `plan_flags.py`): the command modules then hold only their
work — parse, call one library function, render (`tests/unit/test_structure.py` caps them at 150 lines).
"""

import inspect
from enum import Enum
from typing import Annotated, Optional

import typer

from memdoc.commands.plan_flags import PLAN
from memdoc.core.model.ranges import INT32_MAX, MAX_STEP_SEQUENCES, MAX_TOKENS
from memdoc.core.remedies.search import SEARCH_SPACE

# ------------------------------------------------------------------------------------- diagnose
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
TraceInferenceOpt = Annotated[
    bool,
    typer.Option(
        "--inference",
        help="Dry run: trace a generation prefill (--batch sequences of --seq tokens into the KV cache) instead "
        "of a training step.",
    ),
]

# ------------------------------------------------------------------------------------- bill


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

# ------------------------------------------------------------------------------------- plan
GlobalBatchOpt = Annotated[
    Optional[int],
    typer.Option(
        "--global-batch",
        max=MAX_STEP_SEQUENCES,
        help="Sequences per optimizer step over all GPUs. [default: batch × accum × GPUs]",
    ),
]
TopOpt = Annotated[int, typer.Option("--top", min=1, max=SEARCH_SPACE, help="How many plans to show.")]
OutputOpt = Annotated[
    Optional[str], typer.Option("--output", "-o", help="With --emit: write the config here. Default: print it.")
]
ForceOpt = Annotated[bool, typer.Option("--force", help="With --emit or --html: overwrite existing files.")]
GpuListOpt = Annotated[
    Optional[list[str]],
    typer.Option(
        "--gpu",
        help="GPU name (rtx-4090, a100-80, h100-sxm, …) or memory in GiB (24, 80); N×GPU (8xh100) also sets "
        "--gpus N. Repeat it to compare hardware: one row per card. \\[default: the local GPU]",
        rich_help_panel=PLAN,
    ),
]
TokensOpt = Annotated[
    Optional[float],
    typer.Option(
        "--tokens",
        min=1,
        max=MAX_TOKENS,
        help="Tokens to train (2e8): each hardware row gives their time, and their cost with --price. "
        "\\[default: 1e9 when comparing hardware]",
    ),
]
PriceOpt = Annotated[
    Optional[list[str]],
    typer.Option(
        "--price",
        metavar="NAME=USD",
        help="Price per GPU-hour of a --gpu (a100-80=1.20), repeatable; price every --gpu or none. "
        "No prices are built in.",
    ),
]


def repeatable_gpu(command):
    """plan's --gpu repeats (one hardware row each); the other commands take one (`options.GpuOpt`).
    `plan.values["gpu"]` is then a list: `PlanFlags.resolve_per_gpu` resolves one setup per card."""
    signature = inspect.signature(command)
    params = [p.replace(annotation=GpuListOpt) if p.name == "gpu" else p for p in signature.parameters.values()]
    command.__signature__ = signature.replace(parameters=params)
    return command
