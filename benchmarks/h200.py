"""Bill vs real H200 training steps (benchmarks/data/h200.jsonl, copied from the shared measurements).

    python benchmarks/h200.py            # one row per measured case, per phase
    python benchmarks/h200.py --json     # the comparison as JSON lines

Each row of h200.jsonl is one real training step of an HF model built from its config (random
weights) on one NVIDIA H200 (torch 2.11, transformers 5.17, peft 0.21), measured with
`torch.cuda.max_memory_allocated()`: the step's peak and the peak of each phase. `memdoc_args`
is the plan that expresses the same step. Every case ran torch AdamW with foreach=True, so the
plan here pins `--optimizer adamw-foreach` (memdoc's default is fused AdamW, as the trainers').
Config-file models (cut-down MoE and Gemma-2) are read from benchmarks/data/.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from memdoc.core.billing.bill import compute_bill
from memdoc.resolve.setup import resolve_setup

DATA = Path(__file__).parent / "data"
GiB = 1024**3
MEASURED_OPTIMIZER = "adamw-foreach"
"""The optimizer every H200 case ran (torch AdamW, foreach=True)."""
LOSS_OF_NOTE = {"Liger fused linear cross-entropy ONLY": "fused-ce"}
"""Rows whose `note` says which Liger kernels ran: `--loss fused` is use_liger_kernel's full set, `fused-ce`
the fused cross-entropy alone (the row's memdoc_args predate that distinction)."""


def load_rows(path: Path = DATA / "h200.jsonl") -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def plan_of(args: list[str]) -> tuple[str, dict]:
    """(model, plan values) from a row's `memdoc_args` (MODEL then `--flag value` pairs)."""
    model, rest = args[0], args[1:]
    values = {"optimizer": MEASURED_OPTIMIZER}
    for flag, value in zip(rest[::2], rest[1::2]):
        values[flag.removeprefix("--").replace("-", "_")] = value
    if model.endswith(".json"):
        model = str(DATA / model)
    return model, values


def compare(row: dict) -> dict:
    """The bill of a row's plan next to what the H200 measured (bytes)."""
    model_id, values = plan_of(row["memdoc_args"])
    for text, loss in LOSS_OF_NOTE.items():
        if text in row.get("note", ""):
            values["loss"] = loss
    setup = resolve_setup(model_id, need_gpu=False, **values)
    bill = compute_bill(setup.model, setup.plan)
    return {
        "id": row["id"],
        "measured": row["peak_allocated"],
        "billed": bill.peak_allocated,
        "error": bill.peak_allocated / row["peak_allocated"] - 1,
        "measured_phases": row["phase_peaks"],
        "billed_phases": {name: phase.total for name, phase in bill.phases.items()},
        "measured_phase": row["peak_phase"],
        "billed_phase": bill.peak_phase,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="JSON lines instead of a table")
    args = parser.parse_args()
    rows = [compare(r) for r in load_rows()]
    if args.json:
        for r in rows:
            print(json.dumps(r))
        return 0
    print(
        f"{'case':40} {'measured':>9} {'billed':>9} {'error':>7}  {'fwd m/b':>15} "
        f"{'bwd m/b':>15} {'opt m/b':>15}  peak phase"
    )
    for r in rows:
        cols = " ".join(
            f"{r['measured_phases'][p] / GiB:6.2f}/{r['billed_phases'][p] / GiB:<6.2f}"[:15].rjust(15)
            for p in ("forward", "backward", "optimizer")
        )
        print(
            f"{r['id'][:40]:40} {r['measured'] / GiB:7.2f}Gi {r['billed'] / GiB:7.2f}Gi "
            f"{r['error'] * 100:+6.1f}%  {cols}  "
            f"{r['measured_phase']}/{r['billed_phase']}"
        )
    errors = [abs(r["error"]) for r in rows]
    print(f"\n{len(rows)} rows: median |error| {statistics.median(errors) * 100:.1f}%, max {max(errors) * 100:.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
