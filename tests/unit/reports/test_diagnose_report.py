"""`memdoc.core.reports.diagnose`: a diagnosed script's bill and report, checked against the bill computed
the way `memdoc bill` computes it (`resolve_model` + `compute_bill`), not against the report's own output."""

from types import SimpleNamespace

from memdoc.core.billing.bill import compute_bill
from memdoc.core.billing.vocabulary import STEP_PHASES
from memdoc.core.model.plan import parse_plan
from memdoc.core.reports.diagnose import ScriptReport, script_bill
from memdoc.resolve.models import load_config, resolve_model

MODEL = "Qwen/Qwen2.5-0.5B"


def _hf(config: dict, plan) -> dict:
    return {"model_id": MODEL, "config": config, "plan": plan, "detected": {"method": plan.method.value}}


def test_script_bill_is_the_bill_of_the_detected_plan():
    plan = parse_plan(method="lora", micro_batch=2, seq_len=512)
    bill, note = script_bill(_hf(load_config(MODEL)[1], plan))
    expected = compute_bill(resolve_model(MODEL), plan, None)
    assert note is None
    assert (bill.peak_allocated, bill.process_total, bill.peak_phase) == (
        expected.peak_allocated,
        expected.process_total,
        expected.peak_phase,
    )


def test_an_unbillable_config_is_a_note_not_an_error():
    bill, note = script_bill(_hf({"model_type": "no-such-architecture"}, parse_plan()))
    assert bill is None and note.startswith(f"note: no bill for {MODEL}: ")


def test_script_report_puts_the_bill_next_to_the_run():
    plan = parse_plan(method="lora", micro_batch=2, seq_len=512)
    bill = compute_bill(resolve_model(MODEL), plan, None)
    post = {"trainer": "DPOTrainer", "task": "dpo", "phases": {}, "generation_rounds": []}
    result = SimpleNamespace(to_json=lambda: {"script": "train.py"}, hf=_hf({}, plan), post=post)
    data = ScriptReport(result, bill, ["mem.pickle"]).to_json()
    assert data["script"] == "train.py" and data["written"] == ["mem.pickle"]
    assert data["hf"]["billed"]["peak_allocated"] == bill.peak_allocated
    assert data["hf"]["bill_peak_phase"] == bill.peak_phase and data["hf"]["detected_plan"] == {"method": "lora"}
    billed = data["post_training"]["billed"]
    assert set(billed) == set(STEP_PHASES)
    assert all(billed[p] == (bill.phases[p].total if p in bill.phases else None) for p in STEP_PHASES)
    without = ScriptReport(SimpleNamespace(to_json=dict, hf=None, post=None)).to_json()
    assert without == {"written": []}
