"""`memdoc plan` on post-training plans (issue 23, item 2): the search tries the knobs that change memory and not the
objective, keeps the task and TRL's batch rules, and lists what changes the training as suggestions."""

from __future__ import annotations

import itertools
import math

import pytest

from memdoc.core.billing.bill import compute_bill
from memdoc.core.billing.posttrain.steptime import task_step_time
from memdoc.core.model.gpu import resolve_gpu
from memdoc.core.model.plan import Checkpointing, Loss, parse_plan
from memdoc.core.model.plan_post import check_post_training_request
from memdoc.core.remedies.rungs_post import lean_vllm_memory
from memdoc.core.remedies.search import search
from memdoc.core.remedies.search_post import suggestions
from memdoc.core.remedies.time_band import rank_seconds, time_band
from memdoc.errors import PlanError
from memdoc.resolve.models import resolve_model

FIXED = frozenset({"method", "precision", "optimizer", "shard", "offload", "task", "seq_len"})
"""The supervised knobs held, so that brute force stays small: what is left is checkpointing, the loss, the
micro-batch and the post-training knobs."""

BRUTE_FORCE = [
    # DPO, full fine-tuning: precomputing the reference log-probs is searched
    ("Qwen/Qwen2.5-0.5B", "16", {"task": "dpo", "batch": 4, "seq": 2048}, ("precompute_ref",)),
    # GRPO with colocated vLLM: its fraction and sleep mode are searched
    (
        "Qwen/Qwen2.5-0.5B",
        "16",
        {"task": "grpo", "batch": 8, "seq": 1024, "vllm": "colocate", "vllm_memory": 0.5},
        ("vllm_memory", "vllm_sleep"),
    ),
    # GRPO with transformers' generation: the generation batch is searched (the default spans 4 accumulation steps)
    ("Qwen/Qwen2.5-0.5B", "8", {"task": "grpo", "batch": 16, "seq": 2048, "grad_accum": 4}, ("generation_batch",)),
]


def _ranked(model, plan, gpu):
    time = task_step_time(model, plan, gpu)
    return rank_seconds(time, time_band(plan, time))


def _brute_force(model, base, gpu, post_knob_values):
    """Every combination billed, no pruning: the best ranking time of the plans that fit comfortably and keep
    TRL's rules."""
    best = None
    per_gpu = base.micro_batch * base.grad_accum
    for ckpt, loss, micro, post in itertools.product(
        (Checkpointing.NONE, Checkpointing.SELECTIVE, Checkpointing.FULL),
        (Loss.HF, Loss.FUSED),
        [m for m in range(1, per_gpu + 1) if per_gpu % m == 0],
        itertools.product(*post_knob_values.values()),
    ):
        plan = base.replace(checkpointing=ckpt, loss=loss, micro_batch=micro, grad_accum=per_gpu // micro)
        for name, value in zip(post_knob_values, post):
            if name == "generation_batch" and value == "smallest":  # TRL: multiple of the global batch and groups
                value = math.lcm(plan.micro_batch * plan.dp_size, plan.num_generations)
            if name == "vllm_memory" and value == "lean":
                value = min(plan.vllm_memory, round(lean_vllm_memory(plan, model, gpu), 2))
            plan = plan.replace(**{name: value})
        try:
            check_post_training_request(plan)
        except PlanError:
            continue
        if not compute_bill(model, plan, gpu).comfortable:
            continue
        seconds = _ranked(model, plan, gpu)
        best = seconds if best is None else min(best, seconds)
    return best


@pytest.mark.slow
@pytest.mark.parametrize("model_id,gpu_name,flags,knobs", BRUTE_FORCE)
def test_search_matches_brute_force_on_post_training(model_id, gpu_name, flags, knobs):
    model, gpu = resolve_model(model_id), resolve_gpu(gpu_name)
    base = parse_plan(**flags)
    values = {
        "precompute_ref": (False, True),
        "vllm_memory": (base.vllm_memory, "lean"),
        "vllm_sleep": (False, True),
        "generation_batch": (None, "smallest"),
    }
    best = _brute_force(model, base, gpu, {k: values[k] for k in knobs})
    assert best is not None
    found = search(model, base, gpu, top=1, fixed=FIXED | (set(flags) - {"batch", "grad_accum"}) - set(knobs))
    assert found
    assert best <= found[0].rank_seconds <= best * 1.01  # ties within search.TIE go to the plan with fewer changes
    assert found[0].plan.task is base.task
    check_post_training_request(found[0].plan)
    assert not compute_bill(model, base, gpu).comfortable  # the knobs are needed: the plan as given does not fit
    smallest = math.lcm(found[0].plan.micro_batch, found[0].plan.num_generations)  # TRL's rule on one GPU
    saving = {"precompute_ref": True, "vllm_sleep": True, "generation_batch": smallest}
    assert any(getattr(found[0].plan, k) == saving.get(k, -1) for k in knobs)


def test_search_never_changes_the_objective():
    model, gpu = resolve_model("Qwen/Qwen2.5-7B"), resolve_gpu("h100-sxm")
    base = parse_plan(task="grpo", batch=8, seq=512, beta=0.04, vllm="colocate")
    for c in search(model, base, gpu, top=5, fixed=frozenset({"task", "vllm"})):
        assert (c.plan.task, c.plan.beta, c.plan.num_generations, c.plan.completion_len) == ("grpo", 0.04, 8, 512)
        assert c.plan.vllm.value == "colocate"
    said = " ".join(suggestions(base))
    assert "--beta 0" in said and "--completion-len 256" in said
    # TRL's per-device batch counts completions: halving 8 generations saves memory only through a smaller
    # generation batch of whole groups; 8 completions (one global batch) cannot shrink, 16 can (to 4).
    assert "--generations" not in said
    wide = " ".join(suggestions(parse_plan(task="grpo", batch=4, seq=512, generation_batch=16)))
    assert "--generations 4 --generation-batch 4" in wide
    assert suggestions(parse_plan(task="grpo", batch=8, seq=512)) and not any(
        "--beta" in s for s in suggestions(parse_plan(task="grpo", batch=8))
    )  # TRL 1.16's GRPO default beta is 0.0 already
