"""Modelled multi-GPU throughput vs published multi-GPU runs (benchmarks/data/multigpu.yaml).

    python benchmarks/multigpu.py          # one row per published run, ratio = modelled / published tokens/s/GPU

Nothing is fitted here: the step-time constants are the single-H200 calibration (`benchmarks/steptime.py`),
the links are datasheet peaks (`memdoc/data/gpus.yaml`, `memdoc/core/model/network.py`) and the overlap is
the stated assumption of `memdoc/core/billing/comm.py`. The median and worst |ratio − 1| are printed.
"""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path

import yaml

from memdoc.core.billing.steptime import step_time
from memdoc.resolve.setup import resolve_setup

DATA = Path(__file__).parent / "data"


def load_rows() -> list[dict]:
    """The published rows, each with its source entry."""
    data = yaml.safe_load((DATA / "multigpu.yaml").read_text(encoding="utf-8"))
    return [{**row, "source_text": data["sources"][row["source"]]} for row in data["rows"]]


def modelled(row: dict):
    """memdoc's `StepTime` of a row's run (memdoc_args, with its gpu_override applied to the table's card)."""
    model_arg, flags = row["memdoc_args"][0], row["memdoc_args"][1:]
    values = {flag[2:].replace("-", "_"): value for flag, value in zip(flags[::2], flags[1::2])}
    setup = resolve_setup(model_arg, **values)
    gpu = dataclasses.replace(setup.gpu, **row.get("gpu_override", {}))
    return step_time(setup.model, setup.plan, gpu)


def compare() -> list[dict]:
    """One dict per row: id, published and modelled tokens/s per GPU, their ratio, the exposed communication."""
    out = []
    for row in load_rows():
        time = modelled(row)
        published = row["tokens_per_gpu_s"]
        out.append(
            {
                "id": row["id"],
                "published": published,
                "modelled": time.tokens_per_second,
                "ratio": time.tokens_per_second / published,
                "comm_share": time.communication / time.seconds,
                "link": time.link,
            }
        )
    return out


def summary(results: list[dict]) -> tuple[float, float]:
    """(median, max) of |modelled / published − 1| over the rows."""
    errors = [abs(r["ratio"] - 1) for r in results]
    return statistics.median(errors), max(errors)


def main() -> None:
    results = compare()
    print(f"{'run':28} {'published':>9} {'memdoc':>8} {'ratio':>6} {'comm':>5}  slowest link")
    for r in results:
        print(
            f"{r['id']:28} {r['published']:>9,} {r['modelled']:>8,.0f} {r['ratio']:>6.2f} "
            f"{r['comm_share']:>5.0%}  {r['link']}"
        )
    median, worst = summary(results)
    print(f"median |ratio − 1| {median:.1%}, worst {worst:.1%} over {len(results)} published runs")


if __name__ == "__main__":
    main()
