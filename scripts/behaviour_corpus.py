"""The behaviour corpus: what memdoc prints for every catalog model under eight plans, and every emit format.

A restructuring keeps behaviour: record the corpus before it, record it after, and compare.

    .venv/bin/python scripts/behaviour_corpus.py record /tmp/before.json
    .venv/bin/python scripts/behaviour_corpus.py record /tmp/after.json
    .venv/bin/python scripts/behaviour_corpus.py compare /tmp/before.json /tmp/after.json

`record` runs each command in-process (Typer's CliRunner) and keeps its exit code, its stdout (JSON for `bill`,
`plan`; the written files for `emit`) and the first line of its stderr. `compare` lists every entry that changed.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from typer.testing import CliRunner

from memdoc.cli import app

CATALOG = Path(__file__).resolve().parents[1] / "memdoc" / "data" / "catalog"

PLANS = {
    "full": ["--method", "full"],
    "lora": ["--method", "lora"],
    "qlora-ckpt": ["--method", "qlora", "--checkpointing", "full"],
    "zero3x8": ["--gpus", "8", "--shard", "zero3", "--method", "full"],
    "fsdp2x4-ckpt": ["--gpus", "4", "--shard", "fsdp2", "--method", "full", "--checkpointing", "full"],
    "offload-x2": ["--gpus", "2", "--offload", "optimizer", "--method", "full"],
    "dpo-lora": ["--method", "lora", "--task", "dpo"],
    "fused-b4s4096": ["--method", "full", "--batch", "4", "--seq", "4096", "--loss", "fused"],
}
EMIT_PLANS = ("lora", "qlora-ckpt", "zero3x8", "fsdp2x4-ckpt", "dpo-lora")
FORMATS = ("trl", "hf", "axolotl", "llamafactory")
EMIT_MODELS = ("meta-llama/Llama-3.1-8B", "Qwen/Qwen2.5-7B", "mistralai/Mistral-7B-v0.1")


def _models() -> list[str]:
    return sorted(path.stem.replace("--", "/", 1) for path in CATALOG.glob("*--*.json"))


def _run(runner: CliRunner, args: list[str]) -> dict:
    result = runner.invoke(app, args, env={"COLUMNS": "200", "NO_COLOR": "1"})
    stderr = (result.stderr or "").strip().splitlines()
    return {"rc": result.exit_code, "stdout": result.stdout, "stderr": stderr[0] if stderr else ""}


def _emit(runner: CliRunner, model: str, plan: str, fmt: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        entry = _run(runner, ["emit", model, "--gpu", "h100", "--format", fmt, "-o", str(out), *PLANS[plan]])
        entry["stdout"] = ""
        entry["stderr"] = entry["stderr"].replace(tmp, "<tmp>")
        entry["files"] = {
            str(path.relative_to(tmp)): path.read_text().replace(tmp, "<tmp>")
            for path in sorted(Path(tmp).rglob("*"))
            if path.is_file()
        }
    return entry


def record(target: Path) -> None:
    runner = CliRunner()
    corpus: dict[str, dict] = {}
    for model in _models():
        for name, flags in PLANS.items():
            corpus[f"bill {model} {name}"] = _run(runner, ["bill", model, "--gpu", "h100", *flags, "--json"])
    for model in EMIT_MODELS:
        for plan in EMIT_PLANS:
            for fmt in FORMATS:
                corpus[f"emit {model} {plan} {fmt}"] = _emit(runner, model, plan, fmt)
    target.write_text(json.dumps(corpus, indent=1, sort_keys=True))
    print(f"{target}: {len(corpus)} entries")


def compare(before: Path, after: Path) -> int:
    old, new = json.loads(before.read_text()), json.loads(after.read_text())
    changed = [key for key in sorted(set(old) | set(new)) if old.get(key) != new.get(key)]
    for key in changed:
        print(f"changed: {key}")
    print(f"{len(changed)} of {len(old)} entries changed")
    return 1 if changed else 0


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "record":
        record(Path(argv[1]))
        return 0
    if len(argv) == 3 and argv[0] == "compare":
        return compare(Path(argv[1]), Path(argv[2]))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
