"""Issue 25 through `memdoc bill`: one fit answer in the verdict, --max and the ladder, and the user's choices kept.

The expected answer is the fit rule's arithmetic on the bill's own simulated minimum memory (comfortable when
the card's headroom over it exceeds ±10% of it, does not fit when the overshoot does, a close call between),
written out here; the recipe's values are read from the recipe file itself.
"""

from __future__ import annotations

import json

import pytest
import yaml
from conftest import ROOT, bill_plan, invoke

BAND = 0.10  # the bill's benchmarked error band (verdict.MIN_MEMORY_ERROR), as docs/output.md states it


def _rule(minimum: int, capacity: int) -> tuple[str, bool]:
    error = round(BAND * minimum)
    margin = capacity - minimum
    fit = "comfortable" if margin > error else "does not fit" if -margin > error else "close call"
    return fit, minimum <= capacity


def _json(*args) -> dict:
    result = invoke("bill", *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_the_issue_example_is_a_close_call_not_a_miss():
    """Llama-3.1-8B, batch 2 × 8192, checkpointing, on an H100: its minimum is 2.1 GiB over a 79.18 GiB card."""
    args = ("meta-llama/Llama-3.1-8B", "--gpu", "h100-sxm", "--batch", 2, "--seq", 8192, "--checkpointing", "full")
    data = _json(*args)
    minimum, capacity = data["per_gpu"]["min_memory_bytes"], data["gpu"]["memory_bytes"]
    fit, fits = _rule(minimum, capacity)
    assert fit == "close call"
    v = data["verdict"]
    assert (v["fit"], v["fits"], v["close_call"]) == (fit, fits, True)
    assert v["margin_bytes"] == capacity - minimum and v["min_memory_bytes"] == minimum
    assert data["fits"] is fits
    out = invoke("bill", *args).stdout
    assert "close call" in out and "does not fit" not in out


def _edges():
    bill = bill_plan("meta-llama/Llama-3.1-8B", "80", micro_batch=2, seq_len=8192, checkpointing="full")
    low, high = bill.min_memory_bytes, bill.process_total
    return {
        "just over the minimum": low + 32 * 2**20,
        "just under the minimum": low - 32 * 2**20,
        "total over, minimum under": (low + high) // 2,
    }


EDGES = list(_edges().items())


@pytest.mark.parametrize("case, capacity", EDGES, ids=[c for c, _ in EDGES])
def test_verdict_max_and_ladder_give_one_answer_at_the_edge(case, capacity):
    gib = f"{capacity / 2**30:.9f}"
    args = ("meta-llama/Llama-3.1-8B", "--gpu", gib, "--batch", 2, "--seq", 8192, "--checkpointing", "full")
    data = _json(*args, "--max", "batch")
    minimum, card = data["per_gpu"]["min_memory_bytes"], data["gpu"]["memory_bytes"]
    fit, fits = _rule(minimum, card)
    assert (data["verdict"]["fit"], data["verdict"]["fits"], data["fits"]) == (fit, fits, fits)
    if case == "total over, minimum under":
        assert fits and data["per_gpu"]["process_total"] > card
    most = data["max"]
    assert ((most["comfortable"] or 0) >= 2) is (fit == "comfortable") and most["value"] == most["comfortable"]
    assert ((most["fits"] or 0) >= 2) is fits
    assert (data["ladder"] == []) is (fit == "comfortable")
    for step in data["ladder"]:
        assert step["fit"] in ("comfortable", "close call", "does not fit")
        assert step["fits"] is True or step["fit"] != "comfortable"
        assert step["fits"] is False or step["fit"] != "does not fit"
    comfortable = [s for s in data["ladder"] if s["fit"] == "comfortable"]
    assert not comfortable or data["ladder"][-1]["fit"] == "comfortable"


def test_method_full_is_kept_by_the_ladder():
    data = _json("meta-llama/Llama-3.1-8B", "--gpu", "24", "--method", "full")
    assert data["ladder"]
    for step in data["ladder"]:
        assert step["plan"]["method"] == "full" or step["changes_fixed"], step["rung"]
    assert "lora" not in [s["rung"] for s in data["ladder"] if not s["changes_fixed"]]
    free = _json("meta-llama/Llama-3.1-8B", "--gpu", "24")  # the same plan, method left to the ladder
    assert "lora" in [s["rung"] for s in free["ladder"]]


def test_a_recipe_value_is_kept_and_a_needed_change_is_named():
    """The 7B LoRA recipe on a 12 GiB card: its base alone is over, so only a change to what it set fits."""
    path = ROOT / "recipes" / "llama2-7b-lora-24gb.yaml"
    recipe = yaml.safe_load(path.read_text())["plan"]
    data = _json("--recipe", path, "--gpu", "12")
    steps = data["ladder"]
    marked = [i for i, s in enumerate(steps) if s["changes_fixed"]]
    assert marked, "the recipe cannot fit 12 GiB as set"
    for step in steps[: marked[0]]:  # the ladder that keeps the recipe's values comes first
        assert all(step["plan"][k] == v for k, v in recipe.items()), step["rung"]
    for step in steps:
        for change in step["fixed_changes"]:
            assert change["set"] == recipe[change["field"]] and change["to"] != change["set"]
    method = [c for s in steps for c in s["fixed_changes"] if c["field"] == "method"]
    assert method and method[0]["flag"] == "--method"
    out = invoke("bill", "--recipe", path, "--gpu", "12", env={"COLUMNS": "200"}).stdout
    assert f"needs a change you fixed: --method {method[0]['to']} (you set --method {recipe['method']})" in " ".join(
        out.split()
    )


def test_emit_fit_gives_a_comfortable_plan_that_keeps_the_method():
    result = invoke("emit", "meta-llama/Llama-3.1-8B", "--gpu", "24", "--method", "full", "--fit", "--json")
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)["plan"]
    assert plan["method"] == "full"  # the user's --method is kept: the ladder found a full fine-tune that fits
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in plan.items() if k in ("optimizer", "offload", "loss")]
    emitted = _json(
        "meta-llama/Llama-3.1-8B",
        "--gpu",
        "24",
        "--method",
        "full",
        *flags,
        "--checkpointing",
        plan["checkpointing"],
        "--batch",
        str(plan["micro_batch"]),
        "--accum",
        str(plan["grad_accum"]),
    )
    gpu = 24 * 1024**3
    assert _rule(emitted["per_gpu"]["min_memory_bytes"], gpu) == ("comfortable", True)
