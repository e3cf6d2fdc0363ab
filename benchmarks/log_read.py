"""Issue 27: `memdoc prescribe --log` on a 50 MB log, in MB/s (at least 20 required), end to end in a fresh process.

Two logs: OOM-dense (a loop that hit the same OOM on every step: tests/fixtures/oom-logs/step-n-logits.log
repeated) and sparse (50 MB of HF Trainer progress lines, the OOM at the very end).

    PYTHONPATH=. python benchmarks/log_read.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIZE = 50_000_000


def main() -> None:
    oom = (ROOT / "tests/fixtures/oom-logs/step-n-logits.log").read_text(encoding="utf-8")
    progress = "".join(
        f"{{'loss': 1.{i % 9999:04d}, 'grad_norm': 0.5, 'epoch': {i / 1000:.2f}}}\n" for i in range(5000)
    )
    logs = {"dense": oom * (SIZE // len(oom) + 1), "sparse": progress * (SIZE // len(progress) + 1) + oom}
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in logs.items():
            path = Path(tmp) / f"{name}.log"
            path.write_text(text, encoding="utf-8")
            best = float("inf")
            for _ in range(3):
                start = time.perf_counter()
                proc = subprocess.run(
                    [sys.executable, "-m", "memdoc", "prescribe", "--log", str(path), "--json"],
                    capture_output=True,
                    env=env,
                    check=False,
                )
                best = min(best, time.perf_counter() - start)
                assert proc.returncode == 0 and b'"long-sample-oom"' in proc.stdout, proc.stderr[-500:]
            mb = path.stat().st_size / 1e6
            print(f"{name}: {mb:.1f} MB in {best:.2f} s = {mb / best:.0f} MB/s (min of 3, process start included)")


if __name__ == "__main__":
    main()
