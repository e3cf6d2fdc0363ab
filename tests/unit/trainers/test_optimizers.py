"""The one optimizer table (`memdoc.core.trainers.hf.optimizers`): every transformers `OptimizerNames` member
is billed, billed as an equivalent, or not billed with a reason, and all four trainer readers use it.

Independent truth: transformers' own `OptimizerNames` and its optimizer dispatch
(transformers/trainer_optimizer.py `_OPTIMIZER_HANDLERS`, what `Trainer.get_optimizer_cls_and_kwargs`
calls), which names the class and the kwargs (`optim_bits`, `is_paged`) each name builds."""

from __future__ import annotations

import sys
import types

import pytest

from memdoc.core.model.stack import Stack
from memdoc.core.trainers.axolotl.read import read_axolotl
from memdoc.core.trainers.hf.optimizers import ALL_NAMES, BILLED, BILLED_AS, FALLBACK, NOT_BILLED
from memdoc.core.trainers.llamafactory.read import read_llamafactory
from memdoc.core.trainers.reading import SourceDoc
from memdoc.core.trainers.trl.read import read_trainer_args

OPTIMIZER_NAMES = pytest.importorskip("transformers.training_args").OptimizerNames


def test_the_table_covers_every_transformers_optimizer_once():
    assert set(ALL_NAMES) == {o.value for o in OPTIMIZER_NAMES}
    assert len(ALL_NAMES) == len(set(ALL_NAMES)) == len(OPTIMIZER_NAMES)  # billed, billed-as, not billed: disjoint


def _read_by_every_trainer(name: str):
    """The same optimizer name in an Axolotl, a LLaMA-Factory, a TRL and an HF TrainingArguments file."""
    stack = Stack()
    return {
        "axolotl": read_axolotl(SourceDoc("a.yaml", {"base_model": "m", "optimizer": name}), stack),
        "llamafactory": read_llamafactory(SourceDoc("l.yaml", {"model_name_or_path": "m", "optim": name}), stack),
        "trl": read_trainer_args(SourceDoc("t.yaml", {"model_name_or_path": "m", "optim": name}), stack),
        "hf": read_trainer_args(SourceDoc("h.yaml", {"output_dir": "o", "optim": name}), stack),
    }


@pytest.mark.parametrize("name", [o.value for o in OPTIMIZER_NAMES])
def test_every_reader_gives_the_same_plan_optimizer_and_note(name):
    readings = _read_by_every_trainer(name)
    optimizers = {fmt: r.plan.get("optimizer") for fmt, r in readings.items()}
    notes = {fmt: [n.reason for n in r.not_billed if n.key in ("optim", "optimizer")] for fmt, r in readings.items()}
    assert len(set(optimizers.values())) == 1, optimizers
    assert len({tuple(n) for n in notes.values()}) == 1, notes
    optimizer, note = optimizers["hf"], notes["hf"]
    if name in BILLED:
        assert optimizer == BILLED[name]
        if name == "sgd":  # no momentum in optim_args: no state, billed with one (and said so)
            assert len(note) == 1 and "billed as SGD with momentum" in note[0]
        else:
            assert note == []
    elif name in BILLED_AS:
        assert optimizer == BILLED_AS[name][0]
        assert len(note) == 1 and f"billed as {optimizer}" in note[0]
    else:
        assert optimizer is None  # the plan's default ...
        assert len(note) == 1 and note[0].startswith(f"{name}: {NOT_BILLED[name]}")
        assert f"billed as {FALLBACK} instead" in note[0]  # ... and the note says what the bill uses


def _transformers_builds(name: str, monkeypatch) -> tuple[str, dict]:
    """(class name, kwargs) transformers builds for `name`. bitsandbytes is not installed here: its
    optimizer classes are stood in by empty classes of the same names, so that transformers' own dispatch
    (`_get_bitsandbytes_optimizer`) can run and say which class and which `optim_bits`/`is_paged` it passes."""
    from transformers import TrainingArguments, trainer_optimizer

    optim = types.ModuleType("bitsandbytes.optim")
    for cls in ("AdamW", "Lion", "RMSprop", "AdEMAMix"):
        setattr(optim, cls, type(cls, (), {}))
    bnb = types.ModuleType("bitsandbytes")
    bnb.optim = optim
    monkeypatch.setitem(sys.modules, "bitsandbytes", bnb)
    monkeypatch.setitem(sys.modules, "bitsandbytes.optim", optim)
    monkeypatch.setattr(trainer_optimizer, "is_bitsandbytes_available", lambda: True)
    args = TrainingArguments(output_dir="o", optim=name, use_cpu=True)
    ctx = trainer_optimizer.OptimizerContext(
        args=args, model=None, optimizer_kwargs={"lr": 1e-5}, adam_kwargs={}, optim_args={}
    )
    cls, kwargs = trainer_optimizer._OPTIMIZER_HANDLERS[args.optim](ctx)
    return cls.__name__, kwargs


def test_billed_as_names_build_32_bit_bitsandbytes_optimizers(monkeypatch):
    """Each billed-as name is a bitsandbytes optimizer with 32-bit states: paged AdamW is the class of the
    billed 8-bit AdamW at optim_bits=32; paged Lion is lion_32bit's class and kwargs, paged; RMSprop is 32-bit."""
    built = {name: _transformers_builds(name, monkeypatch) for name in (*BILLED_AS, "adamw_bnb_8bit", "lion_32bit")}
    assert built["paged_adamw_32bit"] == ("AdamW", built["paged_adamw_32bit"][1])
    assert built["paged_adamw_32bit"][0] == built["adamw_bnb_8bit"][0]
    assert built["paged_adamw_32bit"][1]["optim_bits"] == 32 and built["paged_adamw_32bit"][1]["is_paged"]
    lion, paged_lion = built["lion_32bit"], built["paged_lion_32bit"]
    assert paged_lion[0] == lion[0] == "Lion" and paged_lion[1] == lion[1] | {"is_paged": True}
    for name in ("rmsprop_bnb", "rmsprop_bnb_32bit"):
        assert built[name][0] == "RMSprop" and built[name][1]["optim_bits"] == 32
