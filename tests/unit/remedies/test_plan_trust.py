"""Issue 25, "a plan a user can trust": host RAM as a constraint, step-time bands in the ranking, near-duplicate
plans collapsed, and QLoRA's time factor against published LoRA-vs-QLoRA measurements."""

import json
import math
import os
import statistics

import pytest
import yaml
from conftest import BENCHMARKS, invoke

from memdoc.core.billing.bill import bill_json, compute_bill
from memdoc.core.billing.steptime import QLORA_TIME_ERROR, QLORA_TIME_FACTOR, StepTime, step_time
from memdoc.core.model.gpu import resolve_gpu
from memdoc.core.model.plan import Checkpointing, Loss, Method, Offload, parse_plan
from memdoc.core.remedies.search import Candidate, admit, duplicates, search
from memdoc.core.remedies.time_band import (
    CALIBRATED_ERROR,
    FIRST_ORDER_ERROR,
    Basis,
    TimeBand,
    rank_seconds,
    time_band,
)
from memdoc.resolve.host import host_ram, machine_ram_bytes
from memdoc.resolve.models import resolve_model

GIB = 1024**3

# ----------------------------------------------------------------------------------- host RAM


def test_the_issues_405b_case_proposes_no_plan_over_the_host_ram():
    # The issue: `plan meta-llama/Llama-3.1-405B --gpu rtx-4090` proposed a plan needing 202 GiB of host RAM.
    result = invoke("plan", "meta-llama/Llama-3.1-405B", "--gpu", "rtx-4090", "--host-ram", "64", "--json")
    data = json.loads(result.stdout)
    assert data["host_ram"] == {"limit_bytes": 64 * GIB, "source": "--host-ram"}
    assert all(p["host_bytes_per_node"] <= 64 * GIB for p in data["plans"])
    assert result.exit_code == (0 if data["plans"] else 3)


def test_a_host_ram_limit_drops_the_plans_over_it_and_keeps_the_others():
    model, gpu = resolve_model("meta-llama/Llama-3.1-70B"), resolve_gpu("rtx-4090")
    free = search(model, parse_plan(), gpu)
    # what each plan offloads, per node, from the bill's own documented JSON
    need = [bill_json(c.bill)["host_bytes_per_node"] for c in free]
    limit = 64 * GIB
    assert any(n > limit for n in need) and any(n <= limit for n in need)  # the limit binds here
    limited = search(model, parse_plan(), gpu, host_ram_bytes=limit)
    assert limited and all(bill_json(c.bill)["host_bytes_per_node"] <= limit for c in limited)
    kept = [c.plan for c, n in zip(free, need) if n <= limit]
    assert [c.plan for c in limited][: len(kept)] == kept


def _gpus_here(monkeypatch, here: bool) -> None:
    """NVML sees a GPU on this machine (an H100), or none."""
    import memdoc.resolve.gpus as gpus
    from memdoc.core.model.gpu import resolve_gpu

    monkeypatch.setattr(gpus, "detect_local_gpu", lambda: resolve_gpu("h100-sxm") if here else None)


def _default_source() -> str:
    result = invoke("plan", "meta-llama/Llama-3.1-8B", "--gpu", "24", "--top", "1", "--json")
    return json.loads(result.stdout)["host_ram"]["source"]


def test_the_table_shows_host_ram_and_says_where_the_limit_came_from(monkeypatch):
    result = invoke("plan", "meta-llama/Llama-3.1-70B", "--gpu", "rtx-4090", "--host-ram", "100", "--top", "2")
    assert result.exit_code == 0, result.output
    assert "host RAM" in result.stdout and "host RAM limit: 100.00 GiB per node, --host-ram" in result.stdout
    _gpus_here(monkeypatch, True)
    assert _default_source().startswith("this machine's RAM")
    _gpus_here(monkeypatch, False)  # the GPUs are elsewhere: this machine's RAM is not the node's
    assert _default_source().startswith("not judged")


def test_this_machines_ram_matches_sysconf(monkeypatch):
    # /proc/meminfo's MemTotal and sysconf's physical pages both report the kernel's total RAM
    ram, source = machine_ram_bytes()
    assert ram == os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") and "/proc/meminfo" in source
    _gpus_here(monkeypatch, True)
    assert host_ram(1.5).bytes == 1.5 * GIB and host_ram(None).bytes == ram
    _gpus_here(monkeypatch, False)
    assert host_ram(1.5).bytes == 1.5 * GIB and host_ram(None).bytes is None


# ----------------------------------------------------------------------------------- time bands and ranking


def test_the_band_sums_each_terms_error_by_hand():
    plan = parse_plan(method="lora")
    calibrated = StepTime(compute=1.0, optimizer=0.0, communication=0.0, host=0.0, tokens=1000)
    offloaded = StepTime(compute=0.70, optimizer=0.0, communication=0.0, host=0.26, tokens=1000)
    assert time_band(plan, calibrated) == TimeBand(relative=CALIBRATED_ERROR, basis=Basis.CALIBRATED)
    band = time_band(plan, offloaded)
    assert band.basis is Basis.FIRST_ORDER
    assert band.relative == pytest.approx((0.70 * CALIBRATED_ERROR + 0.26 * FIRST_ORDER_ERROR) / 0.96)
    # 4% faster than the calibrated plan, but ±20%: it does not rank above it
    assert rank_seconds(offloaded, band) > rank_seconds(calibrated, time_band(plan, calibrated))
    much_faster = StepTime(compute=0.5, optimizer=0.0, communication=0.0, host=0.1, tokens=1000)
    assert rank_seconds(much_faster, time_band(plan, much_faster)) < 1.0  # 67% faster: more than its band
    qlora = time_band(parse_plan(method="qlora"), calibrated)
    assert qlora.basis is Basis.PUBLISHED and qlora.relative == pytest.approx(math.hypot(0.092, QLORA_TIME_ERROR))


@pytest.mark.parametrize(
    "model_id,gpu_name", [("Qwen/Qwen2.5-14B", "rtx-4090"), ("meta-llama/Llama-3.1-8B", "rtx-4090")]
)
def test_no_first_order_plan_ranks_above_a_measured_one_on_a_gain_within_its_band(model_id, gpu_name):
    model, gpu = resolve_model(model_id), resolve_gpu(gpu_name)
    found = search(model, parse_plan(), gpu, top=8)
    for i, above in enumerate(found):
        for below in found[i + 1 :]:
            if above.band.basis is Basis.FIRST_ORDER and below.band.basis is not Basis.FIRST_ORDER:
                gain = below.time.seconds / above.time.seconds - 1
                assert gain >= above.band.relative * 0.99, (above.changes, below.changes)


def test_the_issues_14b_case_does_not_put_weight_offload_first():
    # The issue: single-GPU QLoRA + ZeRO-3 parameter offload was first for a 4% modelled gain.
    data = json.loads(invoke("plan", "Qwen/Qwen2.5-14B", "--gpu", "rtx-4090", "--json").stdout)
    first = data["plans"][0]
    assert first["plan"]["offload"] == "none" and first["time"]["band"]["basis"] != "first-order"
    assert all(0 < p["time"]["band"]["relative"] < 1 for p in data["plans"])


# ----------------------------------------------------------------------------------- near-duplicates


def _candidate(model, gpu, base, plan):
    bill, time = compute_bill(model, plan, gpu), step_time(model, plan, gpu)
    changes = tuple(
        (f, getattr(base, f), getattr(plan, f))
        for f in ("offload", "optimizer")
        if getattr(base, f) != getattr(plan, f)
    )
    return Candidate(plan, bill, time, changes, time_band(plan, time))


def test_optimizer_offload_saving_a_sliver_collapses_into_the_plan_without_it():
    # LoRA's adapter states are a few MiB: offloading them saves far under 1% of the memory, and costs time.
    model, gpu = resolve_model("meta-llama/Llama-3.1-8B"), resolve_gpu("rtx-4090")
    base = parse_plan(method="lora", checkpointing="full", loss="fused", optimizer="adamw")
    simple = _candidate(model, gpu, base, base)
    offloaded = _candidate(model, gpu, base, base.replace(offload=Offload.OPTIMIZER))
    saved = simple.bill.process_total - offloaded.bill.process_total
    # issue 28: the offloaded plan runs DeepSpeed, whose reduce buckets (2 × hidden² bf16) cost more than the
    # adapters' states save: "saved" may be negative, and still under 1%
    assert abs(saved) < 0.01 * simple.bill.process_total
    assert duplicates(simple, offloaded)
    assert admit(admit([], offloaded), simple) == [simple] and admit(admit([], simple), offloaded) == [simple]
    other_lever = _candidate(model, gpu, base, base.replace(checkpointing=Checkpointing.NONE, loss=Loss.HF))
    assert not duplicates(simple, other_lever)  # two levers apart: both stay


@pytest.mark.parametrize("model_id", ["Qwen/Qwen2.5-14B", "meta-llama/Llama-3.1-8B"])
def test_no_two_listed_plans_are_one_lever_and_under_1_percent_apart(model_id):
    found = search(resolve_model(model_id), parse_plan(), resolve_gpu("rtx-4090"), top=8)
    for i, a in enumerate(found):
        for b in found[i + 1 :]:
            assert not duplicates(a, b), (a.changes, b.changes)


# ----------------------------------------------------------------------------------- QLoRA's time


def _published():
    data = yaml.safe_load((BENCHMARKS / "data" / "qlora_speed.yaml").read_text())
    assert all(row["source"] in data["sources"] for row in data["rows"])
    assert all(source["url"].startswith("https://") for source in data["sources"].values())
    fitted = [row["qlora"] / row["lora"] for row in data["rows"] if not row.get("held_out")]
    held_out = [row for row in data["rows"] if row.get("held_out")]
    return fitted, held_out


def test_the_qlora_factor_is_the_fit_of_the_published_rows():
    fitted, _ = _published()
    geometric_mean = math.exp(statistics.fmean(math.log(r) for r in fitted))
    assert QLORA_TIME_FACTOR == round(geometric_mean, 2)
    assert QLORA_TIME_ERROR == round(statistics.median(abs(r / QLORA_TIME_FACTOR - 1) for r in fitted), 2)


def test_the_held_out_published_row_is_within_10_percent():
    # Raschka's Llama-2-7B run (not used in the fit): memdoc's modelled QLoRA / LoRA step time for that setup
    # (bf16, LoRA r=8 on q and v, micro-batch 1 of an Alpaca-length sequence, one A100) against the published ratio.
    (row,) = _published()[1]
    model, gpu = resolve_model(row["model"]), resolve_gpu("a100-40")
    lora = parse_plan(method="lora", lora_rank=8, lora_targets="q_proj,v_proj", seq=512, optimizer="adamw")
    modelled = step_time(model, lora.replace(method=Method.QLORA), gpu).seconds / step_time(model, lora, gpu).seconds
    published = row["qlora"] / row["lora"]
    assert abs(modelled / published - 1) < 0.10, (modelled, published)
    assert abs(QLORA_TIME_FACTOR / published - 1) < 0.10
