"""Wall time and peak RSS of fake-tensor dry runs (full bf16, batch 1 × 2048, AdamW).

Each model runs in a fresh subprocess so that its peak RSS is its own (imports included).
Usage: python benchmarks/trace_speed.py [--method lora] [--seq 2048]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODELS = ("meta-llama--Llama-3.2-1B", "meta-llama--Llama-2-7b-hf", "meta-llama--Llama-2-70b-hf")

CHILD = r"""
import json, resource, sys, time
t0 = time.perf_counter()
from memdoc.core.model.plan import parse_plan
from memdoc.probe.tracer import trace_training_step
config = json.load(open(sys.argv[1]))
m = trace_training_step(config, parse_plan(**json.loads(sys.argv[2])))
print(json.dumps({"wall_s": time.perf_counter() - t0,
                  "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "peak": m.peak_allocated, "phase": m.peak_phase, "notes": m.notes}))
"""


def config_path(name: str) -> Path:
    for folder in (ROOT / "memdoc" / "data" / "catalog", Path("/work/shared/hf-configs")):
        if (folder / f"{name}.json").is_file():
            return folder / f"{name}.json"
    raise SystemExit(f"no config for {name}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--method", default="full")
    parser.add_argument("--seq", type=int, default=2048)
    args = parser.parse_args()
    plan = json.dumps({"method": args.method, "seq_len": args.seq, "micro_batch": 1})
    print(f"{'model':32} {'wall s':>7} {'peak RSS MiB':>13} {'traced peak GiB':>16}  phase")
    for name in MODELS:
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(config_path(name)), plan],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        )
        if out.returncode:
            print(f"{name:32} failed: {out.stderr.strip().splitlines()[-1]}")
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{name:32} {r['wall_s']:7.1f} {r['rss_mib']:13.0f} {r['peak'] / 2**30:16.2f}  {r['phase']}")


if __name__ == "__main__":
    main()
