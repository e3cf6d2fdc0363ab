"""Run the engine cases on the CPU, world size 2 over gloo, and write one fixture per case.

    PYTHONPATH=$PWD .venv/bin/python -m benchmarks.engines.harness [--only NAME…] [--out DIR]

Two ranks are spawned once (`torch.multiprocessing`, spawn); each runs every selected case in turn
(one forward, backward and optimizer step of a tiny model, `tiny.py`) and takes the census of the
engine's own tensors after the step (`census.py`). Rank 0 writes
`tests/fixtures/engines/<case>.json`: both ranks' tensors, the categories they fall in
(`categories.py`), the resolved knobs and the parameter count.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from pathlib import Path

from benchmarks.engines.cases import CASES, Case

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "engines"
WORLD = 2


def run_case(rank: int, case: Case) -> dict:
    """This rank's census of one case (DeepSpeed or FSDP2)."""
    if case.engine == "deepspeed":
        from benchmarks.engines import ds_run

        return ds_run.run(rank, case.model, case.ds_config(), case.load_dtype)
    from benchmarks.engines import fsdp_run

    return fsdp_run.run(rank, case)


def child(rank: int, names: list[str], port: int, queue) -> None:
    """One rank: every case in `names`, each result (or its error) put on `queue`."""
    from benchmarks.engines import ds_run

    ds_run.env_for(rank, WORLD, port)
    for name in names:
        print(f"rank {rank}: {name}", file=sys.stderr, flush=True)
        try:
            out = run_case(rank, CASES[name])
        except Exception as exc:  # a case the engine refuses is recorded, not fatal
            out = {"rank": rank, "error": f"{type(exc).__name__}: {exc}"[:2000]}
            print(f"rank {rank}: {name}: {out['error'][:300]}", file=sys.stderr, flush=True)
        queue.put((name, out))
        gc.collect()
    _close()


def _close() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def run_cases(names: list[str], out: Path, port: int = 29517, timeout_s: int = 300) -> dict[str, str]:
    """Run `names` on one pair of spawned ranks, writing each case's fixture under `out` as both ranks
    report it; {case: "ok" or the error}."""
    import queue as queues

    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=child, args=(r, names, port, queue)) for r in range(WORLD)]
    for p in procs:
        p.start()
    results: dict[str, list[dict]] = {n: [] for n in names}
    status = {}
    try:
        for _ in range(WORLD * len(names)):
            name, result = queue.get(timeout=timeout_s)
            results[name].append(result)
            if len(results[name]) == WORLD:
                doc = fixture(name, sorted(results[name], key=lambda r: r["rank"]))
                (out / f"{name}.json").write_text(json.dumps(doc, indent=1) + "\n")
                status[name] = doc.get("error", "ok")
                print(name, status[name], file=sys.stderr, flush=True)
    except queues.Empty:
        status["timeout"] = f"no result in {timeout_s} s after {sorted(status)}"
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
    return status


def fixture(name: str, ranks: list[dict]) -> dict:
    """The fixture document of one case: its definition, the ranks' tensors and categories."""
    case = CASES[name]
    doc = {"case": name, "definition": case.describe()}
    if any("error" in r for r in ranks):
        return doc | {"error": [r.get("error") for r in ranks]}
    return doc | {
        "params": ranks[0]["params"],
        "knobs": ranks[0].get("knobs", {}),
        "ranks": [r | {"categories": _categories(case, r)} for r in ranks],
    }


def _categories(case: Case, rank: dict) -> dict:
    """Categories at each census, and at backward's peak: ZeRO-1/2's census `at_release` (the IPG buckets and
    the gradients alive at the end of backward, `ds_run._census_at_ipg_release`), else `after_backward`."""
    from benchmarks.engines.categories import categorise

    census = rank["census"]
    out = {when: categorise(case, tensors) for when, tensors in census.items()}
    out["backward_peak"] = out.get("at_release", out["after_backward"])
    return out


def recategorise(out: Path) -> None:
    """Recompute the categories of every fixture under `out` from its recorded tensors (no engine run)."""
    for path in sorted(out.glob("*-*-*.json")):
        doc = json.loads(path.read_text())
        if "ranks" not in doc or doc["case"] not in CASES:
            continue
        for rank in doc["ranks"]:
            rank.pop("ipg_buffers_at_release", None)  # an earlier fixture layout
            rank["categories"] = _categories(CASES[doc["case"]], rank)
        path.write_text(json.dumps(doc, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None, help="case names (default: all)")
    parser.add_argument("--out", type=Path, default=FIXTURES)
    parser.add_argument("--port", type=int, default=29517)
    parser.add_argument("--recategorise", action="store_true", help="only recompute the fixtures' categories")
    args = parser.parse_args(argv)
    if args.recategorise:
        recategorise(args.out)
        return 0
    names = args.only or list(CASES)
    args.out.mkdir(parents=True, exist_ok=True)
    status = run_cases(names, args.out, args.port)
    print(json.dumps(status, indent=1), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
