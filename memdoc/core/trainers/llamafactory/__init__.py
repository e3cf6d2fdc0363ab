"""LLaMA-Factory (`llamafactory-cli train FILE`, 0.9.5): `keys.py` its key table, `read.py` and `post_read.py` the
reader, `write.py` and `post.py` the writer, `facts.py` packing, CP/TP, QLoRA's upcast and the loss path."""

from __future__ import annotations

from memdoc.core.trainers.llamafactory.keys import KEYS, VERSION


class LlamaFactory:
    name = "llamafactory"
    version = VERSION
    keys = KEYS
    document = "llamafactory"
    detect_rank = 1
    emits = True
    seq_len_key = KEYS["seq_len"]

    def looks_like(self, data: dict) -> bool:
        from memdoc.core.trainers.llamafactory.read import looks_like

        return looks_like(data)

    def read(self, doc, stack):
        from memdoc.core.trainers.llamafactory.read import read_llamafactory

        return read_llamafactory(doc, stack)

    def default_filename(self, task: str) -> str:
        return "llamafactory.yaml"

    def emit(self, ctx):
        from memdoc.core.trainers.llamafactory.write import emit_llamafactory

        return emit_llamafactory(ctx)

    def packing_keys(self, plan, notes):
        from memdoc.core.trainers.llamafactory.facts import packing_keys

        return packing_keys(plan, notes)

    def check_parallel(self, plan):
        from memdoc.core.trainers.llamafactory.facts import check_parallel

        check_parallel(plan)

    def add_parallel_keys(self, plan, emitted):
        from memdoc.core.trainers.llamafactory.facts import add_parallel_keys

        add_parallel_keys(plan, emitted)

    def kbit_notes(self, plan):
        from memdoc.core.trainers.llamafactory.facts import kbit_notes

        return kbit_notes(plan)

    def loss_note(self, plan, stack=None):
        from memdoc.core.trainers.llamafactory.facts import loss_note

        return loss_note(plan)


TRAINER = LlamaFactory()
