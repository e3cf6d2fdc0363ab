"""What outlived a whole optimizer step: the samples the leak findings read (``memory-growth``, ``graph-kept``).

At the end of each step (the optimizer's step post-hook) the storages still alive are billed to the script
line that allocated them; model states (weights, gradients, optimizer states) and what the script
allocated before its first forward are left out. Backward has freed the step's activations by then, so
what is alive is the step's inputs and outputs (the same bytes every step) and whatever the script keeps
across steps. A line whose allocations were all freed by the end of the step is never billed, whatever
their size (the old sampling, at the next step's first forward, still saw the previous step's
temporaries).

A surviving tensor with a ``grad_fn`` keeps its autograd graph: the graph's nodes are walked from it
(``Node.next_functions``) and the tensors its nodes still save (the ``_saved_*`` attributes of the
generated nodes, ``saved_tensors`` of a custom ``autograd.Function``; both raise once backward has freed
them, torch/csrc/autograd/saved_variable.cpp ``SavedVariable::unpack``) are its saved activations.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from memdoc.core.doctor.growth import storing_line

NODE_LIMIT = 200_000
"""Graph nodes walked per sample at most (a kept graph of a large model over many steps)."""

_SAVED_NAMES: dict[type, tuple[str, ...]] = {}


def sample(session) -> dict:
    """{"sites": {script line: surviving bytes}, "graphs": {line: {...}}} at the end of the current step.

    "graphs" groups the surviving tensors that carry a ``grad_fn`` by the line that allocated them:
    {"tensors", "tensor_bytes", "nodes", "saved_bytes"} — the storages those graphs save are billed
    there, not to "sites".
    """
    session.sweep()
    weights, grads, opt = session.state_bytes()
    known = set(weights) | set(grads) | set(opt)
    old = {k: n for k, (n, _ref, bucket, _step) in session.live.items() if k not in known and bucket != "setup"}
    graphs, saved = _kept_graphs(session, old, known)
    sites: dict[str, int] = {}
    for k, n in old.items():
        if k not in saved:
            site = session.sites.get(k) or "?"
            sites[site] = sites.get(site, 0) + n
    return {"sites": sites, "graphs": graphs}


def _kept_graphs(session, old: dict[int, int], known: set[int]) -> tuple[dict, set[int]]:
    """The graphs the surviving tensors keep, by allocating line, and every storage those graphs save."""
    candidates: dict[int, list] = {}
    for k in old:
        for ref in session.objs.get(k, ()):
            t = ref()
            fn = getattr(t, "grad_fn", None) if t is not None else None
            if fn is not None:
                candidates.setdefault(k, []).append(fn)
    # a tensor one of the graphs saves is inside a graph, not what the script keeps (torch keeps the Python
    # object of a saved tensor alive with it)
    _, inside = _walk([fn for fns in candidates.values() for fn in fns], session)
    held = {k: fns for k, fns in candidates.items() if k not in inside} or candidates
    roots: dict[str, list] = {}
    kept: dict[str, dict[int, int]] = {}
    for k, fns in held.items():
        site = session.sites.get(k) or "?"
        roots.setdefault(site, []).extend(fns)
        kept.setdefault(site, {})[k] = old[k]
    graphs: dict[str, dict] = {}
    all_saved: set[int] = set()
    for site, fns in roots.items():
        nodes, saved = _walk(fns, session)
        saved -= known
        all_saved |= saved
        graphs[site] = {
            "tensors": len(kept[site]),
            "tensor_bytes": sum(kept[site].values()),
            "nodes": nodes,
            "saved_bytes": sum(session.live[k][0] for k in saved if k in session.live),
        }
    return graphs, all_saved


def _walk(fns: list, session) -> tuple[int, set[int]]:
    """(number of nodes reachable from `fns`, storage keys of the tensors they still save)."""
    from memdoc.probe.script.session import storage_key

    seen: dict[int, object] = {}
    stack = list(fns)
    saved: set[int] = set()
    while stack and len(seen) < NODE_LIMIT:
        fn = stack.pop()
        if fn is None or id(fn) in seen:
            continue
        seen[id(fn)] = fn  # held until the walk ends, so ids are not reused
        for t in _saved_tensors(fn):
            info = storage_key(t)
            if info is not None:
                saved.add(info[0])
        stack.extend(nxt for nxt, _ in getattr(fn, "next_functions", ()))
    return len(seen), saved


def _saved_tensors(fn) -> list:
    """The tensors a graph node still saves for backward (none once backward has released them)."""
    names = _SAVED_NAMES.get(type(fn))
    if names is None:
        names = tuple(a for a in dir(fn) if a.startswith("_saved_"))
        if hasattr(fn, "saved_tensors"):
            names += ("saved_tensors",)
        _SAVED_NAMES[type(fn)] = names
    out = []
    for name in names:
        value = None
        with contextlib.suppress(Exception):  # released, or not a tensor-valued attribute
            value = getattr(fn, name)
        items = value if isinstance(value, (list, tuple)) else (value,)
        out.extend(v for v in items if hasattr(v, "untyped_storage"))
    return out


def storing_sites(script: str | None, samples: list[dict]) -> dict[str, str]:
    """Allocating line → the script line that stores the tensor across steps (`growth.storing_line`), for the
    lines whose tensors keep a graph; a line with no store found is left out."""
    if not script:
        return {}
    try:
        source = Path(script).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    base = os.path.basename(script)
    out: dict[str, str] = {}
    for s in samples:
        for site in s.get("graphs", {}):
            name, _, line = site.rpartition(":")
            if name != base or not line.isdigit():
                continue
            stored = storing_line(source, int(line))
            if stored:
                out[site] = f"{base}:{stored}"
    return out
