"""Emit writes the job it billed (issue 35): the header's peak is `bill --config` of the emitted files, within 1%,
because the header bills the plan the trainer runs from them (TRL's autocast and fused LM head, the trainers'
own readers) rather than the plan as asked."""

import json
import re

import pytest
from conftest import invoke

FORMATS = ["trl", "axolotl", "llamafactory"]
METHODS = [("--method", "lora"), ("--method", "full"), ("--method", "qlora"), ("--method", "lora", "--loss", "fused")]


def _gib(text: str) -> float:
    return float(re.search(r"Billed peak per GPU: ([\d.]+) GiB allocated", text).group(1))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("flags", METHODS)
def test_the_header_is_the_bill_of_the_files_read_back(tmp_path, fmt, flags):
    path = tmp_path / "config.yaml"
    result = invoke("emit", "Qwen/Qwen2.5-0.5B", "--gpu", "24", *flags, "--format", fmt, "-o", path)
    assert result.exit_code == 0, result.output
    header = _gib(path.read_text())
    back = invoke("bill", "--config", path, "--gpu", "24", "--json")
    assert back.exit_code == 0, back.output
    billed = json.loads(back.stdout)["per_gpu"]["peak_allocated"] / 1024**3
    assert header == pytest.approx(billed, rel=0.01, abs=0.006)
