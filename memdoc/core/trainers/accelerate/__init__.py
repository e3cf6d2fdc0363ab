"""accelerate's `--config_file` YAML (1.15): `keys.py` its key table, `read.py` the reader, `write.py` the FSDP side
file emit writes (and its `parallelism_config` for CP/TP)."""

from __future__ import annotations

from memdoc.core.trainers.accelerate.keys import KEYS, VERSION


class Accelerate:
    name = "accelerate"
    version = VERSION
    keys = KEYS
    document = "accelerate"
    detect_rank = 3
    emits = False

    def looks_like(self, data: dict) -> bool:
        from memdoc.core.trainers.accelerate.read import looks_like

        return looks_like(data)

    def read(self, doc, stack):
        from memdoc.core.trainers.accelerate.read import read_accelerate

        return read_accelerate(doc, stack)


TRAINER = Accelerate()
