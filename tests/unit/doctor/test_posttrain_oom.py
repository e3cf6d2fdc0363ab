"""Post-training OOMs (issue 23, item 6): GRPO's generation and DPO's reference model, told from TRL's frames and
quantified on the plan."""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

import pytest

from memdoc.core.doctor.diagnosis import diagnose_oom
from memdoc.core.doctor.logtext import traceback_frames
from memdoc.core.doctor.oom_posttrain import posttrain_symptom
from memdoc.core.doctor.symptoms import get_symptom
from tests.conftest import invoke
from tests.unit.doctor.test_diagnosis import LOGS, fixture_log

SITE = Path(__import__("trl").__file__ if False else __import__("importlib.util").util.find_spec("trl").origin).parents[
    1
]
"""The installed site-packages (TRL 1.16, transformers 5.25, torch 2.13: requirements/lock.txt)."""
STDLIB = Path(sys.base_prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
POSTTRAIN_LOGS = ("grpo-generation-kv-cache", "dpo-reference-load")
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\w+)\n\s+(.+)')


def _installed(path: str) -> Path | None:
    """The installed file a fixture frame names (site-packages or the standard library); None for the script."""
    if "site-packages/" in path:
        return SITE / path.split("site-packages/", 1)[1]
    if "/lib/python3.11/" in path:
        return STDLIB / path.split("/lib/python3.11/", 1)[1]
    return None


def _enclosing_function(source: Path, line: int) -> str | None:
    """The innermost function of `source` whose body holds `line` (the name a traceback prints for it)."""
    inner = None
    for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno <= line <= node.end_lineno:
            if inner is None or node.lineno > inner.lineno:
                inner = node
    return inner.name if inner else None


@pytest.mark.parametrize("name", POSTTRAIN_LOGS)
def test_fixture_frames_are_the_installed_sources(name):
    """Every frame of the two logs is the installed file's line, in the function it names: written from the
    printing code paths, not invented."""
    frames = _FRAME.findall((LOGS / f"{name}.log").read_text(encoding="utf-8"))
    checked = 0
    for path, line, func, code in frames:
        source = _installed(path)
        if source is None:
            continue
        lines = source.read_text(encoding="utf-8").splitlines()
        assert lines[int(line) - 1].strip() == code.strip(), f"{source}:{line}"
        assert _enclosing_function(source, int(line)) == func, f"{source}:{line} is not in {func}"
        checked += 1
    assert checked >= 9


def test_trl_frames_decide_the_symptom():
    assert posttrain_symptom(traceback_frames(fixture_log("grpo-generation-kv-cache"))) == "rl-generation-oom"
    assert posttrain_symptom(traceback_frames(fixture_log("dpo-reference-load"))) == "reference-model-oom"
    # the same transformers frames without TRL's are plain generation and loading
    assert posttrain_symptom(traceback_frames(fixture_log("generate-sample"))) is None
    assert posttrain_symptom(traceback_frames(fixture_log("load-from-pretrained"))) is None
    # colocated vLLM under GRPO's generation: the pool's cause and fixes lead
    vllm = fixture_log("grpo-generation-kv-cache").replace(
        "transformers/generation/utils.py", "vllm/entrypoints/llm.py"
    )
    d = diagnose_oom(vllm)
    assert d.symptom.id == "rl-generation-oom" and d.causes[0].id == "rl-vllm-pool"
    assert d.rows[0].prescription.id == "rl-vllm-lower-memory"


def test_prescriptions_name_trls_own_config_keys():
    """Every `trl` switch of the two symptoms is a field of TRL 1.16's GRPOConfig, DPOConfig or ModelConfig."""
    configs = "".join((SITE / "trl" / "trainer" / f).read_text() for f in ("grpo_config.py", "dpo_config.py"))
    configs += (SITE / "trl" / "trainer" / "model_config.py").read_text()
    for symptom in ("rl-generation-oom", "reference-model-oom"):
        for p in get_symptom(symptom).prescriptions:
            for key in p.how.get("trl", {}):
                assert re.search(rf"^    {key}: ", configs, re.M), f"{p.id}: no {key!r} in TRL's configs"


def test_generation_oom_is_quantified_on_the_plan(tmp_path):
    """The log's run (Qwen2.5-7B LoRA, 256 completions of 512 + 4,096 tokens): a smaller generation batch (8, the
    smallest TRL accepts) frees the other 248 rows' KV cache, 2 × 28 layers × 512 × (512 + 4,096 − 1) × 2 bytes each
    (the last sampled token is never fed back), from the generation phase; the step's peak falls to the training
    phases, so the prescription saves less than that, and it fits."""
    path = tmp_path / "train.log"
    path.write_text(fixture_log("grpo-generation-kv-cache"), encoding="utf-8")
    flags = "--task grpo --method lora --batch 8 --accum 32 --seq 512 --completion-len 4096 --checkpointing full"
    res = invoke("prescribe", "Qwen/Qwen2.5-7B", "--log", path, "--gpu", "h100-sxm", *flags.split(), "--json")
    assert res.exit_code == 0, res.output
    rows = {r["id"]: r for r in json.loads(res.stdout)["prescriptions"]}
    assert rows["rl-smaller-generation-batch"]["saves_bytes"] > 0
    assert rows["rl-smaller-generation-batch"]["fits_alone"] is True
    assert "rl-vllm-sleep" not in rows  # sleep mode is colocated vLLM's: set apart, not ranked
    phases = {}
    for extra in ([], ["--generation-batch", "8"]):
        bill = invoke("bill", "Qwen/Qwen2.5-7B", "--gpu", "h100-sxm", *flags.split(), *extra, "--json")
        phases[bool(extra)] = json.loads(bill.stdout)["phases"]
    other_rows_cache = 248 * 2 * 28 * 512 * (512 + 4096 - 1) * 2
    assert phases[False]["generation"]["total"] - phases[True]["generation"]["total"] >= other_rows_cache
    assert phases[True]["backward"] == phases[False]["backward"]  # the training phases are untouched


def test_reference_oom_is_quantified_on_the_plan(tmp_path):
    """The log's run (Llama-3.1-8B DPO, full fine-tuning, 24 GB): precomputing the reference log-probs frees at least
    the reference's bf16 copy, 8.03 B parameters × 2 bytes."""
    path = tmp_path / "train.log"
    path.write_text(fixture_log("dpo-reference-load"), encoding="utf-8")
    res = invoke(
        "prescribe",
        "meta-llama/Llama-3.1-8B",
        "--log",
        path,
        "--task",
        "dpo",
        "--batch",
        "1",
        "--seq",
        "1024",
        "--json",
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["symptom"] == "reference-model-oom"
    rows = {r["id"]: r for r in out["prescriptions"]}
    assert rows["ref-precompute"]["saves_bytes"] >= 8.03e9 * 2
