"""Generated plans for the trainer readers' round trips through memdoc's emitters (Axolotl, LLaMA-Factory):
every plan field a trainer YAML can say, as `TrainingPlan.from_dict` takes it."""

from __future__ import annotations

from hypothesis import assume
from hypothesis import strategies as st

from memdoc.core.model.plan import TrainingPlan
from memdoc.errors import PlanError

PLAN_VALUES = st.fixed_dictionaries(
    {
        "method": st.sampled_from(["full", "lora", "qlora"]),
        "precision": st.sampled_from(["bf16", "fp16", "fp32", "amp-bf16", "amp-fp16"]),
        "optimizer": st.sampled_from(
            ["adamw-fused", "adamw-foreach", "adamw-8bit", "paged-adamw-8bit", "sgd", "adafactor", "lion"]
        ),
        "micro_batch": st.integers(1, 64),
        "seq_len": st.integers(1, 131072),
        "grad_accum": st.integers(1, 64),
        "checkpointing": st.sampled_from(["none", "full", "selective"]),
        "attention": st.sampled_from(["sdpa", "eager"]),
        "loss": st.sampled_from(["hf", "fused", "fused-ce"]),
        "lora_rank": st.integers(1, 256),
        "lora_alpha": st.one_of(st.none(), st.integers(1, 512)),
        "lora_dropout": st.sampled_from([0.0, 0.05, 0.1]),
        "lora_targets": st.sampled_from([["all-linear"], ["q_proj", "v_proj"], ["q_proj", "k_proj", "o_proj"]]),
        "shard": st.sampled_from(["none", "zero1", "zero2", "zero3", "fsdp"]),
        "offload": st.sampled_from(["none", "optimizer", "optimizer+params"]),
        "gpus_per_node": st.sampled_from([1, 2, 8]),
    }
)


def generated_plan(values: dict) -> TrainingPlan:
    try:
        return TrainingPlan.from_dict(values)
    except PlanError:
        assume(False)
