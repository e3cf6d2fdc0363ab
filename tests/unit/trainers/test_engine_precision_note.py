"""The precision note of an emitted DeepSpeed or FSDP file names the dtypes the real engine held (issue 34: the
notes said "optimizer states bf16 too" while the engines keep them in fp32).

Truth: the dtypes of each category in the engine fixtures, real DeepSpeed 0.19.8 and FSDP2 steps on the CPU
(tests/fixtures/engines/README.md)."""

import json

import pytest
from conftest import FIXTURES

from memdoc.core.model.plan import parse_plan
from memdoc.core.trainers.base import precision_note

SHORT = {"float32": "fp32", "bfloat16": "bf16"}

CASES = [
    ("deepspeed-llama-z1-bf16", "zero1", "at_release"),
    ("deepspeed-llama-z2-bf16", "zero2", "at_release"),
    ("deepspeed-llama-z3-bf16", "zero3", "during_step"),
    # accelerate upcasts a bf16-loaded model's trainable parameters to fp32 before fully_shard and gathers in bf16
    # (`MixedPrecisionPolicy(param_dtype=bf16)`): the fixture's fp32-mp-bf16 case
    ("fsdp2-llama-fp32-mp-bf16", "fsdp2", "after_backward"),
]


def _dtypes(case: str, when: str) -> dict[str, str]:
    doc = json.loads((FIXTURES / "engines" / f"{case}.json").read_text())
    found = doc["ranks"][0]["categories"][when]["dtypes"]
    return {
        category: SHORT[found[category][0]]
        for category in ("weights", "gradients", "optimizer", "master")
        if category in found
    }


@pytest.mark.parametrize(("case", "shard", "when"), CASES)
def test_note_names_the_engines_own_dtypes(case, shard, when):
    note = precision_note(parse_plan(precision="bf16", shard=shard, gpus_per_node=2))
    held = _dtypes(case, when)
    assert f"gradients {held['gradients']}" in note and f"optimizer states {held['optimizer']}" in note, note
    if "master" in held:
        assert f"master copy of the weights in {held['master']}" in note, note
    else:
        assert f"sharded in {held['weights']}" in note, note
    assert "bf16 too" not in note
