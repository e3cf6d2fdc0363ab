"""`--interconnect`: the network between nodes in plan JSON and step time, and its one-line error."""

from __future__ import annotations

import json

from conftest import invoke


def test_cli_interconnect_in_json_and_bad_value_one_line():
    r = invoke(
        "bill",
        "meta-llama/Llama-3.1-8B",
        "--gpu",
        "8xh100",
        "--nodes",
        2,
        "--interconnect",
        "ib-hdr-200",
        "--shard",
        "zero3",
        "--json",
    )
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["plan"]["interconnect"] == "ib-hdr-200"
    assert data["time"]["link"] == "8 × InfiniBand HDR 200 Gb/s per node (200 GB/s)"
    bad = invoke("bill", "meta-llama/Llama-3.1-8B", "--gpu", "8xh100", "--interconnect", "ib-ndr400")
    assert bad.exit_code != 0 and "did you mean ib-ndr-400" in bad.output and "Traceback" not in bad.output


def test_recipe_sets_the_interconnect_and_flags_override_it(tmp_path):
    recipe = tmp_path / "two-nodes.yaml"
    recipe.write_text(
        "model: meta-llama/Llama-3.1-8B\ngpu: h100-sxm\n"
        "plan: {gpus: 8, nodes: 2, shard: zero3, interconnect: 4xroce-200}\n",
        encoding="utf-8",
    )
    data = json.loads(invoke("bill", "--recipe", recipe, "--json").stdout)
    assert data["plan"]["interconnect"] == "4xroce-200"
    assert data["time"]["link"] == "4 × RoCE v2 200 Gb/s per node (100 GB/s)"
    over = json.loads(invoke("bill", "--recipe", recipe, "--interconnect", "eth-25", "--json").stdout)
    assert over["plan"]["interconnect"] == "eth-25" and over["time"]["step_seconds"] > data["time"]["step_seconds"]
