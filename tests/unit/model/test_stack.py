"""The stack: `--stack` parsing, installed versions, memdoc's latest known versions, and the defaults
that follow from them, against the installed packages' own metadata and dataclass defaults."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from conftest import ROOT, invoke

from memdoc.core.model.plan import Optimizer
from memdoc.core.model.stack import LATEST_KNOWN, LATEST_KNOWN_DATE, Stack, parse_stack, parse_version
from memdoc.core.user_config.defaults import default_optimizer, trl_sft_defaults
from memdoc.errors import PlanError
from memdoc.resolve.stack import stack_in_use


def test_stack_spec_is_parsed():
    stack = parse_stack("transformers==4.57,trl==0.19,torch==2.6")
    assert stack == Stack(versions={"transformers": "4.57", "trl": "0.19", "torch": "2.6"}, source="--stack")
    assert stack.at_least("transformers", "4.56") and not stack.at_least("transformers", "5.0")
    assert parse_stack("Liger_Kernel==0.5.2").versions == {"liger-kernel": "0.5.2"}  # pip's name rules


@pytest.mark.parametrize(
    "spec, message",
    [
        ("transformers=4.57", "--stack item 'transformers=4.57' is not NAME==VERSION"),
        ("transformers==4.57,", "--stack item '' is not NAME==VERSION"),
        ("jax==0.4", "--stack 'jax' is not a library memdoc reads"),
        ("trl==latest", "--stack trl==latest: cannot read a version from 'latest'"),
        ("trl==1.0,trl==1.1", "--stack names trl twice"),
    ],
)
def test_malformed_stack_is_a_one_line_plan_error(spec, message):
    with pytest.raises(PlanError) as err:
        parse_stack(spec)
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)


def test_installed_versions_come_from_the_distributions_metadata():
    stack = stack_in_use()
    assert stack.source == "installed"
    for package, known in LATEST_KNOWN.items():
        try:
            assert stack.versions[package] == metadata.version(package)
            assert package not in stack.assumed
        except metadata.PackageNotFoundError:
            assert stack.versions[package] == known.version
            assert package in stack.assumed
    assert stack.to_json()["assumed"] == list(stack.assumed)


def test_reading_the_stack_imports_no_torch():
    code = "import sys; from memdoc.resolve.stack import stack_in_use; stack_in_use(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.slow
def test_the_cli_loads_importlib_metadata_only_to_read_the_stack():
    """`bill` without --config/--stack never reads the stack: the CLI does not pay for importing
    `importlib.metadata` (its `email`, `zipfile`, `csv`), which `stack_in_use` then does."""
    code = (
        "import sys, memdoc.cli; print('importlib.metadata' in sys.modules);"
        " from memdoc.resolve.stack import stack_in_use; stack_in_use(); print('importlib.metadata' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]


def test_latest_known_versions_are_dated_and_sourced():
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", LATEST_KNOWN_DATE)
    assert set(LATEST_KNOWN) == {
        "transformers", "trl", "peft", "accelerate", "deepspeed", "torch",
        "bitsandbytes", "liger-kernel", "axolotl", "llamafactory",
    }  # fmt: skip
    for known in LATEST_KNOWN.values():
        parse_version(known.version)
        assert re.fullmatch(r"\d{4}-\d{2}", known.released) and known.released <= LATEST_KNOWN_DATE[:7]
        assert known.source
    for package, known in LATEST_KNOWN.items():  # never older than what is installed here
        try:
            assert parse_version(known.version) >= parse_version(metadata.version(package))
        except metadata.PackageNotFoundError:
            pass


@pytest.mark.parametrize(
    "spec, optimizer",
    [
        ("transformers==4.57,torch==2.6", Optimizer.ADAMW_FOREACH),  # torch < 2.8: adamw_torch
        ("transformers==4.53.3,torch==2.8", Optimizer.ADAMW_FOREACH),  # before huggingface/transformers#37358
        ("transformers==4.57,torch==2.8", Optimizer.ADAMW_FUSED),
        ("transformers==5.24,torch==2.13", Optimizer.ADAMW_FUSED),
        ("transformers==4.57", Optimizer.ADAMW_FUSED),  # torch unknown: the newest
    ],
)
def test_default_optimizer_per_stack(spec, optimizer):
    assert default_optimizer(parse_stack(spec)) is optimizer


@pytest.mark.slow
def test_installed_defaults_are_the_installed_trainers():
    """transformers' `TrainingArguments.optim` and TRL's `SFTConfig` defaults, read from the installed classes."""
    from transformers import TrainingArguments
    from trl import SFTConfig

    names = {Optimizer.ADAMW_FUSED: "adamw_torch_fused", Optimizer.ADAMW_FOREACH: "adamw_torch"}
    optim = next(f for f in dataclasses.fields(TrainingArguments) if f.name == "optim").default
    assert names[default_optimizer(stack_in_use())] == optim
    sft = {f.name: f.default for f in dataclasses.fields(SFTConfig)}
    ours = trl_sft_defaults(stack_in_use())
    assert (ours.max_length, ours.packing, ours.padding_free) == (
        sft["max_length"],
        sft["packing"],
        sft["padding_free"],
    )
    assert sft["loss_type"] == "nll"  # computed through the fused LM head (trl/trainer/sft_trainer.py)


def _lock() -> dict[str, str]:
    """requirements/lock.txt as {distribution name: pinned version}."""
    pins = re.findall(r"^([A-Za-z0-9._-]+)==([^\s;\\]+)", (ROOT / "requirements" / "lock.txt").read_text(), re.M)
    return {name.lower().replace("_", "-"): version for name, version in pins}


LOCKED_BEHIND = {
    "torch": "the CPU wheel on the project machines' disk (requirements/lock.in)",
    "axolotl": "the validator's pin (requirements/nodeps.in)",
}
"""Libraries the lock holds at an older release on purpose; every other one it resolves to the newest."""


def test_the_lock_and_latest_known_agree():
    lock = _lock()
    for package, known in LATEST_KNOWN.items():
        if package not in lock:
            continue
        if package in LOCKED_BEHIND:
            assert parse_version(known.version) >= parse_version(lock[package]), package
        else:
            assert known.version == lock[package], f"{package}: LATEST_KNOWN {known.version}, lock {lock[package]}"


def test_the_lock_pins_everything_with_hashes():
    text = (ROOT / "requirements" / "lock.txt").read_text()
    entries = [line for line in text.splitlines() if line and not line[0].isspace() and not line.startswith("#")]
    assert entries and all(re.match(r"[A-Za-z0-9._-]+==\S+ \\$", line) for line in entries), entries[:3]
    assert text.count("--hash=sha256:") >= len(entries)
    assert _lock()["torch"].endswith("+cpu")  # never the multi-GB CUDA build


@pytest.mark.skipif(Path(sys.prefix).resolve() != (ROOT / ".venv").resolve(), reason="not the checkout's .venv")
def test_the_checkouts_venv_holds_the_lock_exactly():
    installed = {dist.metadata["Name"].lower().replace("_", "-"): dist.version for dist in metadata.distributions()}
    installed.pop("pip", None)  # the venv's own installer, not a dependency
    assert installed.pop("memdoc") == metadata.version("memdoc")
    assert installed == _lock()


@pytest.mark.parametrize(
    "stack, newer",
    [("transformers==5.25.0,accelerate==1.16.0", None), ("transformers==5.99.0,peft==0.22.0", "transformers 5.99.0")],
)
def test_a_stack_newer_than_known_gets_one_note(stack, newer):
    result = invoke("bill", "meta-llama/Llama-3.1-8B", "--gpu", "h100", "--method", "lora", "--stack", stack)
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stderr.splitlines() if "newer than memdoc knows" in line]
    if newer is None:
        assert notes == []
    else:
        assert len(notes) == 1 and f"{newer} as {LATEST_KNOWN['transformers'].version}" in notes[0]
        assert "peft" not in notes[0]
