"""The layout rules of the package, checked on its source with ast (only the command list is read
from the imported Typer app).

Imports flow one way (commands → probe/resolve/render/output → core), with no cycle between memdoc
modules — function-level and `if TYPE_CHECKING:` imports included —, and no import of another
module's private (`_name`) names.

Floors inside core/: model < plan < engines/trainers < billing < remedies < doctor < reports; a module
imports from its own floor or lower ones only (`CORE_FLOORS`, `core_floor`).

Size: no module over 500 lines, no function over 60 lines (def line to last line), no command
function over 40 lines, no module of memdoc/commands/ over 150 lines but the modules that only declare
options (`DECLARATION_MODULES`), except the allow-lists below, each entry naming why. Lines are counted on
the file as it is: `make test` runs `ruff format --check` first, so they are formatted lines.
An allow-list entry that is no longer needed fails `test_allow_lists_hold_only_real_exceptions`.
"""

from __future__ import annotations

import ast
import functools
import inspect
from pathlib import Path

import pytest
from conftest import ROOT as REPO

ROOT = REPO / "memdoc"
MAX_LINES = 500
MAX_FUNCTION_LINES = 60
MAX_COMMAND_LINES = 40
MAX_COMMAND_MODULE_LINES = 150
"""A command's whole module: parse, call one library function, render."""

LONG_MODULES: dict[str, str] = {}
"""`module`: why it may run over MAX_LINES."""
LONG_FUNCTIONS: dict[str, str] = {}
"""`module:qualified.name`: why the function may run over MAX_FUNCTION_LINES."""
LONG_COMMANDS: dict[str, str] = {}
"""`module:function` of a command: why its body may run over MAX_COMMAND_LINES."""
DECLARATION_MODULES: dict[str, str] = {
    "memdoc.commands.options": "the options several commands share, `PlanFlags` (one invocation's plan flags, "
    "resolved to a Setup) and the `plan_options` decorator that adds the plan flags to a command",
    "memdoc.commands.command_options": "each command's own options, a section per command",
    "memdoc.commands.plan_flags": "the plan flags (~60 options, one per TrainingPlan field) and their help panels",
    "memdoc.commands.plan_flags_post": "the post-training plan flags (--task and TRL's knobs)",
    "memdoc.commands.plan_flags_vision": "the vision-language plan flags (images, video, tower policies)",
}
"""Modules of memdoc/commands/ that declare options rather than run a command: exempt from
MAX_COMMAND_MODULE_LINES (an option is a few lines of help text, and commands share them)."""


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _import_nodes(tree: ast.AST):
    """Every import statement, at any depth: in functions and under `if TYPE_CHECKING:` too (a
    type-only cycle is still a cycle: the modules cannot be understood, or split, apart)."""
    return [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]


@functools.cache
def _tree(module: str) -> ast.Module:
    return ast.parse(MODULES[module].read_text(encoding="utf-8"))


def _resolve_from(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module if MODULES[module].name == "__init__.py" else module.rsplit(".", 1)[0]
    base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
    return f"{base}.{node.module}" if node.module else base


@functools.cache
def imports_of(module: str) -> list[tuple[str, list[str]]]:
    """(imported memdoc module, [names taken from it]) for each import in `module`."""
    out = []
    for node in _import_nodes(_tree(module)):
        if isinstance(node, ast.Import):
            out += [(alias.name, []) for alias in node.names if alias.name.startswith("memdoc")]
            continue
        target = _resolve_from(module, node)
        if not target.startswith("memdoc"):
            continue
        names = []
        for alias in node.names:
            if f"{target}.{alias.name}" in MODULES:
                out.append((f"{target}.{alias.name}", []))  # `from package import submodule`
            else:
                names.append(alias.name)
        if names:
            out.append((target, names))
    return out


@functools.cache
def import_graph() -> dict[str, set[str]]:
    """Module -> memdoc modules it imports (explicit edges only: a submodule importing a sibling
    does not count as importing the package's __init__, which would make every package that
    re-exports its submodules a cycle)."""
    graph = {}
    for module in MODULES:
        targets = set()
        for target, _ in imports_of(module):
            while target not in MODULES and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in MODULES and target != module:
                targets.add(target)
        graph[module] = targets
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                item = stack.pop()
                on_stack.discard(item)
                component.append(item)
                if item == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def test_cycle_finder_finds_a_function_level_cycle():
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_among_memdoc_modules():
    assert find_cycles(import_graph()) == []


def test_graph_sees_function_level_imports():
    # commands.bill imports its report inside its command function, not at module level
    assert "memdoc.core.reports.bill" in import_graph()["memdoc.commands.bill"]


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "memdoc"


def test_core_imports_nothing_above_it():
    allowed = {"core", "units", "errors", "data"}
    offenders = {
        module: sorted(t for t in targets if _layer(t) not in allowed)
        for module, targets in import_graph().items()
        if _layer(module) == "core"
    }
    assert {m: t for m, t in offenders.items() if t} == {}


CORE_FLOORS = ("model", "plan", "engines", "billing", "remedies", "doctor", "reports")
"""The floors inside core/, lowest first: a module imports only from its own floor or the ones below
(docs/architecture.md, "Floors inside core")."""
FLOOR_OF_PACKAGE = {
    "model": "model",
    "plan": "plan",
    "engines": "engines",
    "trainers": "engines",
    "billing": "billing",
    "remedies": "remedies",
    "doctor": "doctor",
    "reports": "reports",
}
"""core/'s packages by floor: the trainers' readers and writers (`trainers`) map plan values to and from files,
beside the engines."""
PLAN_IN_MODEL = {"lora"}
"""Modules of core/model/ on the plan floor besides `plan*.py` (it reads a `TrainingPlan` against a
`ModelSpec`): they move to core/plan/ with the plan's modules."""


def core_floor(module: str) -> str | None:
    """The floor of a core module (None outside core/): its package's floor, except that the plan's
    modules still in core/model/ (`plan*.py`, `PLAN_IN_MODEL`) are on the plan floor."""
    parts = module.split(".")
    if parts[:2] != ["memdoc", "core"] or len(parts) < 3:
        return None
    if parts[2] == "model" and len(parts) > 3 and (parts[3].startswith("plan") or parts[3] in PLAN_IN_MODEL):
        return "plan"
    return FLOOR_OF_PACKAGE[parts[2]]


def test_core_floor_mapping():
    assert core_floor("memdoc.core.model.plan_enums") == core_floor("memdoc.core.plan.enums") == "plan"
    assert core_floor("memdoc.core.model.gpu") == "model"
    assert core_floor("memdoc.core.trainers.trl.write") == core_floor("memdoc.core.engines.layout") == "engines"
    assert core_floor("memdoc.resolve.setup") is None


def test_every_core_package_has_a_floor():
    packages = {m.split(".")[2] for m in MODULES if m.startswith("memdoc.core.") and MODULES[m].parent != ROOT / "core"}
    assert packages <= set(FLOOR_OF_PACKAGE), "give the new core package a floor in FLOOR_OF_PACKAGE"
    assert set(FLOOR_OF_PACKAGE.values()) == set(CORE_FLOORS)
    moved = [m for m in PLAN_IN_MODEL if f"memdoc.core.model.{m}" not in MODULES]
    assert moved == [], "no longer in core/model/: remove from PLAN_IN_MODEL"


def floor_violations(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """Core module -> the core modules it imports from a higher floor."""
    rank = {floor: i for i, floor in enumerate(CORE_FLOORS)}
    offenders = {}
    for module, targets in graph.items():
        if (floor := core_floor(module)) is None:
            continue
        up = sorted(t for t in targets if (f := core_floor(t)) is not None and rank[f] > rank[floor])
        if up:
            offenders[module] = up
    return offenders


def test_floor_finder_finds_an_upward_import():
    graph = {
        "memdoc.core.billing.bill_json": {"memdoc.core.reports.json_parts", "memdoc.core.model.gpu"},
        "memdoc.core.model.lora": {"memdoc.core.model.plan"},
        "memdoc.core.model.plan": {"memdoc.core.engines.layout"},
        "memdoc.core.reports.bill": {"memdoc.core.billing.bill"},
        "memdoc.render.bill": {"memdoc.core.reports.bill"},
    }
    assert floor_violations(graph) == {
        "memdoc.core.billing.bill_json": ["memdoc.core.reports.json_parts"],
        "memdoc.core.model.plan": ["memdoc.core.engines.layout"],
    }


def test_core_floors_import_only_downwards():
    assert floor_violations(import_graph()) == {}


@pytest.mark.parametrize("layer", ["render", "resolve", "probe", "output"])
def test_lower_layers_do_not_import_commands(layer):
    offenders = {
        module: sorted(t for t in targets if _layer(t) in ("commands", "cli"))
        for module, targets in import_graph().items()
        if _layer(module) == layer
    }
    assert {m: t for m, t in offenders.items() if t} == {}


def test_no_private_names_imported_across_modules():
    offenders = []
    for module in MODULES:
        for target, names in imports_of(module):
            if target == module:
                continue
            offenders += [f"{module}: {target}.{n}" for n in names if n.startswith("_") and not n.startswith("__")]
    assert offenders == []


def test_graph_sees_type_checking_imports():
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from memdoc.core import plan\n")
    assert [node.module for node in _import_nodes(tree)] == ["typing", "memdoc.core"]


def module_lines() -> dict[str, int]:
    return {module: len(path.read_text(encoding="utf-8").splitlines()) for module, path in MODULES.items()}


def _functions_in(node: ast.AST, prefix: str, out: dict[str, int]) -> None:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[prefix + child.name] = child.end_lineno - child.lineno + 1
            _functions_in(child, f"{prefix}{child.name}.", out)
        elif isinstance(child, ast.ClassDef):
            _functions_in(child, f"{prefix}{child.name}.", out)
        else:
            _functions_in(child, prefix, out)


@functools.cache
def function_lines() -> dict[str, int]:
    """`module:qualified.name` -> lines from its def line to its last line (nested functions too)."""
    out: dict[str, int] = {}
    for module in MODULES:
        found: dict[str, int] = {}
        _functions_in(_tree(module), "", found)
        out.update({f"{module}:{name}": n for name, n in found.items()})
    return out


def command_functions() -> list[str]:
    """`module:function` of every command the `memdoc` app registers."""
    from memdoc.cli import app

    def walk(typer_app):
        for info in typer_app.registered_commands:
            fn = inspect.unwrap(info.callback)
            yield f"{fn.__module__}:{fn.__qualname__}"
        for group in typer_app.registered_groups:
            yield from walk(group.typer_instance)

    return sorted(walk(app))


def test_function_lines_counts_def_to_last_line():
    out: dict[str, int] = {}
    _functions_in(ast.parse("class A:\n    @staticmethod\n    def f():\n        def g():\n            pass\n"), "", out)
    assert out == {"A.f": 3, "A.f.g": 2}


def test_no_module_over_500_lines():
    long = {module: n for module, n in module_lines().items() if n > MAX_LINES and module not in LONG_MODULES}
    assert long == {}


def test_no_function_over_60_lines():
    long = {f: n for f, n in function_lines().items() if n > MAX_FUNCTION_LINES and f not in LONG_FUNCTIONS}
    assert long == {}


def command_body_lines(command: str) -> int:
    """Lines of a command's body after its docstring: the work it does. Its signature (one option alias a
    parameter) and docstring (the help text) are declarations, not work."""
    module, name = command.split(":")
    node = next(n for n in ast.walk(_tree(module)) if isinstance(n, ast.FunctionDef) and n.name == name)
    body = node.body[1:] if ast.get_docstring(node) is not None else node.body
    return node.end_lineno - body[0].lineno + 1


def test_commands_are_thin():
    commands = command_functions()
    assert commands and all(c.startswith("memdoc.commands.") for c in commands)
    long = {c: n for c in commands if (n := command_body_lines(c)) > MAX_COMMAND_LINES}
    assert {c: n for c, n in long.items() if c not in LONG_COMMANDS} == {}


def test_command_modules_are_thin():
    """Every module of memdoc/commands/ (the commands, their modes, the app) but the option declarations is at
    most MAX_COMMAND_MODULE_LINES: the work lives in the library (core/reports, probe, resolve, render)."""
    lines = module_lines()
    commands = [m for m in MODULES if m.startswith("memdoc.commands.")]
    assert len(commands) > len(DECLARATION_MODULES)
    long = {m: lines[m] for m in commands if lines[m] > MAX_COMMAND_MODULE_LINES and m not in DECLARATION_MODULES}
    assert long == {}


def test_declaration_modules_declare():
    """A declaration module exists and registers no command: its exemption cannot hide a command's work."""
    assert set(DECLARATION_MODULES) <= set(MODULES)
    assert all(why.strip() for why in DECLARATION_MODULES.values())
    homes = {c.split(":")[0] for c in command_functions()}
    assert homes and not homes & set(DECLARATION_MODULES)


def test_allow_lists_hold_only_real_exceptions():
    lines, functions, commands = module_lines(), function_lines(), command_functions()
    stale = [m for m in LONG_MODULES if lines.get(m, 0) <= MAX_LINES]
    stale += [f for f in LONG_FUNCTIONS if functions.get(f, 0) <= MAX_FUNCTION_LINES]
    stale += [c for c in LONG_COMMANDS if c not in commands or command_body_lines(c) <= MAX_COMMAND_LINES]
    assert stale == [], "no longer over the limit: remove from the allow-list"
    assert all(why.strip() for why in {**LONG_MODULES, **LONG_FUNCTIONS, **LONG_COMMANDS}.values())


def _key_name(node: ast.AST) -> str:
    """The name a value is read under: `x`, `a.x`, `a["x"]`, `a.get("x", …)` → "x"; "" for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    key = node.slice if isinstance(node, ast.Subscript) else None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args:
        key = node.args[0]
    return key.value if isinstance(key, ast.Constant) and isinstance(key.value, str) else ""


def _names_a_family(node: ast.AST, aliases: frozenset[str] = frozenset()) -> bool:
    name = _key_name(node).lower()
    return "family" in name or "model_type" in name or (isinstance(node, ast.Name) and node.id in aliases)


def _names_a_kind(node: ast.AST) -> bool:
    name = _key_name(node).lower()
    return name == "kind" or name.endswith("_kind")


def _strings(node: ast.AST) -> set[str]:
    return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value}


def _model_type_aliases(tree: ast.AST) -> frozenset[str]:
    """Names assigned a model_type (`mt = config.get("model_type", "")`): compared, they are model_types too."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and "model_type" in _key_name(node.value).lower():
            out |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return frozenset(out)


@functools.cache
def vision_names() -> frozenset[str]:
    """Every tower kind, VLM model_type, processor key and processor-rule kind of the vision registry."""
    from memdoc.core.model.vision.registry import RULES, TOWERS, VLMS

    return frozenset(TOWERS) | frozenset(VLMS) | frozenset(RULES) | {rules.kind for rules in RULES.values()}


def family_comparisons(tree: ast.AST, vision: frozenset[str] = frozenset()) -> list[int]:
    """Lines that compare a family name or model_type (`family`, `model_type`, `config["model_type"]`,
    `config.get("model_type")`, a name assigned one) with a non-empty string literal, or a kind (`kind`, `x.kind`,
    `tower_kind`) with one of the `vision` names: `family == "gemma2"`, `model.family in ("gemma", "gemma2")`,
    `family not in TABLE + ("phi3",)`, `match family: case "phi":`, `vision.kind == "qwen2_5_vl"`,
    `config["model_type"] == "mllama"`, `kind.startswith("qwen")`."""
    aliases = _model_type_aliases(tree)

    def flagged(named: ast.AST, other: set[str]) -> bool:
        return (_names_a_family(named, aliases) and bool(other)) or (_names_a_kind(named) and bool(other & vision))

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            named = [s for s in sides if _names_a_family(s, aliases) or _names_a_kind(s)]
            other = set().union(*(_strings(s) for s in sides if s not in named))
            if any(flagged(s, other) for s in named):
                found.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("startswith", "endswith") and flagged(node.func.value, _strings(node)):
                found.append(node.lineno)
        elif isinstance(node, ast.Match):
            found += [case.pattern.lineno for case in node.cases if flagged(node.subject, _strings(case.pattern))]
    return found


def test_family_comparison_finder():
    source = 'if family == "phi" or spec.family in ("a",) or family in TABLE or x == "phi":\n    pass\n'
    assert family_comparisons(ast.parse(source)) == [1, 1]
    assert family_comparisons(ast.parse('if model.family not in T + ("phi3",):\n    pass\n')) == [1]


def test_kind_and_model_type_comparison_finder():
    vision = frozenset({"qwen2_5_vl", "qwen"})
    lines = [
        'vision.kind == "qwen2_5_vl"',  # 1
        'config["model_type"] == "mllama"',  # 2
        'config.get("model_type") in ("llava", "x")',  # 3
        'kind.startswith("qwen")',  # 4
        'rules.kind not in ("qwen",)',  # 5
        'event.kind == "cuda-oom"',  # 6: not a vision name
        'kind.startswith("eth-")',  # 7: not a vision name
        'mt = config.get("model_type", "")',  # 8
        'mt in ("gemma2",)',  # 9: a name assigned a model_type
        'config["model_type"] in VLMS',  # 10: a table, no literal
    ]
    assert family_comparisons(ast.parse("\n".join(lines)), vision) == [1, 2, 3, 4, 5, 9]


FAMILY_HOMES = ("memdoc.core.model.families", "memdoc.core.model.vision")
"""The family registry and the vision package: the only places that compare a family name, a model_type or a vision
kind with a string (each package is a home with its modules)."""
FAMILY_COMPARISONS_ALLOWED: dict[str, str] = {
    "memdoc.probe.tracer": "layer_period's alternating sliding-window model_types (gemma2, gemma3_text, cohere2): "
    "cohere2 has no Family yet; read `Family.alternating_sliding_window` once it has",
}
"""Frozen: modules outside the homes that still compare one, and why. Add none; an entry whose module no longer
compares fails `test_family_comparisons_allowed_are_real`."""


def _home(module: str) -> bool:
    return any(module == home or module.startswith(home + ".") for home in FAMILY_HOMES)


def test_families_models_and_kinds_are_compared_only_in_their_homes():
    found = {
        m: lines
        for m in MODULES
        if not _home(m)
        and m not in FAMILY_COMPARISONS_ALLOWED
        and (lines := family_comparisons(_tree(m), vision_names()))
    }
    assert found == {}


def test_family_comparisons_allowed_are_real():
    stale = [m for m in FAMILY_COMPARISONS_ALLOWED if not family_comparisons(_tree(m), vision_names())]
    assert stale == [], "no longer compares: remove from FAMILY_COMPARISONS_ALLOWED"
    assert all(why.strip() for why in FAMILY_COMPARISONS_ALLOWED.values())


# ---------------------------------------------------------------------------------------------
# trainer formats (issue 41): each trainer one folder of core/trainers, compared with a string nowhere else

TRAINERS_HOME = "memdoc.core.trainers"
"""The package that may compare a trainer format with a string (its folders answer for themselves; today none do)."""
FORMAT_COMPARISONS_ALLOWED: dict[str, str] = {}
"""`module`: why it may compare a trainer format with a string literal outside `TRAINERS_HOME` (frozen: empty)."""
TRAINER_FORMATS = frozenset({"trl", "hf", "axolotl", "llamafactory", "deepspeed", "accelerate", "trainer-args"})


def _names_a_format(node: ast.AST) -> bool:
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return name in ("fmt", "format", "fmt_name", "trainer", "target") or name.endswith(("_fmt", "_format"))


def _format_string(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Constant) and n.value in TRAINER_FORMATS for n in ast.walk(node))


def format_comparisons(tree: ast.AST) -> list[int]:
    """Lines that compare a format (`fmt`, `format`, `*_fmt`) with a trainer format's name: `fmt == "trl"`,
    `fmt in ("trl", "hf")`, `reading.formats[0] != "axolotl"`, `match fmt: case "hf":`."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            named = [
                s for s in sides if _names_a_format(s) or (isinstance(s, ast.Subscript) and _names_a_format(s.value))
            ]
            if named and any(_format_string(s) for s in sides if s not in named):
                found.append(node.lineno)
        elif isinstance(node, ast.Match) and _names_a_format(node.subject):
            found += [case.pattern.lineno for case in node.cases if _format_string(case.pattern)]
    return found


def test_format_comparison_finder():
    source = 'if fmt == "trl" or x.format in ("hf",) or fmt in FORMATS or y == "trl":\n    pass\n'
    assert format_comparisons(ast.parse(source)) == [1, 1]
    assert format_comparisons(ast.parse('match fmt:\n    case "axolotl":\n        pass\n')) == [2]


def test_trainer_formats_are_compared_only_in_core_trainers():
    found = {
        m: lines
        for m in MODULES
        if not m.startswith(TRAINERS_HOME)
        and m not in FORMAT_COMPARISONS_ALLOWED
        and (lines := format_comparisons(_tree(m)))
    }
    assert found == {}


def test_no_trainer_compares_its_format_with_a_string():
    """Inside core/trainers too: each format answers through its own folder (`Format`), never `if fmt == …`."""
    found = {m: lines for m in MODULES if m.startswith(TRAINERS_HOME) and (lines := format_comparisons(_tree(m)))}
    assert found == {}


def test_the_two_wings_of_a_trainer_are_gone():
    """Reader and writer live in one folder per trainer: core/user_config/ and core/emit/ do not exist."""
    assert not (ROOT / "core" / "user_config").exists() and not (ROOT / "core" / "emit").exists()
    assert not [m for m in MODULES if m.startswith(("memdoc.core.user_config", "memdoc.core.emit"))]


@pytest.mark.parametrize("name", ["trl", "hf", "axolotl", "llamafactory", "deepspeed", "accelerate"])
def test_each_trainer_folder_has_its_key_table_reader_and_writer(name):
    folder = ROOT / "core" / "trainers" / name
    assert {"__init__.py", "keys.py", "read.py", "write.py"} <= {p.name for p in folder.glob("*.py")}
