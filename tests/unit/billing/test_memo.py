"""Bills once per (model, plan, GPU) and simulations once per event stream: what the caches return is
what computing from scratch returns (`compute_bill.__wrapped__`, `simulate`), and nothing else shares."""

import dataclasses

from memdoc.core.billing.bill import compute_bill
from memdoc.core.billing.reserved import reserved_verdict, simulate
from memdoc.core.billing.step_events import training_events
from memdoc.core.model.gpu import resolve_gpu
from memdoc.core.model.plan import parse_plan
from memdoc.resolve.models import resolve_model

MODEL = "meta-llama/Llama-3.2-1B"


def _numbers(bill) -> tuple:
    return (
        bill.plan.to_dict(),
        {name: phase.to_dict() for name, phase in bill.phases.items()},
        bill.peak_reserved,
        bill.process_total,
        bill.fits,
        bill.min_memory_bytes,
    )


def test_an_equal_plan_gets_the_bill_computed_from_scratch():
    model, gpu = resolve_model(MODEL), resolve_gpu("24")
    first = compute_bill(model, parse_plan(micro_batch=2, method="lora"), gpu)
    again = compute_bill(model, parse_plan(micro_batch=2, method="lora"), gpu)  # a new, equal plan
    assert again is first
    assert _numbers(again) == _numbers(compute_bill.__wrapped__(model, parse_plan(micro_batch=2, method="lora"), gpu))


def test_another_model_object_plan_or_gpu_is_billed_anew():
    model, gpu = resolve_model(MODEL), resolve_gpu("24")
    plan = parse_plan(micro_batch=2)
    base = compute_bill(model, plan, gpu)
    copy = dataclasses.replace(model)  # equal fields, its own object (and config dict)
    assert compute_bill(copy, plan, gpu) is not base
    assert compute_bill(model, plan.replace(micro_batch=3), gpu).plan.micro_batch == 3
    other_gpu = resolve_gpu("80")
    assert compute_bill(model, plan, other_gpu).gpu is other_gpu


def test_an_integer_dropout_keeps_its_own_plan_in_the_bill():
    model = resolve_model(MODEL)
    as_float = compute_bill(model, parse_plan(method="lora", lora_dropout=0.0))
    as_int = compute_bill(model, parse_plan(method="lora").replace(lora_dropout=0))
    assert type(as_float.plan.lora_dropout) is float and type(as_int.plan.lora_dropout) is int


def test_an_equal_event_stream_gets_the_stats_of_a_fresh_simulation():
    model = resolve_model(MODEL)
    # paged 8-bit AdamW keeps the same 8-bit states on the GPU as bitsandbytes' AdamW8bit (paging moves them
    # to the host only under memory pressure): the two plans make the same allocations
    one = compute_bill(model, parse_plan(optimizer="adamw-8bit"))
    two = compute_bill(model, parse_plan(optimizer="paged-adamw-8bit"))
    events = training_events(two)
    assert events == training_events(one) and events is not training_events(one)
    assert reserved_verdict(events) is reserved_verdict(training_events(one))
    assert reserved_verdict(events).stats == simulate(events)
