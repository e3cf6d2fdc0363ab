"""The leak rules (``memory-growth``, ``graph-kept``) on hand-built step-end samples, and `storing_line` on
loop sources: which line keeps a tensor across iterations."""

from __future__ import annotations

import textwrap

from memdoc.core.doctor.findings import RunFacts, lint
from memdoc.core.doctor.growth import storing_line

LOOP = textwrap.dedent(
    """\
    losses, history, total, running = [], {}, 0.0, 0.0
    for step in range(10):
        loss = model(x).mean()
        out = model(x)
        loss.backward()
        losses.append(loss.item())
        print(loss)
        total = total + loss
        running += out
        history[step] = out.detach()
        self.last = aux
        aux = out * 2
        log.append([aux, 1])
    """
)


def _line(text: str) -> int:
    return next(i for i, line in enumerate(LOOP.splitlines(), 1) if text in line)


def test_the_storing_line_follows_the_assigned_name():
    # loss.item() in the append is a call on the name and keeps no graph; the running sum keeps the loss
    assert storing_line(LOOP, _line("loss = model(x).mean()")) == _line("total = total + loss")
    assert storing_line(LOOP, _line("out = model(x)")) == _line("running += out")
    # an accumulation is its own store
    assert storing_line(LOOP, _line("total = total + loss")) == _line("total = total + loss")
    # stored after the assignment in a list, else before it (the attribute store comes earlier in the loop)
    assert storing_line(LOOP, _line("aux = out * 2")) == _line("log.append([aux, 1])")


def test_no_store_is_found_where_none_is():
    assert storing_line("for i in range(3):\n    y = f(i)\n    print(y.item())\n", 2) is None
    assert storing_line("def f(:\n", 1) is None  # unparsable source
    assert storing_line("x = 1\n", 5) is None  # no statement on the line


def _samples(per_step: list[dict[str, int]], graphs: list[dict[str, dict]] | None = None) -> list[dict]:
    graphs = graphs or [{} for _ in per_step]
    return [{"sites": s, "graphs": g} for s, g in zip(per_step, graphs, strict=True)]


def _ids(facts: RunFacts) -> dict:
    return {f.id: f for f in lint(facts) if f.id in ("memory-growth", "graph-kept")}


def test_growth_needs_every_step_to_add_a_kibibyte():
    flat = _samples([{"t.py:5": 4096}] * 3)
    assert _ids(RunFacts(survivors=flat)) == {}
    assert _ids(RunFacts(survivors=_samples([{"t.py:5": 4096}]))) == {}  # one step end: nothing to compare
    small = _samples([{"t.py:5": 4096 + 512 * i} for i in range(3)])  # 512 B/step: a counter, not a leak
    assert _ids(RunFacts(survivors=small)) == {}
    once = _samples([{"t.py:5": 4096}, {"t.py:5": 9000}, {"t.py:5": 9000}])  # one jump, then flat
    assert _ids(RunFacts(survivors=once)) == {}


def test_growth_names_only_the_lines_whose_survivors_grow():
    steps = _samples([{"t.py:5": 2048 * i, "t.py:9": 10**6, "?": 7} for i in range(1, 4)])
    found = _ids(RunFacts(survivors=steps))["memory-growth"]
    assert found.modules == ("t.py:5",) and found.figures["per_step_bytes"] == 2048
    assert "2.00 KiB per step" in found.message


def test_a_graph_gaining_nodes_is_named_at_its_storing_line():
    graphs = [
        {"t.py:3": {"tensors": i, "tensor_bytes": 4 * i, "nodes": 4 + 7 * i, "saved_bytes": 0}} for i in (1, 2, 3)
    ]
    facts = RunFacts(survivors=_samples([{}] * 3, graphs), stored_at={"t.py:3": "t.py:8"})
    found = _ids(facts)
    assert set(found) == {"graph-kept"}
    kept = found["graph-kept"]
    assert kept.modules == ("t.py:8",) and kept.severity == "warning"
    assert kept.figures | {} == {
        "kind": "graph",
        "stored_at": "t.py:8",
        "allocated_at": "t.py:3",
        "saved_bytes_per_step": 0,
        "tensor_bytes_per_step": 4,
        "nodes_per_step": 7,
    }
    saved = [{"t.py:3": g["t.py:3"] | {"saved_bytes": 3 * 2**20 * i}} for i, g in enumerate(graphs, 1)]
    kept = _ids(RunFacts(survivors=_samples([{}] * 3, saved)))["graph-kept"]
    assert kept.severity == "error" and "3.00 MiB/step of saved activations" in kept.message


def test_a_graph_of_constant_size_is_not_a_leak():
    graphs = [{"t.py:3": {"tensors": 1, "tensor_bytes": 4, "nodes": 11, "saved_bytes": 0}}] * 3
    assert _ids(RunFacts(survivors=_samples([{}] * 3, graphs))) == {}


def test_a_graph_with_no_storing_line_is_named_where_it_was_allocated():
    graphs = [{"t.py:3": {"tensors": i, "tensor_bytes": 4 * i, "nodes": 7 * i, "saved_bytes": 0}} for i in (1, 2, 3)]
    kept = _ids(RunFacts(survivors=_samples([{}] * 3, graphs)))["graph-kept"]
    assert kept.modules == ("t.py:3",)
    assert kept.message.startswith("the tensors allocated at t.py:3, kept across steps, keep the autograd graph")
    assert kept.figures["stored_at"] is None and kept.figures["allocated_at"] == "t.py:3"


def test_a_part_of_the_output_is_stored_as_is():
    # transformers' ModelOutput: the loss is an attribute (or item) of the forward's output
    src = "for b in data:\n    out = model(**b)\n    out.loss.backward()\n    hist.append(out.loss)\n"
    assert storing_line(src, 2) == 4
    assert storing_line(src.replace("out.loss)", 'out["loss"])'), 2) == 4
    assert storing_line(src.replace("out.loss)", "out.loss.item())"), 2) is None


TRAINER = textwrap.dedent(
    """\
    class Trainer:
        def train_step(self, batch):
            loss = self.model(batch).mean()
            loss.backward()
            return loss

        def fit(self, batches):
            for batch in batches:
                out = self.train_step(batch)
                self.history.append(out)

    def evaluate(xs):
        val = model(xs).mean()
        return val

    scores = [evaluate(x) for x in data]
    totals.append(evaluate(x))
    """
)


def test_a_returned_tensor_is_followed_to_the_line_that_stores_the_call():
    def at(text: str) -> int:
        return next(i for i, line in enumerate(TRAINER.splitlines(), 1) if line.strip() == text)

    # train_step returns the loss, fit names it `out` and appends it
    assert storing_line(TRAINER, at("loss = self.model(batch).mean()")) == at("self.history.append(out)")
    # evaluate returns it, a list append stores the call (the list comprehension is not a statement-level store)
    assert storing_line(TRAINER, at("val = model(xs).mean()")) == at("totals.append(evaluate(x))")
