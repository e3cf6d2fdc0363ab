"""Regenerate the table in recipes/README.md from the recipes and the current bill.

python scripts/recipes_table.py          # rewrite the table
python scripts/recipes_table.py --check  # exit 1 if the README is stale (used by the tests)
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from memdoc.core.billing.bill import compute_bill  # noqa: E402
from memdoc.resolve.setup import resolve_setup  # noqa: E402
from memdoc.units import format_bytes  # noqa: E402

README = ROOT / "recipes" / "README.md"
BEGIN, END = "<!-- recipes-table:begin (scripts/recipes_table.py) -->", "<!-- recipes-table:end -->"


def _plan_summary(plan) -> str:
    parts = [plan.method.value, plan.precision.value, plan.optimizer.value]
    if plan.is_peft:
        parts.append(f"r{plan.lora_rank} {','.join(plan.lora_targets)}")
    if plan.checkpointing.value != "none":
        parts.append(f"ckpt {plan.checkpointing.value}")
    if plan.shard.value != "none":
        parts.append(plan.shard.value)
    if plan.offload.value != "none":
        parts.append(f"offload {plan.offload.value}")
    if plan.attention.value != "sdpa":
        parts.append(plan.attention.value)
    if plan.allocator.value != "default":
        parts.append(f"{plan.allocator.value} segments")
    return " · ".join(parts)


def table() -> str:
    gib = lambda n: format_bytes(n, unit="GiB")  # noqa: E731
    rows = [
        "| recipe | model | GPUs | plan | batch × seq (accum) | billed peak / GPU | process total / GPU | headroom |",
        "|---|---|---|---|---|---:|---:|---:|",
    ]
    for path in sorted((ROOT / "recipes").glob("*.yaml")):
        setup = resolve_setup(recipe=path)
        model, plan, gpu = setup.model, setup.plan, setup.gpu
        bill = compute_bill(model, plan, gpu)
        gpus = f"{plan.world_size} × {gpu.name} ({gib(gpu.memory_bytes)})"
        rows.append(
            f"| [{path.stem}]({path.name}) | {model.id} | {gpus} | {_plan_summary(plan)} | "
            f"{plan.micro_batch} × {plan.seq_len} ({plan.grad_accum}) | {gib(bill.peak_allocated)} | "
            f"{gib(bill.process_total)} | {bill.headroom_bytes / gpu.memory_bytes:.0%} |"
        )
    return "\n".join(rows)


def main(argv: list[str]) -> int:
    text = README.read_text()
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    new = text[:start] + "\n" + table() + "\n" + text[end:]
    if "--check" in argv:
        if new != text:
            print("recipes/README.md is stale: run python scripts/recipes_table.py")
            return 1
        return 0
    README.write_text(new)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
