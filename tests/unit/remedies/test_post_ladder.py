"""The post-training rungs of the ladder (issue 23, item 3): each is quantified by the task's bill and timed by
the task's step, keeps TRL's batch rules, and is worded as TRL 1.16 runs it."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from memdoc.core.billing.bill import compute_bill
from memdoc.core.billing.posttrain.steptime import post_step_time
from memdoc.core.doctor.quantify import apply_lever
from memdoc.core.model.gpu import resolve_gpu
from memdoc.core.model.plan import parse_plan
from memdoc.core.model.plan_post import check_post_training_request
from memdoc.core.remedies.climb import climb
from memdoc.core.remedies.rungs import RUNGS
from memdoc.core.remedies.rungs_post import lean_vllm_memory
from memdoc.errors import PlanError
from memdoc.resolve.models import resolve_model
from tests.conftest import invoke

QWEN7 = resolve_model("Qwen/Qwen2.5-7B")
H100 = resolve_gpu("h100-sxm")
GIB = 2**30
TRL = Path(__import__("importlib.util").util.find_spec("trl").origin).parent
"""The installed TRL (1.16), read as text: importing it costs seconds."""
QWEN7_KV_PER_TOKEN = 2 * 28 * 4 * 128 * 2
"""K and V of every layer per token in bf16, from Qwen2.5-7B's config.json (28 layers, 4 kv heads, head dim
3584 / 28 = 128)."""


def test_every_rung_is_timed_by_the_tasks_step():
    """The issue's report: the bill says 4.24 s per GRPO step and the ladder's rung said 316 ms (the SFT step)."""
    plan = parse_plan(task="grpo", method="lora", batch=8, seq=512, vllm="colocate")
    steps = climb(QWEN7, plan, H100)
    assert steps
    for step in steps:
        assert step.step_seconds == pytest.approx(post_step_time(QWEN7, step.plan, H100).seconds)
        # the generation's decode alone reads the 15 GB of bf16 weights 512 times: over a second at 3.35 TB/s
        assert step.step_seconds > 512 * QWEN7.params.total * 2 / 3.35e12


def test_liger_rung_is_named_as_trl_runs_it():
    """TRL 1.16's GRPO/DPO trainers keep their fused LM head under `use_liger_kernel` and apply Liger's layer kernels
    only (their __init__ sets fused_linear_cross_entropy False): the rung says so for those tasks."""
    for trainer in ("grpo_trainer.py", "dpo_trainer.py"):
        assert '"fused_linear_cross_entropy": False' in (TRL / "trainer" / trainer).read_text()
    liger = next(r for r in RUNGS if r.id == "fused-loss")
    grpo = liger.action_for(parse_plan(task="grpo"))
    assert "layer kernels" in grpo and "fused LM head" in grpo and "cross-entropy" not in grpo
    assert "cross-entropy" in liger.action_for(parse_plan())  # supervised: Liger's fused linear cross-entropy


def test_precompute_ref_saves_the_reference_copy_in_dpo():
    """Full-fine-tuning DPO holds a bf16 reference copy; precomputing its log-probs removes it and its forward."""
    plan = parse_plan(task="dpo", batch=4, seq=2048)
    step = next(s for s in climb(QWEN7, plan, H100) if s.rung.id == "precompute-ref")
    assert step.plan.precompute_ref
    assert step.saved_bytes >= 2 * QWEN7.params.total  # the whole frozen copy, at least
    assert step.relative_time < 1  # the reference forward is gone from every step


def test_lora_rung_says_the_reference_is_the_adapter_disabled_base():
    lora = next(r for r in RUNGS if r.id == "lora")
    assert "adapter disabled" in lora.action_for(parse_plan(task="dpo"))
    # TRL builds no reference model for a PEFT policy (dpo_trainer.py: `if is_peft_model(model) ...`)
    source = (TRL / "trainer" / "dpo_trainer.py").read_text()
    assert "use_adapter" in source
    before = compute_bill(QWEN7, parse_plan(task="dpo", batch=1, seq=1024), H100)
    after = compute_bill(QWEN7, parse_plan(task="dpo", batch=1, seq=1024, method="lora"), H100)
    # the frozen copy and the policy's own states go: at least two bf16 copies of the weights less
    assert before.peak_allocated - after.peak_allocated >= 2 * 2 * QWEN7.params.total


def test_lean_vllm_fraction_holds_weights_and_the_generation_cache():
    plan = parse_plan(task="grpo", batch=8, seq=512, vllm="colocate")
    lean = lean_vllm_memory(plan, QWEN7, H100)
    weights = QWEN7.params.total * 2
    cache = 8 * (512 + 512) * QWEN7_KV_PER_TOKEN  # 8 completions per GPU at prompt + completion
    assert lean * H100.memory_bytes >= weights + cache
    assert (lean - 0.05) * H100.memory_bytes < weights + cache + 8 * GIB  # minimal, up to the profile pass
    assert lean < plan.vllm_memory  # below TRL's 0.3 default on an 80 GB card


def test_smaller_generation_batch_cuts_the_kv_cache():
    """transformers' generation: the cache holds the generation batch; the smallest TRL accepts is 8 (the global batch
    8 and num_generations 8), half of the default 16 (batch × accumulation)."""
    plan = parse_plan(task="grpo", method="lora", batch=8, seq=512, grad_accum=2)
    smaller = apply_lever(plan, {"generation_batch": "smallest"})
    assert smaller.generation_batch == 8
    saved = compute_bill(QWEN7, plan, H100).phases["generation"].total
    saved -= compute_bill(QWEN7, smaller, H100).phases["generation"].total
    assert saved >= 8 * 1024 * QWEN7_KV_PER_TOKEN  # eight rows' cache at 1,024 tokens
    assert post_step_time(QWEN7, smaller, H100).seconds > post_step_time(QWEN7, plan, H100).seconds


@pytest.mark.slow
def test_rungs_that_break_trls_rules_are_not_offered():
    """Halving 3 generations per prompt gives 2, and a generation batch of 3 is not a multiple of 2: TRL's own
    GRPOConfig refuses it, memdoc's check refuses it, and the climb does not offer it."""
    from trl import GRPOConfig

    with pytest.raises(ValueError):
        GRPOConfig(output_dir="/tmp/unused", per_device_train_batch_size=3, num_generations=2, use_cpu=True)
    plan = parse_plan(task="grpo", batch=3, seq=4096, num_generations=3, completion_len=4096)
    with pytest.raises(PlanError):
        check_post_training_request(plan.replace(num_generations=2))
    steps = climb(QWEN7, plan, resolve_gpu("24"))
    assert steps and all(s.plan.num_generations == 3 for s in steps)


def test_objective_changes_come_last():
    """beta 0, fewer generations and shorter completions change what is learned: after every rung that does not."""
    ranks = {r.id: r.rank for r in RUNGS if r.rank is not None}
    objective = {"beta-0", "fewer-generations", "shorter-completions"}
    assert min(ranks[i] for i in objective) > max(rank for i, rank in ranks.items() if i not in objective)
    assert math.isclose(next(r for r in RUNGS if r.id == "beta-0").lever["beta"][0], 0.0)


def test_phase_bars_fit_the_generation_label():
    result = invoke(
        "bill",
        "Qwen/Qwen2.5-7B",
        "--gpu",
        "h100-sxm",
        "--task",
        "grpo",
        "--method",
        "lora",
        "--vllm",
        "colocate",
        "--batch",
        "8",
    )
    assert result.exit_code == 0, result.output
    bars = [line for line in result.stdout.splitlines() if "█" in line]
    assert any(line.strip().startswith("generation █") for line in bars)
    assert len({line.index("█") for line in bars}) == 1  # every bar starts in one column
