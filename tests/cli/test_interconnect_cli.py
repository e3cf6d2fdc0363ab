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
