"""Shared test helpers: the repository's paths, and running the memdoc CLI in-process.

Test modules import them by name (`from conftest import ROOT, invoke`): pytest puts this folder on
`sys.path` before it collects tests/unit, tests/cli and tests/fidelity.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memdoc.cli import app

ROOT = Path(__file__).resolve().parents[1]
"""The repository root (holds memdoc/, examples/, recipes/, benchmarks/)."""
FIXTURES = ROOT / "tests" / "fixtures"
EXAMPLES = ROOT / "examples"
BENCHMARKS = ROOT / "benchmarks"
CATALOG = ROOT / "memdoc" / "data" / "catalog"

_RUNNER = CliRunner()

# A tiny Llama config: two layers, cheap to build and trace on CPU.
TINY_LLAMA = {
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 352,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "vocab_size": 2000,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
}

# The symptom knowledge base's ids, in its order (memdoc/data/symptoms.yaml).
SYMPTOM_IDS = [
    "startup-oom",
    "mid-run-oom",
    "long-sample-oom",
    "slow-but-fits",
    "inference-oom",
    "ckpt-no-savings",
    "ckpt-too-slow",
    "nan-with-amp",
    "grad-mismatch",
    "custom-op-error",
    "rl-generation-oom",
    "reference-model-oom",
    "eval-oom",
    "save-oom",
    "host-oom",
    "nccl-oom",
    "rank-imbalance",
]


TERMINAL_ENV = ("COLUMNS", "LINES", "FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")


@pytest.fixture(autouse=True)
def _no_terminal_env(monkeypatch):
    """The terminal's size and colour come from the environment only where a test sets them: GNU readline, once
    imported (pdb, pytest-xdist's workers), exports its terminal's COLUMNS/LINES (80 columns) to the process."""
    for name in TERMINAL_ENV:
        monkeypatch.delenv(name, raising=False)


def invoke(*args, **kwargs):
    """`memdoc ARGS…` in-process (Typer's CliRunner); arguments are turned into strings.

    Keyword arguments go to `CliRunner.invoke` (e.g. `catch_exceptions=False`, `input=`).
    The result has `.exit_code`, `.stdout`, `.stderr` and `.output`.
    """
    return _RUNNER.invoke(app, [str(a) for a in args], **kwargs)


def bill_plan(model: str, gpu: str | None = None, **flags):
    """`compute_bill` of a catalog model under `parse_plan(**flags)`, on `gpu` (a name) or none."""
    from memdoc.core.billing.bill import compute_bill
    from memdoc.core.model.gpu import resolve_gpu
    from memdoc.core.model.plan import parse_plan
    from memdoc.resolve.models import resolve_model

    return compute_bill(resolve_model(model), parse_plan(**flags), resolve_gpu(gpu) if gpu else None)


def invoke_diagnose(*args):
    """`memdoc diagnose ARGS…`, letting exceptions through (a traceback is a test failure)."""
    return invoke("diagnose", *args, catch_exceptions=False)


@pytest.fixture
def cli():
    """The `invoke` helper as a fixture."""
    return invoke


@contextlib.contextmanager
def saved_storages(model, local=lambda t: t):
    """{storage address: bytes} of the distinct non-parameter storages autograd saves for backward inside the block
    (torch's `saved_tensors_hooks`); `local` maps a tensor to the one holding its storage (a DTensor's local shard).

    Each saved tensor is kept alive, as autograd would keep it, but packed as an index: returning the tensor itself
    makes each saved output reference its own grad_fn, a C++ cycle Python's collector cannot see. Forward only:
    nothing is unpacked, so no backward may run inside the block."""
    import torch

    params = {local(p).untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}
    kept: list = []

    def pack(t):
        storage = local(t).untyped_storage()
        if storage.data_ptr() not in params:
            seen.setdefault(storage.data_ptr(), storage.nbytes())
        kept.append(t)
        return len(kept) - 1

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        yield seen
    kept.clear()
