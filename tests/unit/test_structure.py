"""The layout rules of the package, checked on its source (ast; nothing is imported).

Imports flow one way (commands → probe/resolve/render → core), with no cycle between memdoc
modules — function-level imports included —, no import of another module's private (`_name`)
names, and no module over 500 lines.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "memdoc"
MAX_LINES = 500


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(tree: ast.AST):
    """Every import statement, at any depth, except under `if TYPE_CHECKING:` (never executed)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _resolve_from(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module if MODULES[module].name == "__init__.py" else module.rsplit(".", 1)[0]
    base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
    return f"{base}.{node.module}" if node.module else base


@functools.cache
def imports_of(module: str) -> list[tuple[str, list[str]]]:
    """(imported memdoc module, [names taken from it]) for each import in `module`."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    out = []
    for node in _import_nodes(tree):
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
    # commands.emit imports the bill inside its command function, not at module level
    assert "memdoc.core.billing.bill" in import_graph()["memdoc.commands.emit"]


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


@pytest.mark.parametrize("layer", ["render", "resolve", "probe"])
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


def test_no_module_over_500_lines():
    long = {
        module: n
        for module, path in MODULES.items()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}
