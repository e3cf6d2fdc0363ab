"""Modelled step time vs real H200 steps (benchmarks/data/h200.jsonl, copied from ../shared/gpu-measurements).

    python benchmarks/steptime.py          # one row per measured case, ratio = modelled / measured
    python benchmarks/steptime.py --fit    # re-run the grid search of the efficiency constants

Every row is a real training step (random weights, AdamW foreach, peft defaults); `memdoc_args`
are the memdoc flags of the same step. Rows marked `held-out` were not used by the fit.
Done when: median |ratio − 1| ≤ 15%, worst within ×1.5 (both printed).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
from pathlib import Path

from memdoc.core.billing import steptime
from memdoc.core.model.gpu import resolve_gpu
from memdoc.resolve.setup import resolve_setup

DATA = Path(__file__).parent / "data"
MEASURED_OPTIMIZER = "adamw-foreach"
"""Every row ran torch AdamW with foreach=True (memdoc's default is fused AdamW, as the trainers')."""
HELD_OUT = {
    "l2-7b-full-bf16-s2048-ckpt",
    "l31-8b-lora16qkvo-b2-s4096-ckpt-flce",
    "q25-05b-full-bf16-b8-s1024-ckpt",
    "mixtral-4l-full-bf16-b2-s2048",
    "q25-7b-lora16qv-s2048-ckpt",
    "l32-1b-full-amp-b2-s1024",
}
"""Cases the constants were not fitted on."""


def load_rows() -> list[dict]:
    """Distinct cases (the expandable-segments repeats of a case are the same step)."""
    rows, seen = [], set()
    for line in (DATA / "h200.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row["id"] in seen:
            continue
        seen.add(row["id"])
        rows.append(row)
    return rows


def setup_of(args: list[str]):
    """(model, plan) of a row's memdoc_args."""
    model_arg, flags = args[0], args[1:]
    values = {"optimizer": MEASURED_OPTIMIZER}
    for flag, value in zip(flags[::2], flags[1::2]):
        values[flag[2:].replace("-", "_")] = value
    if model_arg.endswith(".json"):
        model_arg = str(DATA / model_arg)
    setup = resolve_setup(model_arg, need_gpu=False, **values)
    return setup.model, setup.plan


def evaluate(cases, gpu) -> list[tuple[str, float, float]]:
    return [(row["id"], steptime.step_seconds(model, plan, gpu), row["step_s"]) for row, model, plan in cases]


def score(results) -> tuple[float, float]:
    """(median |ratio − 1|, worst max(ratio, 1/ratio))."""
    ratios = [modelled / measured for _, modelled, measured in results]
    return statistics.median(abs(r - 1) for r in ratios), max(max(r, 1 / r) for r in ratios)


def fit(cases, gpu) -> None:
    train = [c for c in cases if c[0]["id"] not in HELD_OUT]
    best = None
    grid = itertools.product(
        [0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9],  # MATMUL_EFFICIENCY
        [0, 250, 500, 1000, 1500, 2000],  # SMALL_MATMUL_DIM
        [0.5, 0.6, 0.7, 0.8, 0.9],  # MEMORY_EFFICIENCY
        [0, 1e-6, 2e-6, 3e-6, 4e-6, 6e-6],  # KERNEL_OVERHEAD_S
    )
    for eta, h0, mem, overhead in grid:
        steptime.MATMUL_EFFICIENCY, steptime.SMALL_MATMUL_DIM = eta, h0
        steptime.MEMORY_EFFICIENCY, steptime.KERNEL_OVERHEAD_S = mem, overhead
        logs = [abs(math.log(m / t)) for _, m, t in evaluate(train, gpu)]
        key = (sum(x * x for x in logs), statistics.median(logs), max(logs))
        if best is None or key < best[0]:
            best = (key, (eta, h0, mem, overhead))
    print(
        f"best on {len(train)} fitted cases: Σ log² {best[0][0]:.3f}, median |log| "
        f"{best[0][1]:.3f}, worst {best[0][2]:.3f}: "
        f"MATMUL_EFFICIENCY, SMALL_MATMUL_DIM, MEMORY_EFFICIENCY, KERNEL_OVERHEAD_S = {best[1]}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", action="store_true", help="grid-search the efficiency constants")
    args = parser.parse_args()
    gpu = resolve_gpu("h200")
    cases = [(row, *setup_of(row["memdoc_args"])) for row in load_rows()]
    if args.fit:
        fit(cases, gpu)
        return
    results = evaluate(cases, gpu)
    print(f"{'case':42} {'measured':>9} {'modelled':>9} {'ratio':>6}")
    for case_id, modelled, measured in results:
        mark = "  held-out" if case_id in HELD_OUT else ""
        print(f"{case_id:42} {measured:8.4f}s {modelled:8.4f}s {modelled / measured:6.2f}{mark}")
    median, worst = score(results)
    held = [r for r in results if r[0] in HELD_OUT]
    held_median, held_worst = score(held)
    print(f"\nall {len(results)} cases: median |ratio - 1| = {median:.1%}, worst ×{worst:.2f}")
    print(f"held-out {len(held)} cases: median |ratio - 1| = {held_median:.1%}, worst ×{held_worst:.2f}")


if __name__ == "__main__":
    main()
