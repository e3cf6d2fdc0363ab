"""`make drift`: the newest releases of the libraries memdoc reads, in a scratch venv, and the tests that read
their installed sources or census their real modules. Not part of `make test` (it downloads; minutes).

    .venv/bin/python scripts/drift.py                           # every watched library at its newest release
    .venv/bin/python scripts/drift.py --only transformers       # only that one moves; the rest stay locked
    .venv/bin/python scripts/drift.py --pin transformers==5.24.0 --keep
    .venv/bin/python scripts/drift.py --keep --test tests/unit/model/test_stack.py   # only that test file

The venv (`.drift-venv`, gitignored) gets requirements/lock.txt with --no-deps, memdoc itself (editable), then
the watched libraries upgraded. torch stays the locked CPU wheel (a constraint), so pip never pulls a CUDA
build. It prints the packages whose version moved from the lock, runs `TESTS`, and groups the failures by file
with the first line of each assertion: the facts that moved. Exit 0 when no test fails, 1 when one does,
2 when the venv could not be built (docs/extending.md, "When a library releases").
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements" / "lock.txt"
VENV = ROOT / ".drift-venv"

WATCHED = {
    "transformers": True,
    "accelerate": True,
    "trl": True,
    "peft": True,
    "deepspeed": True,
    "liger-kernel": False,
    "axolotl": False,
    "llamafactory": False,
}
"""The libraries whose behaviour memdoc reads -> upgraded with their dependencies (only where a new release
needs a newer one)? axolotl, llamafactory and liger-kernel pin versions that conflict with ours, so they are
upgraded with --no-deps, as requirements/nodeps.in locks them."""

TESTS = {
    # Census real modules: saved tensors per layer of every family's real transformers modelling code.
    "tests/fidelity/test_activations_census.py": "activations of the text families, counted in the real modules",
    "tests/fidelity/test_vision_census.py": "vision towers' activations, counted in the real modules",
    "tests/unit/model/test_families.py": "the family registry against transformers' configs and modelling",
    "tests/unit/model/test_params.py": "parameter counts against real models built on the meta device",
    "tests/unit/model/test_vision_params.py": "VLM parameter counts per part against real models on meta",
    # The stack memdoc knows: LATEST_KNOWN against the installed versions and the lock.
    "tests/unit/model/test_stack.py": "LATEST_KNOWN, the version rules, the installed trainers' defaults",
    # Trainers' own parsers accept what emit writes (TRL, transformers, accelerate, DeepSpeed, Axolotl, LF).
    "tests/fidelity/test_emit.py": "emitted configs parsed by the trainers; accelerate's FSDP keys read from source",
    "tests/fidelity/test_emit_fidelity.py": "emitted configs against the trainers' parsers; LF's templates",
    "tests/fidelity/test_emit_post.py": "post-training emit: TRL's scripts and Axolotl's schema, from source",
    "tests/fidelity/test_emit_post_train.py": "post-training emit parsed by TRL's configs",
    "tests/fidelity/test_emit_parallel.py": "multi-GPU emit parsed by accelerate and DeepSpeed",
    "tests/fidelity/test_emit_vision.py": "VLM emit; LLaMA-Factory's visual.py read from source",
    # Installed source lines: fixtures and rules that name a file, a line or a statement of a library.
    "tests/unit/doctor/test_posttrain_oom.py": "OOM fixtures whose frames name installed files and lines",
    "tests/unit/doctor/test_symptoms.py": "symptoms matched against the installed modules' sources",
    "tests/cli/test_config_stack.py": "TRL's fused LM head read from SFTTrainer's source",
    "tests/unit/billing/test_posttrain_scored.py": "GRPO's scored log-probs read from TRL's source",
    "tests/unit/remedies/test_post_ladder.py": "post-training remedies checked against TRL's files",
    "tests/unit/trainers/test_post_training.py": "Axolotl's GRPO trainer read from source",
}
"""The tests `make drift` runs under the newest releases -> why each is there. Keep to tests that read
installed sources or census real modules: the rest of the suite does not depend on a library's release."""


def run(cmd: list[str], env: dict | None = None, quiet: bool = True) -> int:
    """Run a command in ROOT; its output only shows when it fails (or with quiet=False)."""
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=quiet, text=True)
    if done.returncode and quiet:
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-4000:])
    return done.returncode


def lock_versions() -> dict[str, str]:
    """requirements/lock.txt -> {normalised name: version}."""
    pins = re.findall(r"^([A-Za-z0-9._-]+)==(\S+)", LOCK.read_text(encoding="utf-8"), re.MULTILINE)
    return {norm(name): version for name, version in pins}


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def build_venv(python: Path, keep: bool) -> bool:
    """A scratch venv holding the lock and memdoc (editable); with keep, an existing one is reused."""
    if keep and python.exists():
        print(f"reusing {VENV.relative_to(ROOT)}")
        return True
    shutil.rmtree(VENV, ignore_errors=True)
    print(f"building {VENV.relative_to(ROOT)} from {LOCK.relative_to(ROOT)} …", flush=True)
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps"]
    return not (
        run([sys.executable, "-m", "venv", str(VENV)])
        or run([*pip, "--require-hashes", "-r", str(LOCK)])
        or run([*pip, "--no-build-isolation", "-e", "."])
    )


def upgrade(python: Path, only: list[str], pins: list[str]) -> bool:
    """The watched libraries (or `only`) at their newest releases, `pins` exactly; torch kept at the lock."""
    pinned = {norm(re.split(r"[=<>!~ ]", pin, maxsplit=1)[0]): pin for pin in pins}
    names = [norm(n) for n in only] if only else list(WATCHED)
    specs = {name: pinned.get(name, name) for name in names} | pinned
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as constraints:
        constraints.write(f"torch=={lock_versions()['torch']}\n")
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--upgrade"]
    env = os.environ | {"DS_BUILD_OPS": "0"}
    with_deps = [spec for name, spec in specs.items() if WATCHED.get(name, True)]
    no_deps = [spec for name, spec in specs.items() if not WATCHED.get(name, True)]
    print(f"installing the newest of: {', '.join(specs.values())} …", flush=True)
    try:
        if with_deps and run([*pip, "--upgrade-strategy", "only-if-needed", "-c", constraints.name, *with_deps], env):
            return False
        return not (no_deps and run([*pip, "--no-deps", *no_deps], env))
    finally:
        os.unlink(constraints.name)


def moved_versions(python: Path) -> list[tuple[str, str, str]]:
    """(package, locked version, installed version) for every package whose version differs from the lock."""
    out = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=json", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    installed = {norm(item["name"]): item["version"] for item in json.loads(out)}
    locked = lock_versions()
    names = sorted((set(locked) | set(installed)) - {"memdoc", "pip", "setuptools"})
    return [
        (name, locked.get(name, "-"), installed.get(name, "-"))
        for name in names
        if locked.get(name) != installed.get(name)
    ]


def run_tests(python: Path, report: Path, chosen: list[str]) -> int:
    """pytest over TESTS (or the `chosen` of them) in the scratch venv, a JUnit report written to `report`."""
    wanted = chosen or list(TESTS)
    tests = [path for path in wanted if (ROOT / path).exists()]
    missing = sorted(set(wanted) - set(tests))
    if missing:
        print(f"not found (drop them from TESTS): {', '.join(missing)}")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"HF_HUB_OFFLINE": "1"}
    print(f"running {len(tests)} test files …", flush=True)
    cmd = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "junit_family=xunit1"]
    cmd += [f"--junitxml={report}", *tests]
    return run(cmd, env, quiet=False)


def failures(report: Path) -> dict[str, list[tuple[str, str]]]:
    """JUnit report -> {test file: [(test name, first line of its assertion or error)]}."""
    grouped: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for case in ET.parse(report).iter("testcase"):
        for bad in (*case.findall("failure"), *case.findall("error")):
            text = bad.get("message") or bad.text or ""
            lines = [line.strip() for line in text.splitlines() if line.strip()]
            path = case.get("file") or case.get("classname", "?").replace(".", "/") + ".py"
            grouped[path].append((case.get("name", "?"), lines[0][:160] if lines else bad.tag))
    return grouped


def summary(moved: list[tuple[str, str, str]], failed: dict[str, list[tuple[str, str]]]) -> None:
    print("\n== versions that moved from requirements/lock.txt ==")
    for name, old, new in moved:
        print(f"  {name:24} {old:>14} -> {new}")
    if not moved:
        print("  none: the lock holds the newest releases")
    print("\n== facts that moved (failing tests, by file) ==")
    for path, cases in sorted(failed.items()):
        print(f"  {path}  ({TESTS.get(path, 'not in TESTS')})")
        for name, line in cases:
            print(f"    {name}: {line}")
    if not failed:
        print("  none: every test that reads installed sources or censuses real modules passes")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="reuse .drift-venv if it exists")
    parser.add_argument("--only", action="append", default=[], metavar="PKG", help="upgrade only PKG (repeatable)")
    parser.add_argument("--pin", action="append", default=[], metavar="PKG==VER", help="install PKG at VER")
    parser.add_argument("--test", action="append", default=[], metavar="PATH", help="run only these test files")
    args = parser.parse_args(argv)
    unknown = [name for name in args.only if norm(name) not in WATCHED]
    if unknown:
        print(f"Error: --only {', '.join(unknown)}: not watched; known: {', '.join(WATCHED)}", file=sys.stderr)
        return 2
    python = VENV / "bin" / "python"
    if not build_venv(python, args.keep) or not upgrade(python, args.only, args.pin):
        print("Error: pip could not build the drift venv (its output is above)", file=sys.stderr)
        return 2
    moved = moved_versions(python)
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "drift.xml"
        code = run_tests(python, report, args.test)
        failed = failures(report) if report.exists() else {}
    summary(moved, failed)
    if code and not failed:
        print(f"  pytest exited {code} without a failing test (a collection or usage error above)")
    return 1 if code or failed else 0


if __name__ == "__main__":
    sys.exit(main())
