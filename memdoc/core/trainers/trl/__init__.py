"""TRL (`trl <task> --config FILE`, TRL 1.16): `keys.py` its key table and which script and trainer run each task,
`read.py` the trainer-args reader (TRL's configs and HF TrainingArguments), `post_read.py` its post-training keys,
`write.py` and `post.py` the config it runs, `facts.py` packing, CP/TP, QLoRA's upcast and the loss path."""

from __future__ import annotations

from memdoc.core.trainers.trl.keys import KEYS, TRL_SCRIPTS, VERSION


class Trl:
    name = "trl"
    version = VERSION
    keys = KEYS
    document = "trainer-args"
    detect_rank = 4
    emits = True
    seq_len_key = KEYS["seq_len"]

    def looks_like(self, data: dict) -> bool:
        from memdoc.core.trainers.trl.read import is_trainer_args

        return is_trainer_args(data)

    def read(self, doc, stack):
        from memdoc.core.trainers.trl.read import read_trainer_args

        return read_trainer_args(doc, stack)

    def default_filename(self, task: str) -> str:
        """Named after the script that runs it (`trl dpo --config dpo.yaml`, `trl reward --config reward.yaml`)."""
        from memdoc.core.model.plan_post import Task

        return f"{TRL_SCRIPTS.get(Task(task), task)}.yaml"

    def emit(self, ctx):
        from memdoc.core.trainers.trl.write import emit_trl

        return emit_trl(ctx)

    def packing_keys(self, plan, notes):
        from memdoc.core.trainers.trl.facts import packing_keys

        return packing_keys(plan, notes)

    def check_parallel(self, plan):
        from memdoc.core.trainers.trl.facts import check_parallel

        check_parallel(plan)

    def add_parallel_keys(self, plan, emitted):
        from memdoc.core.trainers.trl.facts import add_parallel_keys

        add_parallel_keys(plan, emitted)

    def kbit_notes(self, plan):
        from memdoc.core.trainers.trl.facts import kbit_notes

        return kbit_notes(plan)

    def loss_note(self, plan, stack=None):
        from memdoc.core.trainers.trl.facts import loss_note

        return loss_note(plan, stack)


TRAINER = Trl()
