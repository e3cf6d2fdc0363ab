"""The trainers' registry and key tables: every format answers every knob it is asked about with its own keys, a
refusal or a nearest format (never another trainer's keys); each table reads back what it writes; the readers and
writers spell no key of their table themselves; a new format is one folder and one registry line."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import re
from pathlib import Path

import pytest

from memdoc.core.model.plan import TrainingPlan, parse_plan
from memdoc.core.model.stack import latest_known_stack
from memdoc.core.trainers import registry
from memdoc.core.trainers.base import EmitContext, Emitted, SideFile
from memdoc.core.trainers.detect import detect_format, read_document
from memdoc.core.trainers.emit import emit
from memdoc.core.trainers.reading import ConfigReading, SourceDoc
from memdoc.core.trainers.table import Key, KeyTable
from memdoc.errors import PlanError

ROOT = Path(__file__).resolve().parents[3] / "memdoc" / "core" / "trainers"

ASKED = {
    "packing": dict(packing=True),
    "cp": dict(gpus_per_node=8, cp=2, shard="fsdp2"),
    "cp-ulysses": dict(gpus_per_node=8, cp=2, cp_impl="ulysses", shard="fsdp2"),
    "tp": dict(gpus_per_node=8, tp=2, shard="fsdp2"),
    "tp-zero3": dict(gpus_per_node=8, tp=2, shard="zero3"),
    "tiled-mlp": dict(tiled_mlp=4),
}
"""The knobs a format answers beyond its plain keys (`Format.packing_keys`, `check_parallel`, `add_parallel_keys`)."""


def _tables(name: str) -> list[KeyTable]:
    module = importlib.import_module(f"memdoc.core.trainers.{name}.keys")
    return [v for v in vars(module).values() if isinstance(v, KeyTable)]


def _own_keys(name: str) -> set[str]:
    """Every key of the trainer's tables (and of accelerate's, for the FSDP side file TRL and HF write)."""
    keys = {k for table in _tables(name) for k in table.keys()}
    return keys | ({k for table in _tables("accelerate") for k in table.keys()} if name in ("trl", "hf") else set())


def _answer(fmt, plan: TrainingPlan) -> tuple[str, set[str]]:
    """('keys', the keys written) or ('refusal', the error text) for the format's answer to `plan`."""
    try:
        notes: list[str] = []
        keys = set(fmt.packing_keys(plan, notes))
        fmt.check_parallel(plan)
        emitted = Emitted(fmt.name, {}, "launch", side_files=[SideFile("fsdp.yaml", {"distributed_type": "FSDP"}, "")])
        fmt.add_parallel_keys(plan, emitted)
    except PlanError as error:
        return "refusal", {f"{error} {error.hint or ''}"}
    side = {k for f in emitted.side_files for k in f.data if k != "distributed_type"}
    return "keys", keys | set(emitted.config) | side


@pytest.mark.parametrize("asked", list(ASKED))
@pytest.mark.parametrize("name", registry.FORMATS)
def test_every_format_answers_every_knob_with_its_keys_or_a_nearest(name, asked):
    fmt = registry.format_of(name)
    kind, answer = _answer(fmt, parse_plan(**ASKED[asked]))
    if kind == "refusal":
        text = answer.pop()
        assert "nearest" in text or "--format" in text or "--shard" in text, text
    else:
        assert answer, f"{name} answers --{asked} with no key and no refusal"
        assert answer <= _own_keys(name), f"{name} writes keys of no table of its own: {answer - _own_keys(name)}"


def test_the_completeness_check_catches_a_fall_through():
    """A format that borrowed LLaMA-Factory's packing keys (the old fall-through) fails the check above."""
    fmt = registry.format_of("axolotl")
    borrowed = dataclasses.make_dataclass("Borrowed", [])
    borrowed.name, borrowed.check_parallel = "axolotl", fmt.check_parallel
    borrowed.add_parallel_keys = fmt.add_parallel_keys
    borrowed.packing_keys = lambda plan, notes: registry.format_of("llamafactory").packing_keys(plan, notes)
    _, keys = _answer(borrowed, parse_plan(packing=True))
    assert not keys <= _own_keys("axolotl")


def _every_table():
    for trainer in registry.TRAINERS:
        for table in _tables(trainer.name):
            for row in table:
                yield pytest.param(table, row, id=f"{trainer.name}:{table.block or 'top'}:{row.id}")


@pytest.mark.parametrize("table,row", list(_every_table()))
def test_each_row_reads_back_what_it_writes(table, row):
    """The round trip is a property of the table: read(write(v)) == v for every plan value a row maps, the map is
    one-to-one, and an alias reads as a value the row writes."""
    assert row.key.startswith(f"{table.block}.") if table.block else "." not in row.key
    for value in row.values:
        assert row.read(row.write(value)) == value
    assert len(set(row.values.values())) == len(row.values)
    assert set(row.aliases.values()) <= set(row.values) | set(row.reading().values())
    assert table.version_of(row.id)


def test_a_table_refuses_two_rows_of_one_name():
    with pytest.raises(ValueError):
        KeyTable("x", "1", (Key("seq_len", "a"), Key("seq_len", "b")))


def test_a_row_names_its_older_spelling():
    row = registry.trainer("trl").keys.row("seq_len")
    assert row.key_at(None) == row.key_at("1.16.0") == "max_length" and row.key_at("0.19.0") == "max_seq_length"


# ---------------------------------------------------------------------------------------------
# no key spelled outside its table

_READERS = ("get", "pop", "error", "get_bool", "get_int", "get_float", "get_str", "get_mapping", "get_choice")


def _table_or_plan(node: ast.AST) -> bool:
    """`KEYS[...]` (a table lookup) or `reading.plan[...]` (a plan field, not a key)."""
    return (isinstance(node, ast.Name) and node.id.isupper()) or (
        isinstance(node, ast.Attribute) and node.attr == "plan"
    )


def _spelled_keys(path: Path, keys: set[str]) -> list[tuple[int, str]]:
    """String literals in key positions (a dict key, a subscript, the key argument of a getter, `fail`, `skip` or
    `set`) that are keys of the trainer's tables: a key the module spells instead of looking it up."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        spots = []
        if isinstance(node, ast.Dict):
            spots = node.keys
        elif isinstance(node, ast.Subscript) and not _table_or_plan(node.value):
            spots = [node.slice]
        elif isinstance(node, ast.Call):
            fn = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if fn in ("get", "pop", "error") and node.args:
                spots = node.args[:1]
            elif fn in (*_READERS, "fail", "skip", "set") and len(node.args) > 1:
                spots = node.args[1:2]
        found += [(s.lineno, s.value) for s in spots if isinstance(s, ast.Constant) and s.value in keys]
    return found


@pytest.mark.parametrize("name", [t.name for t in registry.TRAINERS])
def test_readers_and_writers_spell_no_key_of_their_table(name):
    keys = {k for table in _tables(name) for k in table.keys()}
    spelled = {
        path.name: hits
        for path in sorted((ROOT / name).glob("*.py"))
        if path.name not in ("keys.py", "__init__.py") and (hits := _spelled_keys(path, keys))
    }
    assert spelled == {}


def test_the_spelled_key_finder():
    source = 'x = {"max_length": 1}\ny = KEYS["max_length"]\nget_int(doc, "max_length")\n'
    path = Path("/tmp/memdoc_spelled_key_probe.py")
    path.write_text(source)
    assert _spelled_keys(path, {"max_length"}) == [(1, "max_length"), (3, "max_length")]


# ---------------------------------------------------------------------------------------------
# a new format: one folder, one registry line

TOY_KEYS = KeyTable("toy", "0.1.0", (Key("model", "toy_model"), Key("seq_len", "toy_len"), Key("packing", "toy_pack")))


class Toy:
    """What a folder `memdoc/core/trainers/toy/` would hold, in one class."""

    name = "toy"
    version = "0.1.0"
    keys = TOY_KEYS
    document = "toy"
    detect_rank = 0
    emits = True
    seq_len_key = TOY_KEYS["seq_len"]

    def looks_like(self, data: dict) -> bool:
        return TOY_KEYS["model"] in data

    def read(self, doc: SourceDoc, stack) -> ConfigReading:
        reading = ConfigReading(formats=["toy"], model=doc.data[TOY_KEYS["model"]])
        if TOY_KEYS["seq_len"] in doc.data:
            reading.set(doc, TOY_KEYS["seq_len"], "seq_len", doc.data[TOY_KEYS["seq_len"]])
        return reading

    def default_filename(self, task: str) -> str:
        return "toy.yaml"

    def emit(self, ctx: EmitContext) -> Emitted:
        config = {TOY_KEYS["model"]: ctx.model_id, TOY_KEYS["seq_len"]: ctx.plan.seq_len}
        config.update(self.packing_keys(ctx.plan, []))
        return Emitted("toy", config, f"toy train {ctx.config_arg}")

    def packing_keys(self, plan, notes):
        return {TOY_KEYS["packing"]: True} if plan.packing else {}

    def check_parallel(self, plan):
        if plan.cp > 1 or plan.tp > 1 or plan.tiled_mlp > 1:
            raise PlanError("--format toy cannot express --cp, --tp or --tiled-mlp; nearest: --format axolotl")

    def add_parallel_keys(self, plan, emitted):
        pass

    def kbit_notes(self, plan):
        return []

    def loss_note(self, plan, stack=None):
        return None


def test_a_new_format_is_one_folder_and_one_registry_line(monkeypatch):
    monkeypatch.setattr(registry, "TRAINERS", (*registry.TRAINERS, Toy()))  # the one line
    assert "toy" in registry.formats() and registry.default_filename("toy") == "toy.yaml"
    plan = parse_plan(seq_len=2048, packing=True)
    emitted = emit("toy", EmitContext(model_id="org/model", plan=plan, peak_allocated=1, process_total=2))
    assert emitted.config == {"toy_model": "org/model", "toy_len": 2048, "toy_pack": True}
    doc = SourceDoc("toy.yaml", dict(emitted.config))
    assert detect_format(doc) == "toy"
    assert read_document(doc, latest_known_stack()).plan == {"seq_len": 2048}
    for asked in ASKED.values():
        kind, answer = _answer(registry.format_of("toy"), parse_plan(**asked))
        assert kind == "refusal" or answer <= TOY_KEYS.keys()
    assert registry.how(seq_len=512)["toy"] == {"toy_len": 512}


def test_the_recipe_in_extending_md_names_the_files_every_format_folder_has():
    """docs/extending.md's trainer recipe lists a folder's files; every format's folder has each of them."""
    text = (ROOT.parents[2] / "docs" / "extending.md").read_text(encoding="utf-8")
    recipe = text.split("## A trainer format", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"\*\*`(?:memdoc/core/trainers/<format>/)?([a-z_]+\.py)`\*\*", recipe))
    assert {"keys.py", "read.py", "write.py", "facts.py", "__init__.py"} <= named
    for name in registry.FORMATS:
        assert named <= {p.name for p in (ROOT / name).glob("*.py")}, name
