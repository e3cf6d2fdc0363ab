"""memdoc's bill per phase against real TRL 1.16 DPO and GRPO steps on the CPU (issue 23's "Done when").

Each fixture (`tests/fixtures/posttrain/<case>.json`, `benchmarks/posttrain/harness.py`) holds the peak of live
tensor bytes in every phase of the measured optimizer step, counted by a dispatch-mode storage counter that
shares no code with the bill (`benchmarks/posttrain/tracker.py`). Here the tiny model's config goes through
`spec_from_config` and the case's plan through `parse_plan`; `compute_bill` must give every phase the fixture
has within 5%.
"""

from __future__ import annotations

import json

import pytest
from conftest import FIXTURES

from memdoc.core.billing.bill import compute_bill
from memdoc.core.model.model_spec import spec_from_config
from memdoc.core.model.plan import parse_plan

CASES = sorted(p.stem for p in (FIXTURES / "posttrain").glob("*.json"))


@pytest.mark.xfail(strict=False, reason="the post-training bill lands with P-bill")
@pytest.mark.parametrize("case", CASES)
def test_bill_per_phase_within_5_percent(case):
    doc = json.loads((FIXTURES / "posttrain" / f"{case}.json").read_text())
    spec = spec_from_config(doc["config"], model_id=f"tiny-{case}", source="test")
    bill = compute_bill(spec, parse_plan(**doc["plan"]), None)
    billed = {name: bill.phases[name].total for name in doc["phases"]}
    assert billed == pytest.approx(doc["phases"], rel=0.05)
