"""Issue 16, hostile scripts: whatever a diagnosed script does to the process, memdoc prints one
report first and ends with the documented status (README "Exit status of diagnose").

Each case runs `python -m memdoc diagnose SCRIPT --json` in a subprocess (the cases end, fork or
wedge the process), with a wall-clock limit that fails the test instead of hanging it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest
from conftest import ROOT

pytest.importorskip("torch")

pytestmark = pytest.mark.slow  # subprocesses: each case runs `python -m memdoc diagnose`


# A tiny training loop: 2 steps are what memdoc waits for (--steps 2).
STEP = """
import torch
model = torch.nn.Linear(8, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
def step():
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
    opt.zero_grad()
"""


def diagnose(tmp_path, body: str, *flags: str, limit: float = 60):
    script = tmp_path / "train.py"
    script.write_text(STEP + textwrap.dedent(body))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "memdoc", "diagnose", str(script), "--json", *flags],
        capture_output=True,
        text=True,
        timeout=limit,
        env=env,
        cwd=tmp_path,
    )
    return proc, time.monotonic() - start


def reports(stdout: str) -> list[dict]:
    """Every JSON report in stdout (there must be exactly one)."""
    decoder, out, i = json.JSONDecoder(), [], 0
    while True:
        i = stdout.find("{", i)
        if i < 0:
            return out
        obj, i = decoder.raw_decode(stdout, i)
        out.append(obj)


@pytest.mark.parametrize(
    "name,body,flags,status,stop_reason",
    [
        ("os._exit", "step()\nimport os\nos._exit(5)\n", (), 5, "exit"),
        ("KeyboardInterrupt", "step()\nraise KeyboardInterrupt\n", (), 130, "interrupted"),
        (
            "non-daemon thread",
            "import threading, time\nthreading.Thread(target=time.sleep, args=(600,)).start()\nstep(); step()\n",
            (),
            0,
            "steps",
        ),
        (
            "fork",
            "import os\npid = os.fork()\nif pid == 0:\n    step()\nelse:\n    os.waitpid(pid, 0)\n    step(); step()\n",
            (),
            0,
            "steps",
        ),
        ("closes stdout", "import sys\nsys.stdout.close()\nstep(); step()\n", (), 0, "steps"),
        (
            "swallows the stop",
            "import time\nwhile True:\n    try:\n        time.sleep(0.05)\n    except BaseException:\n        pass\n",
            ("--timeout", "1"),
            0,
            "timeout",
        ),
        # issue 27: the script closes the descriptor itself, or raises what `except Exception` does not catch
        ("closes fd 1", "import os\nstep()\nos.close(1)\nstep()\n", (), 0, "steps"),
        ("custom BaseException", "class Boom(BaseException):\n    pass\nstep()\nraise Boom('x')\n", (), 1, "error"),
        # Python's own status for it: the text is printed and the status is 1
        ("SystemExit text", "step()\nraise SystemExit('bye')\n", (), 1, "exit"),
        (
            "ignores SIGALRM",
            "import signal, time\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\nwhile True:\n    time.sleep(0.05)\n",
            ("--timeout", "1"),
            0,
            "timeout",
        ),
    ],
)
def test_one_report_then_the_documented_status(tmp_path, name, body, flags, status, stop_reason):
    proc, took = diagnose(tmp_path, body, *flags)
    assert "internal error" not in proc.stderr, proc.stderr
    found = reports(proc.stdout)
    assert len(found) == 1, (name, proc.stdout, proc.stderr)
    assert found[0]["stop_reason"] == stop_reason, found[0]
    assert proc.returncode == status, (name, proc.returncode, proc.stderr)
    assert took < 45


def test_script_report_reads_at_80_columns(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(STEP + "for _ in range(3):\n    step()\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "COLUMNS": "80"}
    proc = subprocess.run(
        [sys.executable, "-m", "memdoc", "diagnose", str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Findings" in proc.stdout and "amp-off" in proc.stdout
    for line in proc.stdout.splitlines():
        assert len(line) <= 80 and line == line.rstrip() or set(line) <= {" "}, repr(line)


STEPPED = """
step()
open("stepped", "w").close()
import time
"""


@pytest.mark.parametrize(
    "name,loop,note",
    [
        ("waits", "while True:\n    time.sleep(0.05)\n", None),
        (
            "swallows the stop",
            "while True:\n    try:\n        time.sleep(0.05)\n    except BaseException:\n        pass\n",
            "ignored",
        ),
    ],
)
def test_sigterm_from_outside_still_reports(tmp_path, name, loop, note):
    """`timeout`, a scheduler or `docker stop` sends SIGTERM: the report of what ran, then exit 143 (128 + 15)."""
    import signal

    script = tmp_path / "train.py"
    script.write_text(STEP + STEPPED + loop)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "memdoc", "diagnose", str(script), "--json", "--steps", "5"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    deadline = time.monotonic() + 60
    while not (tmp_path / "stepped").exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    found = reports(stdout)
    assert len(found) == 1, (stdout, stderr)
    assert found[0]["stop_reason"] == "terminated" and found[0]["stopped_after_steps"] == 1, found[0]
    assert proc.returncode == 143, stderr
    assert "Traceback" not in stderr
    if note:
        assert any(note in n for n in found[0]["notes"]), found[0]["notes"]
