"""Issue 27: every plan number has a range from what exists, and a flag that does not apply is said.

The bounds are checked against their published sources, written here independently of memdoc's constants:
Llama 4 Scout's config.json `max_position_embeddings` 10,485,760; DeepSeek-V3's batch of 15,360 sequences of
4,096 tokens (technical report §4.2); xAI's Colossus, 200,000 GPUs; GB200 NVL72, 72 GPUs per NVLink domain.
"""

from __future__ import annotations

import pytest

from memdoc.core.model.plan import Method, Offload, Shard, TrainingPlan
from memdoc.core.model.plan_checks import inapplicable_flags
from memdoc.core.model.ranges import PLAN_BOUNDS
from memdoc.errors import PlanError

PUBLISHED = {
    "seq_len": 10_485_760,  # Llama 4 Scout, config.json
    "micro_batch": 15_360 * 4_096,  # DeepSeek-V3's tokens per step
    "grad_accum": 15_360 * 4_096,
    "eval_batch": 15_360 * 4_096,
    "gpus_per_node": 72,  # GB200 NVL72
    "nodes": 200_000,  # xAI Colossus
}


@pytest.mark.parametrize("field", sorted(PUBLISHED))
def test_bounds_are_the_published_figures(field):
    assert PLAN_BOUNDS[field].high == PUBLISHED[field]


@pytest.mark.parametrize("field", sorted(PLAN_BOUNDS))
def test_every_bounded_field_takes_its_bound_and_refuses_one_more_with_the_range(field):
    high = PLAN_BOUNDS[field].high
    # the GPUs a degree needs: one GPU per node; a sequence over 200,000 GPUs (8 × 25,000); TP inside one node
    gpus = {"nodes": {}, "cp": {"gpus_per_node": 8, "nodes": 25_000}, "tp": {"gpus_per_node": high}}
    TrainingPlan(**{field: high}, **gpus.get(field, {}))
    with pytest.raises(PlanError) as err:
        TrainingPlan(**{field: high + 1})
    message = str(err.value)
    assert f"{high:,}" in message and "beyond any real run" in message and "\n" not in message


@pytest.mark.parametrize(
    "value", [2**31, 2**31 - 1, 4_600_000_000_000_000_000, 10**5000], ids=["2^31", "int32", "4.6e18", "1e5000"]
)
def test_absurd_values_are_one_short_line(value):
    for field in ("grad_accum", "nodes", "micro_batch"):
        with pytest.raises(PlanError) as err:
            TrainingPlan(**{field: value})
        assert len(str(err.value)) < 200


def test_gpus_in_all_are_bounded_by_the_largest_cluster():
    TrainingPlan(gpus_per_node=8, nodes=25_000)  # 200,000 GPUs
    with pytest.raises(PlanError, match="200,000 in all"):
        TrainingPlan(gpus_per_node=8, nodes=25_001)


@pytest.mark.parametrize(
    "plan, given, searched, expected",
    [
        (TrainingPlan(), {"lora_rank", "lora_alpha"}, set(), ["--lora-rank", "--lora-alpha"]),
        (TrainingPlan(method=Method.LORA), {"lora_rank"}, set(), []),
        (TrainingPlan(), {"lora_rank"}, {"method"}, []),  # `plan` may still choose LoRA
        (TrainingPlan(), {"lora_rank", "method"}, {"method"}, ["--lora-rank"]),  # --method full given
        (TrainingPlan(), {"offload_to"}, set(), ["--offload-to"]),
        (TrainingPlan(gpus_per_node=2, shard=Shard.ZERO3, offload=Offload.OPTIMIZER), {"offload_to"}, set(), []),
        (TrainingPlan(), {"interconnect"}, set(), ["--interconnect"]),
        (TrainingPlan(nodes=2), {"interconnect"}, set(), []),
        (TrainingPlan(), {"eval_batch"}, set(), ["--eval-batch"]),
        (TrainingPlan(eval_samples=100), {"eval_batch"}, set(), []),
        (TrainingPlan(gpus_per_node=2, shard=Shard.ZERO2), {"save_gather"}, set(), ["--save-gather"]),
        (TrainingPlan(gpus_per_node=2, shard=Shard.ZERO3), {"save_gather"}, set(), []),
        (TrainingPlan(), {"micro_batch", "seq_len"}, set(), []),
    ],
)
def test_flags_that_do_not_apply_are_noted(plan, given, searched, expected):
    notes = inapplicable_flags(plan, frozenset(given), frozenset(searched))
    assert sorted(n.split()[0] for n in notes) == sorted(expected)
    assert all("does not apply" in n and "\n" not in n for n in notes)
