"""One engine, one answer (issue 35): `--offload optimizer` without `--shard` runs as DeepSpeed ZeRO-1 on several
GPUs (`engine_layout`), so its bill, step time and save
are those of the same plan with that `--shard` spelled out."""

import pytest
from conftest import bill_plan

from memdoc.core.billing.run_phases import run_bill
from memdoc.core.billing.steptime import step_seconds
from memdoc.core.model.gpu import resolve_gpu

SPELLINGS = [
    ({"gpus_per_node": 8, "offload": "optimizer", "optimizer": "adamw"}, "zero1"),
    ({"gpus_per_node": 8, "offload": "optimizer", "method": "lora"}, "zero1"),
]


@pytest.mark.parametrize(("flags", "shard"), SPELLINGS)
def test_two_spellings_of_one_engine_bill_and_time_alike(flags, shard):
    implicit = bill_plan("meta-llama/Llama-3.1-8B", "h100-sxm", **flags)
    explicit = bill_plan("meta-llama/Llama-3.1-8B", "h100-sxm", **flags, shard=shard)
    assert implicit.engine == explicit.engine == shard
    assert implicit.peak_allocated == explicit.peak_allocated
    gpu = resolve_gpu("h100-sxm")
    times = [step_seconds(b.model, b.plan, gpu) for b in (implicit, explicit)]
    assert times[0] == pytest.approx(times[1], rel=0.02)
    parts = [{n: (p.gpu_bytes, p.host_bytes) for n, p in run_bill(b).parts.items()} for b in (implicit, explicit)]
    assert parts[0] == parts[1]
