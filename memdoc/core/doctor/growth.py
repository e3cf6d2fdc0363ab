"""Memory that creeps up from step to step: the ``memory-growth`` finding.

Input: the memory held at the start of each optimizer step (CUDA: `memory_allocated()`; CPU: the
process's resident set), from the second step on — the first step creates the optimizer states,
after it nothing should persist across steps but weights, states and the data loader's batches.

Rule: compare the first and the last third of those steady-state samples. Memory grew when the
*smallest* start of the last third exceeds the *largest* start of the first third by at least
`GROWTH_MIN_BYTES` and `GROWTH_SHARE` of that first-third level — a single large batch or a
one-off allocation moves a maximum, not the minimum of a third. Needs `GROWTH_MIN_STEPS` samples.
Typical causes: a loss or output kept across steps (``losses.append(loss)`` without
``.item()``), a growing cache or list of tensors, tensors held by a hook. It ends in a mid-run
OOM, so the finding names that symptom.

`storing_line(source, line)` serves `diagnose SCRIPT --steps N` (``graph-kept``): the line of the script
that keeps, across iterations, the tensor allocated on a given line.
"""

from __future__ import annotations

from memdoc.core.doctor.findings import Finding
from memdoc.units import MiB, format_bytes

GROWTH_MIN_STEPS = 6
"""Steady-state step starts needed before growth is judged."""
GROWTH_MIN_BYTES = 64 * MiB
"""Smaller increases are allocator/caching noise (and on CPU, the resident set's)."""
GROWTH_SHARE = 0.02
"""…and the increase must be at least this share of the memory held at the start."""


def memory_growth(starts: list[tuple[int, int]]) -> Finding | None:
    """The ``memory-growth`` finding for [(step, bytes at its start), …] (steady-state steps), or None."""
    if len(starts) < GROWTH_MIN_STEPS:
        return None
    third = len(starts) // 3
    first, last = starts[:third], starts[-third:]
    level = max(b for _, b in first)
    growth = min(b for _, b in last) - level
    if growth < max(GROWTH_MIN_BYTES, GROWTH_SHARE * level):
        return None
    span = starts[-1][0] - starts[0][0]
    total = starts[-1][1] - starts[0][1]
    return Finding(
        id="memory-growth",
        severity="warning",
        message=(
            f"memory at the start of each step grew by {format_bytes(total)} over {span} steps "
            f"(≈ {format_bytes(total / max(span, 1))} per step): something keeps tensors across steps"
        ),
        symptom="mid-run-oom",
        detail=(
            "look for losses/outputs kept without .item() or .detach(), caches or lists that grow, "
            "tensors held by hooks; this ends in an out-of-memory error mid-run"
        ),
    )


_STORE_METHODS = frozenset({"append", "extend", "insert", "add", "appendleft", "put", "put_nowait", "setdefault"})
"""Container methods that keep their argument (list, set, deque, queue, dict)."""


def storing_line(source: str, line: int) -> int | None:
    """The line of `source` that stores, across loop iterations, the value assigned on `line`, or None.

    `line` is where a tensor that outlived its step was allocated. It is its own store when it accumulates
    (``total = total + loss``, ``total += loss``). Otherwise the names it assigns (``loss = …``) are followed
    to a statement that keeps one of them as is — passed to a container method (``losses.append(loss)``),
    added to another accumulator (``running += loss``, ``running = running + loss``) or assigned to an
    attribute or item (``self.last = loss``, ``d[k] = loss``) — the first such statement after `line`, else
    the first before it (in a loop). A function that returns the name is followed to its calls
    (``losses.append(train_step(b))``), and a plain alias (``out = train_step(b)``) to its own stores.
    ``loss.item()`` or ``loss.detach()`` is a call on the name, not the name itself, and stores nothing that
    keeps the graph. Pure: parses the text with `ast`.
    """
    import ast

    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    stmts = [n for n in ast.walk(tree) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr))]
    here = [n for n in stmts if n.lineno <= line <= (n.end_lineno or n.lineno)]
    if not here:
        return None
    stmt = max(here, key=lambda n: n.lineno)
    targets = _assigned_names(stmt)
    if isinstance(stmt, ast.AugAssign) or targets & _bare_names(getattr(stmt, "value", None)):
        return stmt.lineno
    return _store_of(tree, stmts, stmt, targets, depth=3) if targets else None


def _store_of(tree, stmts: list, stmt, names: set[str], depth: int) -> int | None:
    """The first statement that stores one of `names` (after `stmt`, else before it), following the calls of
    a function that returns one of them and plain aliases, `depth` hops at most."""
    import ast

    names = names | _returned_by(tree, stmt, names)
    stores = sorted(n.lineno for n in stmts if n is not stmt and _stores(n, names))
    after = [n for n in stores if n > stmt.lineno]
    if stores:
        return (after or stores)[0]
    if depth <= 0:
        return None
    aliases = [
        n
        for n in stmts
        if isinstance(n, ast.Assign) and n is not stmt and names & _bare_names(n.value) and _assigned_names(n)
    ]
    for alias in sorted(aliases, key=lambda n: (n.lineno < stmt.lineno, n.lineno)):
        found = _store_of(tree, stmts, alias, _assigned_names(alias), depth - 1)
        if found:
            return found
    return None


def _returned_by(tree, stmt, names: set[str]) -> set[str]:
    """{'f()'} when `stmt` is inside function ``f`` and ``f`` returns one of `names` as is."""
    import ast

    funcs = [
        f
        for f in ast.walk(tree)
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(n is stmt for n in ast.walk(f))
    ]
    if not funcs:
        return set()
    func = max(funcs, key=lambda f: f.lineno)  # the innermost
    returns = [r for r in ast.walk(func) if isinstance(r, ast.Return)]
    return {f"{func.name}()"} if any(names & _bare_names(r.value) for r in returns) else set()


def _assigned_names(stmt) -> set[str]:
    """Plain names a statement assigns (``a = …``, ``a, b = …``, ``a += …``)."""
    import ast

    targets = stmt.targets if isinstance(stmt, ast.Assign) else [getattr(stmt, "target", None)]
    names: set[str] = set()
    for t in targets:
        for n in ast.walk(t) if t is not None else ():
            if isinstance(n, ast.Name):
                names.add(n.id)
    return names


def _bare_names(expr) -> set[str]:
    """Names an expression uses as values themselves: alone, through an attribute or item (``out.loss``), in a
    list/tuple/dict/set, or as an operand of ``+ - * /`` — not inside a call (``loss.item()``, ``f(loss)``);
    a call itself is 'f()'."""
    import ast

    if expr is None:
        return set()
    if isinstance(expr, ast.Name):
        return {expr.id}
    if isinstance(expr, ast.Call):
        func = expr.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        return {f"{name}()"} if name else set()
    if isinstance(expr, (ast.Attribute, ast.Subscript)):  # a part of it: out.loss, out["loss"], out[0]
        return _bare_names(expr.value) if isinstance(expr.value, (ast.Name, ast.Attribute, ast.Subscript)) else set()
    if isinstance(expr, ast.BinOp):
        return _bare_names(expr.left) | _bare_names(expr.right)
    if isinstance(expr, ast.Starred):
        return _bare_names(expr.value)
    if isinstance(expr, (ast.List, ast.Tuple, ast.Set)):
        return set().union(*(_bare_names(e) for e in expr.elts)) if expr.elts else set()
    if isinstance(expr, ast.Dict):
        return set().union(*(_bare_names(v) for v in expr.values)) if expr.values else set()
    return set()


def _stores(stmt, names: set[str]) -> bool:
    """Whether `stmt` keeps one of `names` beyond the iteration (see `storing_line`)."""
    import ast

    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        call = stmt.value
        if isinstance(call.func, ast.Attribute) and call.func.attr in _STORE_METHODS:
            return any(names & _bare_names(a) for a in call.args)
        return False
    value = getattr(stmt, "value", None)
    if not names & _bare_names(value):
        return False
    if isinstance(stmt, ast.AugAssign):
        return True
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
    own = _assigned_names(stmt)
    return any(isinstance(t, (ast.Attribute, ast.Subscript)) for t in targets) or bool(own & _bare_names(value))
