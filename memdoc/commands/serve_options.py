"""The serving flags of `bill --inference` (vLLM's own names), declared once and handed over as one `ServingFlags`.

`serving_options` adds them to a command's signature, as `plan_options` does the plan flags; `--tp` stays the
plan flag (with --inference it is vLLM's `--tensor-parallel-size`).
"""

import functools
import inspect
from dataclasses import dataclass
from enum import Enum
from typing import Annotated, Optional

import typer

from memdoc.core.billing.vllm_startup import DEFAULT_UTILIZATION, LATEST_VLLM, VllmArgs

SERVING = "Serving (with --inference: vLLM's start-up)"


class Engine(str, Enum):
    """Which engine `bill --inference` bills."""

    VLLM = "vllm"
    """vLLM's start-up: its KV-cache budget, the log it prints, whether it starts."""
    HF = "hf"
    """transformers' `generate`: weights + DynamicCache + the prefill's peak, and its ladder."""


SERVING_OPTIONS = {
    "engine": Annotated[
        Optional[Engine],
        typer.Option(
            "--engine",
            help="vllm: what `vllm serve` does at start-up; hf: transformers' generate. "
            "\\[default: hf with vLLM's budget after it; vllm when a serving flag or --tp is given]",
            rich_help_panel=SERVING,
        ),
    ],
    "gpu_memory_utilization": Annotated[
        Optional[float],
        typer.Option(
            "--gpu-memory-utilization",
            help=f"vLLM's fraction of the card for the engine. \\[default: {DEFAULT_UTILIZATION}]",
            rich_help_panel=SERVING,
        ),
    ],
    "max_model_len": Annotated[
        Optional[int],
        typer.Option("--max-model-len", help="vLLM's context limit. \\[default: the model's]", rich_help_panel=SERVING),
    ],
    "max_num_seqs": Annotated[
        Optional[int],
        typer.Option(
            "--max-num-seqs",
            help="vLLM's sequences per step. \\[default: 1024 on a ≥ 70 GiB card that is not an A100, else 256]",
            rich_help_panel=SERVING,
        ),
    ],
    "max_num_batched_tokens": Annotated[
        Optional[int],
        typer.Option(
            "--max-num-batched-tokens",
            help="vLLM's tokens per step, the profile run's batch. \\[default: 8192 on a ≥ 70 GiB card that is "
            "not an A100, else 2048]",
            rich_help_panel=SERVING,
        ),
    ],
    "enforce_eager": Annotated[
        bool,
        typer.Option("--enforce-eager", help="vLLM without CUDA graphs.", rich_help_panel=SERVING),
    ],
    "vllm_version": Annotated[
        Optional[str],
        typer.Option(
            "--vllm-version",
            metavar="X.Y",
            help=f"The vLLM whose start-up is billed (0.21 and newer count CUDA graphs in the budget; before 0.8, "
            f"the V0 engine's profile). \\[default: {LATEST_VLLM}]",
            rich_help_panel=SERVING,
        ),
    ],
}


@dataclass(frozen=True)
class ServingFlags:
    """The serving flags of one invocation, as given."""

    values: dict

    @property
    def any_given(self) -> bool:
        return any(value not in (None, False) for name, value in self.values.items() if name != "engine")

    def engine(self, tp: int) -> Engine | None:
        """The engine asked for; vLLM when a serving flag or --tp > 1 is given; None (both) otherwise."""
        given = self.values.get("engine")
        if given is not None:
            return given
        return Engine.VLLM if self.any_given or tp > 1 else None

    def vllm_args(self, tp: int) -> VllmArgs:
        v = self.values
        return VllmArgs(
            gpu_memory_utilization=DEFAULT_UTILIZATION
            if v.get("gpu_memory_utilization") is None
            else v["gpu_memory_utilization"],
            max_model_len=v.get("max_model_len"),
            max_num_seqs=v.get("max_num_seqs"),
            max_num_batched_tokens=v.get("max_num_batched_tokens"),
            enforce_eager=bool(v.get("enforce_eager")),
            tp=tp,
            version=v.get("vllm_version") or LATEST_VLLM,
        )


def serving_options(command):
    """Decorator: add `SERVING_OPTIONS` to `command`'s CLI signature and pass them as `serving: ServingFlags`."""
    signature = inspect.signature(command)
    own = [p for name, p in signature.parameters.items() if name != "serving"]
    extra = [
        inspect.Parameter(
            name,
            inspect.Parameter.KEYWORD_ONLY,
            annotation=annotation,
            default=False if name == "enforce_eager" else None,
        )
        for name, annotation in SERVING_OPTIONS.items()
    ]

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        values = {name: kwargs.pop(name) for name in SERVING_OPTIONS}
        return command(*args, serving=ServingFlags(values), **kwargs)

    positional = [p for p in own if p.kind is not inspect.Parameter.KEYWORD_ONLY]
    keyword = [p for p in own if p.kind is inspect.Parameter.KEYWORD_ONLY]
    wrapper.__signature__ = signature.replace(parameters=positional + keyword + extra)
    return wrapper
