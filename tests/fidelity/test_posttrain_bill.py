"""memdoc's bill per phase against real TRL 1.16 DPO and GRPO steps on the CPU (issue 23's "Done when").

Each fixture (`tests/fixtures/posttrain/<case>.json`, `benchmarks/posttrain/harness.py`) holds the peak of live
tensor bytes in every phase of the measured optimizer step, counted by a dispatch-mode storage counter that
shares no code with the bill (`benchmarks/posttrain/tracker.py`). Here the tiny model's config goes through
`spec_from_config` and the case's plan through `parse_plan`; `compute_bill` must give every phase the fixture
has within 5%.

Billed / measured per phase (bill of P-fidelity):

| case | forward | reference | backward | optimizer | generation |
|---|---|---|---|---|---|
| dpo-full | 0.981 | 1.002 | 0.977 | 0.999 | |
| dpo-lora | 0.969 | 0.995 | 0.964 | 0.996 | |
| dpo-precompute | 0.979 | | 0.974 | 0.999 | |
| grpo-beta0 | 0.980 | | 0.974 | 1.000 | 0.999 |
| grpo-beta004 | 0.983 | 1.003 | 0.977 | 1.000 | 0.999 |
| grpo-iter2 | 0.980 | 1.004 | 0.974 | 1.000 | 0.999 |

Before it (main at 48e7f19) the bill ran 13-23 % high on forward, reference and backward and 2.5-3.3 % on
generation: it scored every position of each row, where TRL 1.16's fused head on a Triton device gathers only the
labelled (completion) ones (`add_fused_lm_head`, `hidden_states[mask]`; its tile buffer is min(scored, 4096) ×
32768, here 384 × 32768 bf16 = 24 MiB, the largest tensor of every training phase). The DPO plans now give
`prompt_len` (32); GRPO's prompt is `seq_len`. Generation: transformers' prefill (the prompts' cache only) and
last decode step (the whole cache + `DynamicLayer.update`'s `torch.cat` of one layer's keys) are now two peaks,
not the whole cache + the prefill's transient.

What remains, by mechanism:
* forward and backward, 2-3.6 % low (0.9-1.3 MB of ~28 MB): the fixtures fold TRL's tiles with the torch
  fallback (`trl/kernels/chunked_logprob.py` `_forward_tile`, `_backward_tile`; the Triton kernels on a GPU fold
  in registers). `_forward_tile` holds three fp32 scored × vocab temporaries at once (`tile.float()`, `z *
  logit_scale`, `z * inv_t`; then `z`, `exp(z - m)`, `e * z`): 3 × 384 × 128 × 4 = 0.59 MB; `_backward_tile` six
  to seven (`y`, `z`, `log_p`, `p`, `grad`, `is_target.float()`, `is_target.float() - p`): ≈ 1.2-1.4 MB. One
  `ChunkedLogProbFunction` call at the fixtures' shapes (N 384, V 128, H 256, bf16) under the same tracker holds
  3.09 × N × V × 4 B above the tile in its forward, and about 6 × N × V × 4 B in its backward beyond the fp32
  gradients and casts the bill counts. The bill, made for the GPU, leaves them out; the forward's remaining
  ~0.3-0.5 MB (under 1 %) is not attributed;
* reference, optimizer, generation: within 0.5 %.
"""

from __future__ import annotations

import json

import pytest
from conftest import FIXTURES

from memdoc.core.billing.bill import compute_bill
from memdoc.core.model.model_spec import spec_from_config
from memdoc.core.model.plan import parse_plan

CASES = sorted(p.stem for p in (FIXTURES / "posttrain").glob("*.json"))


@pytest.mark.parametrize("case", CASES)
def test_bill_per_phase_within_5_percent(case):
    doc = json.loads((FIXTURES / "posttrain" / f"{case}.json").read_text())
    spec = spec_from_config(doc["config"], model_id=f"tiny-{case}", source="test")
    bill = compute_bill(spec, parse_plan(**doc["plan"]), None)
    billed = {name: bill.phases[name].total for name in doc["phases"]}
    assert billed == pytest.approx(doc["phases"], rel=0.05)
