"""Wall time of the torch-free commands, next to `import torch` for scale.

    python benchmarks/speed.py

Each command runs 5 times in a fresh interpreter; the median wall time is printed.
"""

import statistics
import subprocess
import sys
import time

COMMANDS = [
    (
        "memdoc bill meta-llama/Llama-2-7b --gpu 24",
        [sys.executable, "-m", "memdoc", "bill", "meta-llama/Llama-2-7b", "--gpu", "24"],
    ),
    (
        "memdoc bill ... --json",
        [sys.executable, "-m", "memdoc", "bill", "meta-llama/Llama-2-7b", "--gpu", "24", "--json"],
    ),
    (
        "memdoc plan meta-llama/Llama-3.1-8B --gpu 24",
        [sys.executable, "-m", "memdoc", "plan", "meta-llama/Llama-3.1-8B", "--gpu", "24"],
    ),
    (
        "memdoc plan ... --gpu h100-sxm --gpus 8",
        [
            sys.executable,
            "-m",
            "memdoc",
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
    (
        "memdoc prescribe --symptom mid-run-oom",
        [sys.executable, "-m", "memdoc", "prescribe", "--symptom", "mid-run-oom"],
    ),
    ("memdoc models", [sys.executable, "-m", "memdoc", "models"]),
    ("memdoc gpus", [sys.executable, "-m", "memdoc", "gpus"]),
    ('python -c "import torch"', [sys.executable, "-c", "import torch"]),
]


def main() -> None:
    for label, argv in COMMANDS:
        times = []
        for _ in range(5):
            start = time.perf_counter()
            subprocess.run(argv, capture_output=True, check=False)
            times.append(time.perf_counter() - start)
        print(f"{label:45} {statistics.median(times):6.3f} s")


if __name__ == "__main__":
    main()
