"""The hardware choice (`memdoc plan --gpu A --gpu B --tokens N --price …`): hours and cost by hand,
the recommendation rule, the heavy-offload note, and the --price items."""

import pytest

from memdoc.core.billing.bill import compute_bill
from memdoc.core.billing.steptime import StepTime
from memdoc.core.model.gpu import resolve_gpu
from memdoc.core.model.plan import parse_plan
from memdoc.core.remedies.search import Candidate, search
from memdoc.core.remedies.time_band import time_band
from memdoc.core.reports.hardware import (
    HardwareOption,
    HardwareRow,
    hardware_report,
    heavy_offload,
    off_gpu_fraction,
    offload_notes,
    parse_price,
    recommend,
    with_prices,
)
from memdoc.errors import PlanError
from memdoc.resolve.models import resolve_model

MODEL = resolve_model("meta-llama/Llama-3.1-8B")


def row(label: str, seconds: float | None, *, price=None, tokens=1e9, gpu="a100-80", **flags) -> HardwareRow:
    """An option whose fastest plan (`flags`) takes `seconds` per optimizer step (None: nothing fits)."""
    card = resolve_gpu(gpu)
    plan = parse_plan(**flags)
    option = HardwareOption(label=label, gpu=card, plan=plan, price=price)
    if seconds is None:
        return HardwareRow(option=option, best=None, tokens=tokens)
    time = StepTime(compute=seconds, optimizer=0.0, communication=0.0, host=0.0, tokens=0)
    best = Candidate(plan=plan, bill=compute_bill(MODEL, plan, card), time=time, changes=(), band=time_band(plan, time))
    return HardwareRow(option=option, best=best, tokens=tokens)


def test_hours_and_cost_by_hand():
    r = row("8xh100", 2.0, price=2.5, tokens=2e8, gpu="h100-sxm", batch=4, accum=2, seq=1024, gpus=8)
    # one optimizer step: 4 sequences × 2 micro-batches × 1,024 tokens × 8 GPUs = 65,536 tokens
    assert r.tokens_per_step == 65_536
    # 2e8 / 65,536 = 3,051.7578125 steps × 2.0 s = 6,103.515625 s = 1.6954… h
    assert r.hours == pytest.approx(6_103.515625 / 3600, rel=1e-12)
    # hours × 8 GPUs × $2.50 per GPU-hour = $33.9084…
    assert r.cost == pytest.approx(6_103.515625 / 3600 * 8 * 2.5, rel=1e-12)
    assert r.cost == pytest.approx(33.908420138, rel=1e-9)


def test_no_price_no_cost_and_nothing_fits_no_time():
    assert row("a100-80", 1.0).cost is None
    empty = row("rtx-4090", None, price=0.4)
    assert (empty.fits, empty.hours, empty.cost, empty.step_seconds) == (False, None, None, None)


def test_recommends_the_fastest_without_prices():
    rows = [row("slow", 3.0), row("fast", 1.0), row("mid", 2.0), row("none", None)]
    best, why = recommend(rows)
    assert best.option.label == "fast"
    assert why.startswith("fastest for 1B tokens: ") and "next mid" in why


def test_recommends_the_cheapest_with_prices_even_when_slower():
    # 1B tokens at 2,048 tokens/step: slow 3 s → 406.9 h × $0.40 = $162.76; fast 1 s → 135.6 h × $2.00 = $271.27
    rows = [row("slow", 3.0, price=0.40), row("fast", 1.0, price=2.00)]
    best, why = recommend(rows)
    assert best.option.label == "slow"
    assert best.cost == pytest.approx(1e9 / 2048 * 3.0 / 3600 * 0.40)
    assert why.startswith("cheapest for 1B tokens: $162.76 in ") and "next fast, $271.27" in why


def test_equal_cost_goes_to_the_faster():
    # 2 s at $1 and 1 s at $2 cost the same per token: the faster wins
    best, _ = recommend([row("a", 2.0, price=1.0), row("b", 1.0, price=2.0)])
    assert best.option.label == "b"


def test_nothing_fits_anywhere_recommends_nothing():
    best, why = recommend([row("a", None), row("b", None)])
    assert best is None and why.startswith("no option fits")


def test_off_gpu_fraction_of_optimizer_offload_by_hand():
    """Full fine-tuning with ZeRO-Offload: gradients and optimizer states leave, the weights stay."""
    plan = parse_plan(offload="optimizer")
    bill = compute_bill(MODEL, plan, resolve_gpu("rtx-4090"))
    # issue 28: DeepSpeed ZeRO-Offload's host holds 18 bytes per parameter (fp32 master 4, exp_avg + exp_avg_sq 8,
    # fp32 gradient partition 4, the pinned 16-bit copy-back buffer 2: stage_1_and_2.py), plus the pinned staging
    # buffer of the largest tensor in 16 bits (`temp_grad_buffer_for_cpu_offload`: the 128,256 × 4,096 embedding,
    # measured on the CPU, tests/fidelity/test_engines_bill.py); bf16 weights (2) stay
    assert bill.host_bytes == 18 * MODEL.params.total + 2 * 128_256 * 4_096
    assert off_gpu_fraction(bill) == pytest.approx(18 / 20, rel=0.01)
    assert heavy_offload(bill)


def test_lora_optimizer_offload_is_light_and_weight_offload_is_heavy():
    card = resolve_gpu("rtx-4090")
    lora = compute_bill(MODEL, parse_plan(method="lora", offload="optimizer"), card)
    assert off_gpu_fraction(lora) < 0.01  # the adapters' states, next to 8B frozen weights
    assert not heavy_offload(lora)
    infinity = compute_bill(MODEL, parse_plan(method="lora", shard="zero3", offload="optimizer+params"), card)
    assert heavy_offload(infinity)


def test_heavy_offload_note_names_the_faster_card_and_the_factor():
    offloaded = row("rtx-4090", 3.8, gpu="rtx-4090", offload="optimizer")
    rented = row("a100-80", 0.5)
    slower = row("v100", 5.0, gpu="v100-32", precision="amp-fp16")  # no offload: no note, however slow
    noted = offload_notes([offloaded, rented, slower])
    # same tokens per step (2,048): the hours are in the ratio of the step times, 3.8 / 0.5 = 7.6
    assert noted[0].note == "heavy offload: 7.6× slower than a100-80"
    assert noted[1].note is None and noted[2].note is None


def test_no_note_when_the_offloaded_card_is_not_slower_or_no_card_runs_without_offload():
    offloaded = row("rtx-4090", 0.4, gpu="rtx-4090", offload="optimizer")
    assert offload_notes([offloaded, row("a100-80", 0.5)])[0].note is None
    other = row("a100-40", 1.0, offload="optimizer")
    assert [r.note for r in offload_notes([row("rtx-4090", 3.8, gpu="rtx-4090", offload="optimizer"), other])] == [
        None,
        None,
    ]


def test_a_recommended_heavy_offload_card_says_so():
    rows = offload_notes(
        [row("rtx-4090", 3.8, price=0.10, gpu="rtx-4090", offload="optimizer"), row("a", 0.5, price=2)]
    )
    best, why = recommend(rows)
    assert best.option.label == "rtx-4090" and why.endswith("; heavy offload: 7.6× slower than a")


@pytest.mark.parametrize(
    "item,expected",
    [("a100-80=1.20", ("a100-80", 1.2)), (" h100 = 2.5", ("h100", 2.5)), ("rtx-4090=0", ("rtx-4090", 0.0))],
)
def test_parse_price(item, expected):
    assert parse_price(item) == expected


@pytest.mark.parametrize("item", ["a100-80", "a100-80=", "=1.2", "a100-80=cheap", "a100-80=-1", "a100-80=nan"])
def test_parse_price_refuses_malformed_items(item):
    with pytest.raises(PlanError, match=r"expected NAME=USD"):
        parse_price(item)


def options(*labels):
    return [HardwareOption(label=x, gpu=resolve_gpu(x), plan=parse_plan()) for x in labels]


def test_prices_match_the_gpu_text_or_the_same_card():
    priced = with_prices(options("rtx-4090", "8xh100"), ["rtx-4090=0.4", "h100-sxm=2.5"])
    assert [o.price for o in priced] == [0.4, 2.5]
    assert [o.price for o in with_prices(options("rtx-4090"), [])] == [None]


def test_prices_for_a_gpu_not_given_or_missing_one():
    with pytest.raises(PlanError, match=r"^--price h200=3: no --gpu h200 was given \(given: rtx-4090, a100-80\)$"):
        with_prices(options("rtx-4090", "a100-80"), ["rtx-4090=1", "h200=3"])
    with pytest.raises(PlanError, match=r"^no --price for a100-80: price every --gpu, or none$"):
        with_prices(options("rtx-4090", "a100-80"), ["rtx-4090=1"])


def test_report_rows_are_the_search_s_fastest_plan_per_card():
    rtx, a100 = resolve_gpu("rtx-4090"), resolve_gpu("a100-80")
    base = parse_plan()
    report = hardware_report(
        MODEL, [HardwareOption(label="rtx-4090", gpu=rtx, plan=base), HardwareOption(label="a100", gpu=a100, plan=base)]
    )
    for r, card in zip(report.rows, (rtx, a100)):
        assert r.best.plan == search(MODEL, base, card, top=1)[0].plan
    assert report.recommended is min(report.rows, key=lambda r: r.hours)
