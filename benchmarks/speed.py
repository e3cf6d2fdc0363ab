"""Wall time of the torch-free commands, next to `import torch` for scale.

    python benchmarks/speed.py [--runs N] [--match TEXT ...]

Each command runs N times (default 7) in a fresh interpreter, as a user types it; the minimum and the
median wall time are printed, and the least CPU time of a run (on a shared machine the minima are the
figures to compare: other load only adds). Python writes its bytecode to a temporary
PYTHONPYCACHEPREFIX after one warm-up run, so the times are those of an installed memdoc even where
PYTHONDONTWRITEBYTECODE is set (compiling memdoc's sources on every run adds ~40 ms). The issue-25
targets on 2 cores: `bill` ≤ 0.3 s and `plan` ≤ 1 s for Llama-3.1-70B on 8 × H100.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

MEMDOC = [sys.executable, "-m", "memdoc"]
COMMANDS = [
    ("memdoc bill meta-llama/Llama-2-7b --gpu 24", [*MEMDOC, "bill", "meta-llama/Llama-2-7b", "--gpu", "24"]),
    ("memdoc bill meta-llama/Llama-3.1-8B --gpu 24", [*MEMDOC, "bill", "meta-llama/Llama-3.1-8B", "--gpu", "24"]),
    ("memdoc bill ... --json", [*MEMDOC, "bill", "meta-llama/Llama-2-7b", "--gpu", "24", "--json"]),
    (
        "memdoc bill meta-llama/Llama-3.1-70B --gpu 8xh100",
        [*MEMDOC, "bill", "meta-llama/Llama-3.1-70B", "--gpu", "8xh100"],
    ),
    ("memdoc plan meta-llama/Llama-3.1-8B --gpu 24", [*MEMDOC, "plan", "meta-llama/Llama-3.1-8B", "--gpu", "24"]),
    (
        "memdoc plan meta-llama/Llama-3.1-70B --gpu 8xh100",
        [*MEMDOC, "plan", "meta-llama/Llama-3.1-70B", "--gpu", "8xh100"],
    ),
    (
        "memdoc plan 8B --gpu h100-sxm --gpus 8 (gb 256, seq 4096)",
        [
            *MEMDOC,
            "plan",
            "meta-llama/Llama-3.1-8B",
            "--gpu",
            "h100-sxm",
            "--gpus",
            "8",
            "--global-batch",
            "256",
            "--seq",
            "4096",
        ],
    ),
    ("memdoc prescribe --symptom mid-run-oom", [*MEMDOC, "prescribe", "--symptom", "mid-run-oom"]),
    ("memdoc models", [*MEMDOC, "models"]),
    ("memdoc gpus", [*MEMDOC, "gpus"]),
    ('python -c "import torch"', [sys.executable, "-c", "import torch"]),
]


def _child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def wall_times(argv: list[str], runs: int, env: dict[str, str]) -> tuple[list[float], list[float]]:
    """(wall seconds, CPU seconds) of each of `runs` runs of `argv` (after one warm-up run that writes the
    bytecode). CPU time (user + system) moves less than wall time when other processes share the cores."""
    subprocess.run(argv, capture_output=True, check=False, env=env)
    walls, cpus = [], []
    for _ in range(runs):
        cpu, start = _child_cpu(), time.perf_counter()
        subprocess.run(argv, capture_output=True, check=False, env=env)
        walls.append(time.perf_counter() - start)
        cpus.append(_child_cpu() - cpu)
    return walls, cpus


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="runs per command (default 7)")
    parser.add_argument("--match", nargs="*", default=[], help="only the commands whose label contains one of these")
    args = parser.parse_args()
    runs = args.runs
    commands = [(label, argv) for label, argv in COMMANDS if not args.match or any(m in label for m in args.match)]
    with tempfile.TemporaryDirectory(prefix="memdoc-speed-") as pycache:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env |= {"PYTHONPYCACHEPREFIX": pycache, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        print(f"{'command':58} {'min':>7} {'median':>7} {'cpu min':>8}   ({runs} runs, {os.cpu_count()} CPUs)")
        for label, argv in commands:
            times, cpus = wall_times(argv, runs, env)
            print(f"{label:58} {min(times):6.3f}s {statistics.median(times):6.3f}s {min(cpus):7.3f}s", flush=True)


if __name__ == "__main__":
    main()
