"""DeepSpeed's JSON (the HF Trainer's `deepspeed:` file, 0.19.8): `keys.py` its key table, `read.py` the reader,
`write.py` the side file emit writes beside a ZeRO plan's config."""

from __future__ import annotations

from memdoc.core.trainers.deepspeed.keys import KEYS, VERSION


class DeepSpeed:
    name = "deepspeed"
    version = VERSION
    keys = KEYS
    document = "deepspeed"
    detect_rank = 2
    emits = False

    def looks_like(self, data: dict) -> bool:
        from memdoc.core.trainers.deepspeed.read import looks_like

        return looks_like(data)

    def read(self, doc, stack):
        from memdoc.core.trainers.deepspeed.read import read_deepspeed

        return read_deepspeed(doc, stack)


TRAINER = DeepSpeed()
