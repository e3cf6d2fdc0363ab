"""`memdoc plan` (the search) and the ladder that follows the same costs."""

import itertools
import json

import pytest
from typer.testing import CliRunner

from memdoc.cli import app
from memdoc.core.billing.bill import compute_bill
from memdoc.core.billing.steptime import step_seconds, step_time
from memdoc.core.billing.verdict import fit_answer
from memdoc.core.model.gpu import resolve_gpu
from memdoc.core.model.lora import fit_lora_targets
from memdoc.core.model.plan import Checkpointing, Loss, Method, Offload, Optimizer, Precision, Shard, parse_plan
from memdoc.core.remedies.climb import climb
from memdoc.core.remedies.search import host_ram_needed, search
from memdoc.core.remedies.time_band import rank_seconds, time_band
from memdoc.errors import PlanError
from memdoc.resolve.models import resolve_model

runner = CliRunner()


def fits_comfortably(model, plan, gpu):
    # Issue 25's one fit rule (was: process total ≤ 95% of the card): the simulated minimum memory fits with
    # more headroom than its benchmarked error.
    return fit_answer(compute_bill(model, plan, gpu).min_memory_bytes, gpu.memory_bytes).comfortable


def ranked(model, plan, gpu):
    time = step_time(model, plan, gpu)
    return rank_seconds(time, time_band(plan, time))


CASES = [
    ("meta-llama/Llama-2-7b-hf", "24", {"optimizer": "adamw"}),
    ("meta-llama/Llama-3.1-8B", "a100-80", {"optimizer": "adamw"}),
    ("Qwen/Qwen2.5-3B", "24", {"method": "lora", "precision": "fp32"}),
    ("Qwen/Qwen2.5-7B", "rtx-4090", {"batch": 4, "seq": 4096}),
    ("meta-llama/Llama-3.1-8B", "h100-sxm", {"gpus": 8, "batch": 4, "seq": 4096, "precision": "amp-bf16"}),
]


@pytest.mark.parametrize("model_id,gpu_name,flags", CASES)
def test_search_returns_only_fitting_plans_of_the_same_global_batch(model_id, gpu_name, flags):
    model, gpu, base = resolve_model(model_id), resolve_gpu(gpu_name), parse_plan(**flags)
    found = search(model, base, gpu)
    assert found
    for c in found:
        assert fits_comfortably(model, c.plan, gpu)
        assert c.plan.micro_batch * c.plan.grad_accum == base.micro_batch * base.grad_accum
    # Issue 25: ranked by the step time and its uncertainty (first-order plans by the upper end of their band)
    ranks = [ranked(model, c.plan, gpu) for c in found]
    assert ranks == sorted(ranks)


@pytest.mark.parametrize("model_id,gpu_name,flags", CASES)
def test_search_is_never_slower_than_the_ladder(model_id, gpu_name, flags):
    model, gpu, base = resolve_model(model_id), resolve_gpu(gpu_name), parse_plan(**flags)
    steps = climb(model, base, gpu)
    ladder_plan = steps[-1].plan if steps else base
    if not fits_comfortably(model, ladder_plan, gpu):
        pytest.skip("the ladder's plan does not fit comfortably")
    best = search(model, base, gpu, top=1)[0]
    # Plans within 1% (search.TIE) are equally fast; the search lists the one with the fewest changes.
    # Issue 25: compared by the ranking time (a first-order plan by the upper end of its band), not the bare time.
    assert ranked(model, best.plan, gpu) <= ranked(model, ladder_plan, gpu) * 1.01


BRUTE_FORCE = [
    # (model, GPU, plan flags, methods searched, host RAM GiB): the second is full fine-tuning on a 4 GiB card,
    # where only offloaded plans fit and the host-RAM limit rules out the weight offload: 9.2 GiB on the host
    # against 8.5 GiB for the optimizer's alone (DeepSpeed's 18 bytes/param + the weights' 16-bit copy, issue 28).
    ("Qwen/Qwen2.5-0.5B", "8", {}, tuple(Method), None),
    ("Qwen/Qwen2.5-0.5B", "4", {"method": "full"}, (Method.FULL,), 9),
]


@pytest.mark.slow
@pytest.mark.parametrize("model_id,gpu_name,flags,methods,host_gib", BRUTE_FORCE)
def test_search_matches_brute_force_on_a_small_case(model_id, gpu_name, flags, methods, host_gib):
    # Every combination billed, no pruning, with issue 25's constraints (fits comfortably, offloaded states
    # within the host RAM) and ranking (a first-order plan by the upper end of its band): the search's best
    # must be the true best.
    model, gpu = resolve_model(model_id), resolve_gpu(gpu_name)
    base = parse_plan(batch=4, seq=2048, **flags)
    host = None if host_gib is None else host_gib * 1024**3
    best, over_host = None, 0
    for method, precision, optimizer, ckpt, loss, offload, micro in itertools.product(
        methods,
        (Precision.BF16, Precision.AMP_BF16),
        (Optimizer.ADAMW, Optimizer.ADAMW_FUSED, Optimizer.ADAMW_8BIT, Optimizer.PAGED_ADAMW_8BIT),
        Checkpointing,
        Loss,
        Offload,
        (1, 2, 4),
    ):
        shard = Shard.ZERO3 if offload is Offload.OPTIMIZER_PARAMS else Shard.NONE
        try:
            plan = base.replace(
                method=method,
                precision=precision,
                optimizer=optimizer,
                checkpointing=ckpt,
                loss=loss,
                offload=offload,
                shard=shard,
                micro_batch=micro,
                grad_accum=4 // micro,
            )
        except PlanError:
            continue
        plan = fit_lora_targets(plan, model)
        if not fits_comfortably(model, plan, gpu):
            continue
        if host is not None and host_ram_needed(compute_bill(model, plan, gpu)) > host:
            over_host += 1
            continue
        seconds = ranked(model, plan, gpu)
        best = seconds if best is None else min(best, seconds)
    assert host is None or over_host  # the limit binds
    fixed = frozenset(flags)
    found = search(model, base, gpu, top=1, fixed=fixed, host_ram_bytes=host)[0].rank_seconds
    assert best <= found <= best * 1.01  # ties within search.TIE go to the plan with fewer changes


def test_flags_the_user_passed_are_kept():
    model, gpu = resolve_model("meta-llama/Llama-3.1-8B"), resolve_gpu("a100-80")
    base = parse_plan(method="full", checkpointing="none", optimizer="adamw")
    found = search(model, base, gpu, fixed=frozenset({"method", "checkpointing"}))
    assert found and all(c.plan.method is Method.FULL and c.plan.checkpointing is Checkpointing.NONE for c in found)
    assert all(("method", Method.FULL, Method.LORA) not in c.changes for c in found)


def test_global_batch_is_split_into_micro_batch_and_accumulation():
    model, gpu = resolve_model("meta-llama/Llama-3.1-8B"), resolve_gpu("h100-sxm")
    found = search(model, parse_plan(gpus=8), gpu, global_batch=64, fixed=frozenset({"gpus_per_node"}))
    assert all(c.plan.micro_batch * c.plan.grad_accum * 8 == 64 for c in found)
    with pytest.raises(PlanError):
        search(model, parse_plan(gpus=8), gpu, global_batch=12)


@pytest.mark.slow
def test_search_of_an_8b_model_is_fast():
    import time

    model, gpu = resolve_model("meta-llama/Llama-3.1-8B"), resolve_gpu("h100-sxm")
    start = time.perf_counter()
    search(model, parse_plan(gpus=8, batch=4), gpu, global_batch=256)
    # The bound is 2 s (benchmarks/speed.py measures it); 10 s here only catches a lost pruning.
    assert time.perf_counter() - start < 10


# ----------------------------------------------------------------------------------- the ladder


def final_plan(model_id, gpu_name, **flags):
    model, gpu, base = resolve_model(model_id), resolve_gpu(gpu_name), parse_plan(**flags)
    steps = climb(model, base, gpu)
    return model, gpu, base, steps


def test_fp32_lora_on_24gb_needs_bf16_alone():
    # loss fused-ce pinned: with every Liger kernel (--loss fused) fp32 LoRA fits 24 GB too
    # (SwiGLU keeps 2 of 3 tensors)
    model, gpu, base, steps = final_plan(
        "Qwen/Qwen2.5-3B", "24", method="lora", precision="fp32", optimizer="adamw", loss="fused-ce"
    )
    final = steps[-1].plan
    assert steps[-1].fits
    assert final == base.replace(precision=Precision.BF16)


def test_full_8b_on_70gb_gets_fused_adamw_not_lora():
    # 74.8 GiB allocated at the optimizer step. (On an 80 GB card the allocator-true verdict is that it
    # runs as given, the allocator releasing its cache and retrying: no remedy at all.)
    model, gpu, base, steps = final_plan("meta-llama/Llama-3.1-8B", "70", optimizer="adamw")
    final = steps[-1].plan
    assert steps[-1].fits and final.method is Method.FULL and final.optimizer is Optimizer.ADAMW_FUSED


def test_70b_on_24gb_reaches_weight_offload_on_one_gpu():
    model, gpu, base, steps = final_plan("meta-llama/Llama-3.1-70B", "24", optimizer="adamw")
    assert "offload-params" in [s.rung.id for s in steps]
    assert steps[-1].fits and steps[-1].plan.offload is Offload.OPTIMIZER_PARAMS and steps[-1].plan.world_size == 1


_GROUPS = [("micro_batch", "grad_accum"), ("shard", "offload", "optimizer"), ("offload", "optimizer")]


@pytest.mark.parametrize(
    "model_id,gpu_name,flags",
    CASES
    + [
        ("meta-llama/Llama-2-7b-hf", "24", {"batch": 4, "optimizer": "adamw"}),
        ("meta-llama/Llama-3.1-70B", "24", {"optimizer": "adamw"}),
    ],
)
def test_the_ladders_final_plan_is_minimal(model_id, gpu_name, flags):
    # Undo each change from the user's plan (alone, or with the fields that move with it): the
    # result no longer fits, is invalid, or is slower by more than the 5% a remedy must be worth.
    model, gpu, base, steps = final_plan(model_id, gpu_name, **flags)
    if not steps:
        pytest.skip("fits as given")
    final = steps[-1].plan
    assert steps[-1].fits
    changed = [f for f, v in final.to_dict().items() if v != base.to_dict()[f] and f != "lora_targets"]
    assert changed
    seconds = step_seconds(model, final, gpu)
    groups = [(f,) for f in changed if f not in ("micro_batch", "grad_accum")]
    groups += [g for g in _GROUPS if set(g) & set(changed)]
    for fields in groups:
        try:
            undone = fit_lora_targets(final.replace(**{f: getattr(base, f) for f in fields}), model)
        except PlanError:
            continue
        if undone == final:
            continue
        still = compute_bill(model, undone, gpu).fits and step_seconds(model, undone, gpu) <= seconds * 1.05
        assert not still, f"{fields} is not needed: {undone}"


# ----------------------------------------------------------------------------------- the command


def test_plan_json_contract():
    result = runner.invoke(app, ["plan", "meta-llama/Llama-3.1-8B", "--gpu", "24", "--top", "3", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert 1 <= len(data["plans"]) <= 3
    for entry in data["plans"]:
        assert set(entry) >= {"plan", "per_gpu", "fits", "time", "changes"}
        # issue 25's one fit rule: the minimum memory fits with more headroom than its error (was: 5% headroom)
        assert entry["fits"] is True and entry["fit"] == "comfortable"
        assert entry["per_gpu"]["min_memory_bytes"] * 1.1 < 24 * 1024**3
        assert entry["time"]["step_seconds"] > 0 and entry["time"]["tokens_per_second"] > 0
        assert all(set(c) == {"field", "from", "to"} for c in entry["changes"])


def test_plan_keeps_explicit_flags_and_exits_3_when_nothing_fits():
    data = json.loads(
        runner.invoke(app, ["plan", "meta-llama/Llama-3.1-8B", "--gpu", "a100-80", "--method", "full", "--json"]).output
    )
    assert data["plans"] and all(p["plan"]["method"] == "full" for p in data["plans"])
    assert "method" in data["fixed"]
    result = runner.invoke(
        app, ["plan", "meta-llama/Llama-3.1-70B", "--gpu", "24", "--method", "full", "--offload", "none"]
    )
    assert result.exit_code == 3 and "No plan fits" in result.output


def test_plan_emit_writes_the_fastest_plan(tmp_path):
    out = tmp_path / "sft.yaml"
    result = runner.invoke(
        app,
        [
            "plan",
            "meta-llama/Llama-3.1-8B",
            "--gpu",
            "rtx-4090",
            "--method",
            "lora",
            "--emit",
            "trl",
            "-o",
            str(out),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert out.exists() and data["emitted"]["plan"] == data["plans"][0]["plan"]
    assert runner.invoke(app, ["plan", "meta-llama/Llama-3.1-8B", "--gpu", "24", "-o", str(out)]).exit_code == 2


@pytest.mark.slow
def test_plan_has_help_with_examples_and_imports_no_torch():
    import subprocess
    import sys

    assert "Examples" in runner.invoke(app, ["plan", "--help"]).output
    code = (
        "import sys, runpy; sys.argv=['memdoc','plan','meta-llama/Llama-2-7b','--gpu','24','--json'];"
        "\ntry:\n    runpy.run_module('memdoc', run_name='__main__')\nexcept SystemExit: pass\n"
        "assert 'torch' not in sys.modules, 'torch was imported'; assert 'transformers' not in sys.modules"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["plans"]


def test_plan_never_offers_a_zero3_layout_the_engine_cannot_hold():
    """Issue 28's case: Llama-3.1-70B full fine-tuning on 8 × H100. DeepSpeed's ZeRO-3 in bf16 holds 16 bytes per
    parameter (bf16 weights and gradients, fp32 master, exp_avg and exp_avg_sq: measured on the CPU,
    tests/fidelity/test_engines_bill.py), 70,553,706,496 × 16 / 8 GPUs = 141 GB per GPU, over an 80 GB card: every
    plan that fits must offload (the old 8-bytes-per-parameter layout ranked an unoffloaded one first)."""
    model, gpu = resolve_model("meta-llama/Llama-3.1-70B"), resolve_gpu("h100-sxm")
    assert model.params.total == 70_553_706_496 and model.params.total * 16 / 8 > gpu.memory_bytes
    base = parse_plan(method="full", gpus=8)
    found = search(model, base, gpu, top=5, fixed=frozenset({"method"}), host_ram_bytes=2048 * 1024**3)
    assert found and all(c.plan.offload is not Offload.NONE for c in found)
