"""One ladder of remedies: the rungs carry their levers, and the prescription ranks and the levers
`prescribe` quantifies are derived from them, in the order DESIGN.md documents."""

from __future__ import annotations

import dataclasses

import pytest

from memdoc.core.doctor.quantify import apply_lever
from memdoc.core.doctor.symptoms import list_symptoms
from memdoc.core.model.gpu import resolve_gpu
from memdoc.core.model.plan import parse_plan
from memdoc.core.remedies.levers import LADDER_RANK, PLAN_LEVERS, ladder_rank, ladder_ranks, plan_levers
from memdoc.core.remedies.rungs import RUNGS, Rung
from memdoc.resolve.models import resolve_model

DOCUMENTED = [
    ("accumulate",),
    ("checkpointing",),
    ("bf16",),
    ("lora", "qlora"),
    ("8bit-optimizer",),
    ("offload-optimizer",),
    ("shard",),
    ("offload-params",),
]
"""DESIGN.md's cost-increasing ladder, rung by rung: ① gradient accumulation → ② checkpointing → ③ bf16
→ ④ LoRA/QLoRA → ⑤ optimizer offload → ⑥ ZeRO-3/FSDP → ⑦ weight offload, with the 8-bit optimizer
between QLoRA and offload (symptoms.yaml and the ladder: ⑤, the rest one further)."""

RANKED = [rung for rung in RUNGS if rung.rank is not None]

BASES = [
    parse_plan(batch=4, precision="fp32", method="full", optimizer="adamw", gpus=2),
    parse_plan(batch=4, precision="fp32", method="full", optimizer="adamw", gpus=2, shard="zero3"),
    parse_plan(batch=4, precision="amp-bf16", method="lora", gpus=2),
    parse_plan(method="qlora", kbit_upcast=True),
    parse_plan(task="dpo", batch=2),
    parse_plan(task="grpo", batch=8, beta=0.04, vllm="colocate"),
    parse_plan(task="grpo", batch=8, grad_accum=2),
]
"""Plans on which every rung applies somewhere: each rung is checked on the first it applies to."""

MODEL, GPU = resolve_model("Qwen/Qwen2.5-7B"), resolve_gpu("h100-sxm")
"""What sizes the rungs whose value depends on the model and the card (the colocated vLLM fraction)."""


def _first_applied(rung: Rung):
    for base in BASES:
        after = rung.apply(base)
        if after is not None and rung.sized is not None:
            after = rung.sized(base, MODEL, GPU)
        if after is not None:
            return base, after
    raise AssertionError(f"rung {rung.id} applies to none of the test plans")


def test_rungs_are_ordered_cheapest_first():
    ranks = [rung.rank for rung in RANKED]
    assert ranks == sorted(ranks)


def test_ranks_follow_the_documented_ladder():
    positions = {}
    for rung in RANKED:
        positions.setdefault(rung.id, []).append(RUNGS.index(rung))
    for step, ids in enumerate(DOCUMENTED, 1):
        for rung_id in ids:
            # the rung the documented ladder names ranks at its step (bf16: the general rung, from AMP)
            assert max(r.rank for r in RANKED if r.id == rung_id) == step, rung_id
    last = [max(positions[rung_id]) for ids in DOCUMENTED for rung_id in ids]
    assert last == sorted(last)  # and stands in that order in RUNGS
    documented_levers = [{k: v[0] for k, v in r.lever.items()} for ids in DOCUMENTED for r in RANKED if r.id in ids]
    prescription_ranks = [ladder_rank(lever) for lever in documented_levers]
    assert prescription_ranks == sorted(prescription_ranks)


def test_ladder_rank_is_derived_from_the_rungs():
    carried = {}
    for rung in RANKED:
        for name, values in (*rung.lever.items(), *rung.undo.items()):
            for value in values:
                carried.setdefault((name, value), []).append(rung.rank)
    assert LADDER_RANK == {key: max(ranks) for key, ranks in carried.items()}  # nothing restated
    assert ("allocator", "expandable") not in LADDER_RANK  # expandable segments: off the cost ladder
    # the two rungs on which the tables disagreed: fused AdamW is taken at ①, as the ladder takes it;
    # bf16 is a lever of ①d (from fp32) and ③ (from AMP): a prescription ranks it at the costlier ③
    assert LADDER_RANK[("optimizer", "adamw-fused")] == 1
    assert LADDER_RANK[("precision", "bf16")] == 3


@pytest.mark.parametrize("rung", RANKED + [RUNGS[0]], ids=lambda r: f"{r.id}-{r.rank}")
def test_each_rung_sets_its_lever_and_quantify_applies_it(rung):
    assert set(rung.lever) <= set(PLAN_LEVERS)
    for name, values in rung.lever.items():
        assert set(values) <= set(PLAN_LEVERS[name])
    base, after = _first_applied(rung)
    lever = {name: values[0] for name, values in rung.lever.items()}
    quantified = apply_lever(base, lever, MODEL, GPU)
    assert quantified is not None
    for name, value in lever.items():
        if name == "micro_batch":
            assert after.micro_batch == quantified.micro_batch == int(value)
        elif name == "cp":  # a relative value, as micro_batch's: "node" is every GPU of the node (issue 29)
            assert value == "node" and after.cp == quantified.cp == base.gpus_per_node
        elif value == "half":  # completions per prompt, completion length
            assert getattr(after, name) == getattr(quantified, name) == getattr(base, name) // 2
        elif name == "generation_batch":  # TRL: a multiple of the global batch (8) and of num_generations (8)
            assert value == "smallest" and after.generation_batch == quantified.generation_batch == 8
        elif name == "vllm_memory":  # the fraction sized to the model: lower than the 0.3 default, on 0.05 steps
            assert value == "lean" and after.vllm_memory == quantified.vllm_memory < base.vllm_memory
            assert round(after.vllm_memory / 0.05, 6).is_integer()
        else:
            assert after.to_dict()[name] == quantified.to_dict()[name] == value


def test_a_new_rung_appears_in_the_ranks_and_the_levers():
    new = Rung("new-remedy", "a remedy", lambda p: None, rank=9, lever={"attention": ("sdpa",), "grad_accum": (2,)})
    rungs = (*RUNGS, new)
    assert ladder_ranks(rungs)[("attention", "sdpa")] == 9
    assert plan_levers(rungs)["grad_accum"] == (2,)
    assert ladder_ranks(RUNGS) == LADDER_RANK and plan_levers(RUNGS) == PLAN_LEVERS


def test_prescriptions_on_a_rung_lever_carry_its_rank():
    for symptom in list_symptoms():
        for p in symptom.prescriptions:
            for name, value in (p.lever or {}).items():
                rungs = [r.rank for r in RANKED if value in {**r.lever, **r.undo}.get(name, ())]
                if rungs:
                    assert p.rank >= max(rungs), p.id


def test_rung_fields_are_plan_fields():
    fields = {f.name for f in dataclasses.fields(BASES[0])}
    assert {name for rung in RUNGS for name in (*rung.lever, *rung.undo)} <= fields
