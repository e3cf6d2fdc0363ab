"""HF TrainingArguments (a script's `HfArgumentParser(TrainingArguments).parse_yaml_file`, transformers 5.24):
`keys.py` its key table and the `optim` names, `read.py` the TrainingArguments part of the trainer-args reader
(TRL's reader reads HF files: TRL's configs subclass TrainingArguments), `optimizers.py` and `defaults.py` the
optimizer names and the stack's defaults, `args.py` the keys every HF-Trainer-based format writes, `write.py` the
file, `facts.py` packing, CP/TP, QLoRA's upcast and the loss path."""

from __future__ import annotations

from memdoc.core.trainers.hf.keys import KEYS, VERSION


class Hf:
    name = "hf"
    version = VERSION
    keys = KEYS
    document = None
    detect_rank = 5
    emits = True
    seq_len_key = None

    def looks_like(self, data: dict) -> bool:
        return False  # read by TRL's reader: `memdoc.core.trainers.trl`

    def read(self, doc, stack):
        raise NotImplementedError("HF TrainingArguments files are read by TRL's reader (trainer-args)")

    def default_filename(self, task: str) -> str:
        return "training_args.yaml"

    def emit(self, ctx):
        from memdoc.core.trainers.hf.write import emit_hf

        return emit_hf(ctx)

    def packing_keys(self, plan, notes):
        from memdoc.core.trainers.hf.facts import packing_keys

        return packing_keys(plan, notes)

    def check_parallel(self, plan):
        from memdoc.core.trainers.hf.facts import check_parallel

        check_parallel(plan)

    def add_parallel_keys(self, plan, emitted):
        from memdoc.core.trainers.hf.facts import add_parallel_keys

        add_parallel_keys(plan, emitted)

    def kbit_notes(self, plan):
        from memdoc.core.trainers.hf.facts import kbit_notes

        return kbit_notes(plan)

    def loss_note(self, plan, stack=None):
        from memdoc.core.trainers.hf.facts import loss_note

        return loss_note(plan)


TRAINER = Hf()
