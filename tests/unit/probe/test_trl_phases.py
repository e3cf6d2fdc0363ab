"""`memdoc.probe.script.trl_phases` without running a trainer: the plan fields a TRL trainer's knobs give, and the
bill's phases put next to the measured ones by name."""

from __future__ import annotations

from types import SimpleNamespace

from memdoc.core.billing.bill import PhaseBill
from memdoc.core.billing.bill_json import with_bill
from memdoc.core.billing.vocabulary import STEP_PHASES
from memdoc.core.model.plan_post import Task, Vllm
from memdoc.probe.script.trl_phases import plan_fields


def test_grpo_knobs_give_the_online_plan_fields():
    knobs = {
        "beta": 0.04,
        "num_generations": 8,
        "max_completion_length": 256,
        "generation_batch_size": 64,
        "num_iterations": 2,
        "use_vllm": True,
        "vllm_mode": "colocate",
        "vllm_gpu_memory_utilization": 0.5,
        "vllm_enable_sleep_mode": True,
    }
    fields = plan_fields({"task": "grpo", "knobs": knobs}, (8, 256 + 100))
    assert fields == {
        "task": Task.GRPO,
        "beta": 0.04,
        "num_generations": 8,
        "num_iterations": 2,
        "completion_len": 256,
        "generation_batch": 64,
        "vllm": Vllm.COLOCATE,
        "vllm_memory": 0.5,
        "vllm_sleep": True,
        "seq_len": 100,  # the trained row is prompt + completion; the plan's seq_len is the prompt
    }


def test_dpo_counts_pairs_and_reads_precompute():
    fields = plan_fields({"task": "dpo", "knobs": {"beta": 0.1, "precompute_ref_log_probs": True}}, (8, 300))
    # chosen and rejected rows are one concatenated forward: 8 rows are 4 pairs
    assert fields == {"task": Task.DPO, "beta": 0.1, "precompute_ref": True, "micro_batch": 4}


def test_reward_model_has_no_beta():
    assert plan_fields({"task": "rm", "knobs": {"beta": None}}, None) == {"task": Task.RM}


def test_with_bill_names_the_phases_and_leaves_missing_ones_empty():
    phase = PhaseBill(weights=1, gradients=2, optimizer=3, activations=4, other=5)
    bill = SimpleNamespace(phases={"forward": phase, "backward": phase})
    out = with_bill({"phases": {}}, bill)
    assert out["billed"] == {p: (15 if p in ("forward", "backward") else None) for p in STEP_PHASES}
    assert with_bill({"phases": {}}, None)["billed"] == dict.fromkeys(STEP_PHASES)
