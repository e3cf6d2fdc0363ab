"""One JSON shape per concept across every command (issue 27, "one concept has several JSON shapes or
names"; the shapes are documented once in docs/output.md, "One shape per concept").

Every command runs with --json; then each concept, wherever its key appears in any document, must have
the same keys and value types: `gpu` the GPU object, `model`, `plan` (the same fields everywhere), the
whole-bill fit (`fits`, `headroom_bytes`, `verdict`), a row's fit (`fit` beside `fits`), `per_gpu`
(a byte table: integers, named as a bill's), `time`, and byte figures (`*_bytes` integers).

The expected key sets are not memdoc's output copied: the GPU's are the fields the catalog holds for
every card (`memdoc/data/gpus.yaml`), the plan's are `TrainingPlan`'s dataclass fields, the fit words
are the `Fit` enum's, and every other expectation is one command's object compared with the others'.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from conftest import invoke

from memdoc.core.billing.inference import InferencePlan
from memdoc.core.billing.verdict import Fit
from memdoc.core.model.plan import TrainingPlan

MODEL = "meta-llama/Llama-3.1-8B"
FAST = {
    "bill": ["bill", MODEL, "--gpu", "24"],
    "bill --inference": ["bill", MODEL, "--gpu", "24", "--inference"],
    "bill --inference (ladder)": ["bill", "meta-llama/Llama-3.1-70B", "--gpu", "24", "--inference"],
    "bill (multi-GPU)": ["bill", MODEL, "--gpu", "h100-sxm", "--gpus", "8", "--shard", "fsdp"],
    "plan": ["plan", MODEL, "--gpu", "h100-sxm", "--gpus", "8", "--top", "2"],
    "plan (hardware)": ["plan", MODEL, "--gpu", "h100-sxm", "--gpu", "24", "--top", "2"],
    "emit": ["emit", MODEL, "--gpu", "24", "--format", "trl"],
    "prescribe": ["prescribe", "--symptom", "long-sample-oom", MODEL, "--gpu", "24"],
    "prescribe (inference)": ["prescribe", "--symptom", "inference-oom", MODEL, "--gpu", "24", "--batch", "8"],
    "models": ["models"],
    "gpus": ["gpus"],
}
SLOW = {
    "diagnose MODEL": ["diagnose", "Qwen/Qwen2.5-0.5B", "--gpu", "24"],
    "diagnose MODEL --inference": ["diagnose", "Qwen/Qwen2.5-0.5B", "--gpu", "24", "--inference"],
    "diagnose SCRIPT": ["diagnose", "examples/plain_loop.py"],
}

GPU_KEYS = {"id": str, "name": str, "memory_bytes": int, "count": int}
MODEL_KEYS = {"id": str, "params": int, "trainable_params": (int, type(None))}
VERDICT_KEYS = {
    "fit": str,
    "fits": bool,
    "margin_bytes": int,
    "error_bytes": int,
    "close_call": bool,
    "min_memory_bytes": int,
    "error_source": str,
}
TIME_KEYS = {"step_seconds": float, "tokens_per_second": int, "tokens_per_second_all_gpus": int}
FIT_WORDS = {f.value for f in Fit}
PLAN_FIELDS = {f.name for f in dataclasses.fields(TrainingPlan)}
INFERENCE_PLAN_FIELDS = PLAN_FIELDS | {f.name for f in dataclasses.fields(InferencePlan)} - {"plan"}
"""An inference plan is the training plan's fields plus its own (`InferencePlan.to_dict`)."""
BYTE_ITEMS = {
    "weights",
    "gradients",
    "optimizer",
    "activations",
    "other",
    "kv_cache",
    "peak_allocated",
    "peak_reserved",
    "process_total",
}
"""The bare names a `per_gpu` byte table uses (the bill's line items and its totals)."""
BYTE_TABLES = (".per_gpu", ".billed", ".measured", ".traced", ".host", ".nvme", ".buffers", ".states")
"""The objects that map names to bytes (docs/output.md): only there is a byte figure named bare."""


def _documents(commands: dict) -> dict:
    out = {}
    for name, args in commands.items():
        result = invoke(*args, "--json")
        assert result.exit_code in (0, 3), f"{name}: {result.output[-500:]}"
        out[name] = json.loads(result.stdout)
    return out


def _objects(node, path=""):
    """(path, key, value, parent) of every key in a JSON document."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield path, key, value, node
            yield from _objects(value, f"{path}.{key}")
    elif isinstance(node, list):
        for item in node:
            yield from _objects(item, f"{path}[]")


def _typed(value, types) -> bool:
    return isinstance(value, types) and not (isinstance(value, bool) and types in (int, float))


def _check_keys(where: str, obj, expected: dict, problems: list, exact: bool = True):
    if not isinstance(obj, dict):
        problems.append(f"{where}: {type(obj).__name__}, not the object")
        return
    missing, extra = expected.keys() - obj.keys(), obj.keys() - expected.keys()
    if missing or (exact and extra):
        problems.append(f"{where}: keys missing {sorted(missing)}, extra {sorted(extra) if exact else []}")
    problems.extend(
        f"{where}.{k}: {type(obj[k]).__name__}" for k, t in expected.items() if k in obj and not _typed(obj[k], t)
    )


def shape_problems(documents: dict) -> list[str]:
    """Every place where a concept differs from its one shape."""
    problems: list[str] = []
    for command, document in documents.items():
        for path, key, value, parent in _objects(document):
            where = f"{command}: {path}.{key}"
            if key == "gpu" and value is not None and not path.endswith(".oom"):
                _check_keys(where, value, GPU_KEYS, problems)
            elif key == "model" and value is not None:
                _check_keys(where, value, MODEL_KEYS, problems)
            elif key == "plan" and value is not None and set(value) not in (PLAN_FIELDS, INFERENCE_PLAN_FIELDS):
                problems.append(f"{where}: fields differ from TrainingPlan's: {sorted(set(value) ^ PLAN_FIELDS)}")
            elif key == "verdict" and value is not None:
                _check_keys(where, value, VERDICT_KEYS, problems)
                if value.get("fit") not in FIT_WORDS:
                    problems.append(f"{where}.fit: {value.get('fit')!r} is not a Fit word")
            elif key == "time" and value is not None:
                _check_keys(where, value, TIME_KEYS, problems, exact=False)
            elif key == "per_gpu" and value is not None:
                _check_byte_table(where, value, problems)
            elif key == "fits":
                _check_fits(where, parent, problems)
            elif key.endswith("_bytes") and not (value is None or _typed(value, int)):
                problems.append(f"{where}: a byte figure that is {type(value).__name__}")
            elif key == "step_seconds" and not path.endswith(".time") and (parent.get("time") or {}).get(key) != value:
                problems.append(f"{where}: a step time outside a `time` object")
            elif key in BYTE_ITEMS and _typed(value, int) and not path.endswith(BYTE_TABLES) and ".phases" not in path:
                _check_alias(where, key, parent, problems)
    return problems


def _check_byte_table(where: str, table, problems: list):
    names = BYTE_ITEMS | {"fragmentation_bytes", "overhead_bytes", "min_memory_bytes"}
    if not isinstance(table, dict):
        problems.append(f"{where}: {type(table).__name__}, not a byte table")
        return
    problems.extend(f"{where}.{k}: not a bill figure" for k in table if k not in names)
    problems.extend(f"{where}.{k}: {type(v).__name__}" for k, v in table.items() if not _typed(v, int))


def _check_fits(where: str, parent: dict, problems: list):
    """`fits` never stands alone: a row carries the `fit` word, a whole bill its `verdict` and headroom."""
    if "fit" in parent:
        if parent["fit"] is not None and parent["fit"] not in FIT_WORDS:
            problems.append(f"{where}: fit {parent['fit']!r} is not a Fit word")
    elif not {"verdict", "headroom_bytes"} <= parent.keys():
        problems.append(f"{where}: `fits` without `fit` (a row) or `verdict` and `headroom_bytes` (a bill)")


def _check_alias(where: str, key: str, parent: dict, problems: list):
    """A bare byte name outside a byte table is only a kept alias of the row's `per_gpu` figure."""
    if (parent.get("per_gpu") or {}).get(key) != parent[key]:
        problems.append(f"{where}: a byte figure outside `per_gpu`")


def _same_plan_values(documents: dict) -> list[str]:
    """Enum spellings: every plan field takes values of one JSON type across commands."""
    types: dict[str, set] = {}
    for document in documents.values():
        for _, key, value, _ in _objects(document):
            if key == "plan" and isinstance(value, dict):
                for field, v in value.items():
                    if v is not None:
                        types.setdefault(field, set()).add(type(v).__name__)
    return [f"plan.{f}: {sorted(t)}" for f, t in types.items() if len(t) > 1]


@pytest.fixture(scope="module")
def fast_documents():
    return _documents(FAST)


def test_every_concept_has_one_shape(fast_documents):
    assert shape_problems(fast_documents) == []
    assert _same_plan_values(fast_documents) == []


def test_every_command_names_the_concepts_it_reports(fast_documents):
    """The commands that bill against a GPU all carry the GPU object, the model and the whole-bill fit."""
    for name in ("bill", "bill --inference", "bill (multi-GPU)", "emit"):
        document = fast_documents[name]
        assert {"gpu", "model", "plan", "per_gpu", "fits", "headroom_bytes", "verdict"} <= document.keys(), name
    for name in ("prescribe", "prescribe (inference)"):
        assert {"fits", "headroom_bytes", "verdict"} <= fast_documents[name]["bill"].keys(), name
    # the inference bill's verdict names its own evidence, as `bill --inference` does
    inference_source = fast_documents["bill --inference"]["verdict"]["error_source"]
    assert fast_documents["prescribe (inference)"]["bill"]["verdict"]["error_source"] == inference_source
    for row in fast_documents["plan (hardware)"]["hardware"]:
        assert {"gpu", "fit", "fits", "time", "per_gpu"} <= row.keys()
    assert fast_documents["bill (multi-GPU)"]["gpu"]["count"] == 8


def test_the_catalog_gpus_are_gpu_objects_and_more(fast_documents):
    """`memdoc gpus` lists every card as the GPU object plus its catalog fields."""
    for card in fast_documents["gpus"]:
        assert GPU_KEYS.keys() <= card.keys()
        assert all(_typed(card[k], t) for k, t in GPU_KEYS.items())


@pytest.mark.slow
def test_diagnose_shapes_match_the_other_commands(fast_documents):
    documents = _documents(SLOW)
    assert shape_problems(documents) == []
    assert _same_plan_values(fast_documents | documents) == []
    for name in ("diagnose MODEL", "diagnose MODEL --inference"):
        assert documents[name]["gpu"] == fast_documents["bill"]["gpu"], name
