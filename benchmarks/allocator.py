"""Allocator-true bill vs real H200 runs: every row of benchmarks/data/h200.jsonl billed with `--gpu h200`.

    python benchmarks/allocator.py

Per row: peak_allocated, peak_reserved and process_total errors (bill − measured) / measured, and
the reserved/allocated ratio of both. Every row ran torch's foreach AdamW, so the plan pins
`--optimizer adamw-foreach` (memdoc's default is the trainers' fused AdamW); LoRA rows carry their
`--lora-dropout 0`. Rows with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True are billed with
--allocator expandable.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

from memdoc.core.billing.bill import compute_bill
from memdoc.resolve.setup import resolve_setup

DATA = Path(__file__).parent / "data"


def bill_row(row: dict):
    args = list(row["memdoc_args"])
    model = args.pop(0)
    values = {"optimizer": "adamw-foreach"}
    while args:
        flag, value = args.pop(0), args.pop(0)
        values[flag[2:].replace("-", "_")] = value
    if row["alloc_conf"]:
        values["allocator"] = "expandable"
    if "fused linear cross-entropy ONLY" in row.get("note", ""):
        values["loss"] = "fused-ce"  # Liger's fused loss alone (`--loss fused` is use_liger_kernel's full set)
    setup = resolve_setup(str(DATA / model) if model.endswith(".json") else model, gpu="h200", **values)
    return compute_bill(setup.model, setup.plan, setup.gpu)


def main() -> None:
    rows = [json.loads(line) for line in (DATA / "h200.jsonl").read_text().splitlines()]
    errs: dict[str, list[float]] = {"alloc": [], "reserved": [], "total": [], "ratio": []}
    exp: list[float] = []
    no_lora: dict[str, list[float]] = {"reserved": [], "total": []}
    print(f"{'case':38} {'conf':4} {'alloc':>7} {'reserved':>9} {'total':>7}  ratio real/bill   time")
    for row in rows:
        t = time.perf_counter()
        bill = bill_row(row)
        e = {
            "alloc": bill.peak_allocated / row["peak_allocated"] - 1,
            "reserved": bill.peak_reserved / row["peak_reserved"] - 1,
            "total": bill.process_total / row["process_total"] - 1,
            "ratio": (bill.peak_reserved / bill.peak_allocated) / (row["peak_reserved"] / row["peak_allocated"]) - 1,
        }
        seconds = time.perf_counter() - t
        for k in errs:
            errs[k].append(e[k])
        lora = "--lora-dropout" in row["memdoc_args"]
        if not lora:
            no_lora["reserved"].append(e["reserved"])
            no_lora["total"].append(e["total"])
        if row["alloc_conf"]:
            exp.append(e["reserved"])
        print(
            f"{row['id'][:38]:38} {'exp' if row['alloc_conf'] else '':4} {e['alloc']:+7.1%} {e['reserved']:+9.1%} "
            f"{e['total']:+7.1%}  {row['peak_reserved'] / row['peak_allocated']:.3f}/"
            f"{bill.peak_reserved / bill.peak_allocated:.3f}"
            f"  {seconds:5.2f} s{'  (LoRA)' if lora else ''}"
        )

    def summary(label: str, values: list[float]) -> None:
        a = [abs(v) for v in values]
        print(f"{label:44} median |error| {statistics.median(a):5.1%}   max {max(a):5.1%}   (n={len(a)})")

    print()
    summary("peak_allocated, all rows", errs["alloc"])
    summary("peak_reserved, all rows", errs["reserved"])
    summary("process_total, all rows", errs["total"])
    summary("reserved/allocated ratio, all rows", errs["ratio"])
    summary("peak_reserved, rows without LoRA", no_lora["reserved"])
    summary("process_total, rows without LoRA", no_lora["total"])
    summary("peak_reserved, expandable rows", exp)


if __name__ == "__main__":
    sys.exit(main())
