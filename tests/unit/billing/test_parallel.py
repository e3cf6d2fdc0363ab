"""--cp and --tp: the plan's rules, the rank's model and buffers by hand arithmetic, the plan search's CP rung.

The real implementations (torch TP, DeepSpeed Ulysses on 2 CPU ranks) are in
`tests/fidelity/test_parallel_ranks.py`; here the arithmetic for Llama-3.1-8B (hidden 4096, 32 heads, 8 kv
heads of 128, MLP 14336, vocabulary 128256, 32 layers, untied: its config.json).
"""

import pytest
from conftest import invoke

from memdoc.core.billing.bill import compute_bill
from memdoc.core.billing.parallel import parallel_traffic, rank_share, tp_rank_model
from memdoc.core.model.gpu import resolve_gpu
from memdoc.core.model.plan import parse_plan
from memdoc.core.remedies.search import search
from memdoc.errors import PlanError
from memdoc.resolve.models import resolve_model

H, Q, KV, FF, V, L = 4096, 4096, 1024, 14336, 128256, 32


@pytest.fixture(scope="module")
def llama8b():
    return resolve_model("meta-llama/Llama-3.1-8B")


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ({"gpus": 8, "cp": 3}, "must divide the 8 GPUs"),
        ({"gpus": 4, "nodes": 2, "tp": 8}, "--tp 8 must divide --gpus 4"),
        ({"gpus": 2, "tp": 2, "shard": "fsdp2"}, "leaves one GPU per shard group"),
        ({"gpus": 2, "cp": 0}, "--cp must be a positive integer"),
    ],
)
def test_plan_refuses_degrees_the_gpus_cannot_take(values, says):
    with pytest.raises(PlanError, match=says):
        parse_plan(**values)


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ({"gpus": 6, "cp": 3}, "nearest: --cp 2, or --cp-impl ring"),  # 32 heads: 2 and 4 are both 1 away
        ({"gpus": 6, "tp": 3}, "nearest: --tp 2"),  # 8 kv heads
        ({"gpus": 2, "cp": 2, "attention": "eager"}, "--attention sdpa"),
    ],
)
def test_bill_refuses_splits_the_heads_cannot_take(llama8b, values, says):
    with pytest.raises(PlanError, match=says):
        compute_bill(llama8b, parse_plan(**values))


def test_tp_rank_model_is_the_tp_plan_shard(llama8b):
    """transformers' Llama tp_plan: q/k/v, gate/up colwise, o/down rowwise (÷ tp), lm_head colwise (÷ tp);
    the embedding and the norms are not in the plan (whole)."""
    rank = tp_rank_model(llama8b, 8)
    layer = (Q * H + 2 * KV * H + H * Q + 3 * H * FF) // 8 + 2 * H
    assert rank.params.total == V * H + L * layer + H + V * H // 8
    assert tp_rank_model(llama8b, 8) is rank  # one object per (model, tp): its bills are memoised


def test_ulysses_buffers_and_traffic_by_hand(llama8b):
    plan = parse_plan(gpus=8, cp=8, seq=65536, checkpointing="full")
    share = rank_share(llama8b, plan)
    tokens = 65536 // 8
    # q, k, v before the all-to-all, and q's permuted copy: (2·q + 2·kv) × bf16 per local token
    assert share.forward_buffers == share.backward_buffers == tokens * (2 * Q + 2 * KV) * 2
    assert share.extra_saved == tokens * Q * 2 * L  # o_proj's input after the output all-to-all
    # forward, backward and checkpointing's recompute: 3 × 7/8 of q, k, v, output per layer
    assert parallel_traffic(llama8b, plan).cp_bytes == 3 * 7 / 8 * tokens * (2 * Q + 2 * KV) * 2 * L


def test_tp_traffic_by_hand(llama8b):
    plan = parse_plan(gpus=8, tp=8, seq=4096)
    tokens, share = 4096, 7 / 8
    per_layer = (2 + 5) * 2 * share * tokens * H * 2  # forward o/down, backward q/k/v/gate/up all-reduces
    head = share * tokens * V * 2 + 2 * share * tokens * H * 2  # logits gathered, the head input's gradient
    assert parallel_traffic(llama8b, plan).tp_bytes == per_layer * L + head


def test_cp_splits_the_activations_and_keeps_the_states(llama8b):
    gpu = resolve_gpu("h100-sxm")
    base = parse_plan(gpus=8, seq=65536, checkpointing="full", shard="fsdp2", loss="fused")
    alone, split = compute_bill(llama8b, base, gpu), compute_bill(llama8b, base.replace(cp=8), gpu)
    assert split.peak.weights == alone.peak.weights and split.peak.optimizer == alone.peak.optimizer
    # full checkpointing keeps each layer's input: T × hidden × bf16, a rank's T being seq/cp
    assert alone.acts.layers_saved == L * 65536 * H * 2
    assert split.acts.layers_saved == L * 65536 // 8 * H * 2
    assert split.peak_allocated < alone.peak_allocated


def test_plan_takes_cp_when_nothing_fits_without_it(llama8b):
    gpu = resolve_gpu("h100-sxm")
    base = parse_plan(gpus=8, seq=262144, allow_long=True)
    # a 256 GiB host: offloading the checkpointed inputs instead (32 layers × 262,144 × 4,096 × 2 bytes = 64 GiB
    # per GPU, 512 GiB per node) does not fit it
    host = 256 * 1024**3
    fixed = frozenset({"method", "gpus_per_node", "seq_len"})
    found = search(llama8b, base, gpu, fixed=fixed, top=1, host_ram_bytes=host)
    assert found and found[0].plan.cp > 1
    plan = found[0].plan
    assert plan.micro_batch * plan.grad_accum * plan.dp_size == 8  # the user's global batch, kept
    assert ("cp", 1, plan.cp) in found[0].changes


def test_json_carries_the_degrees():
    result = invoke("bill", "meta-llama/Llama-3.1-8B", "--gpu", "8xh100", "--cp", "4", "--tp", "2", "--json")
    assert result.exit_code == 0, result.output
    import json

    plan = json.loads(result.stdout)["plan"]
    assert (plan["cp"], plan["cp_impl"], plan["tp"]) == (4, "ulysses", 2)


def test_diagnose_refuses_cp_and_tp():
    result = invoke("diagnose", "meta-llama/Llama-3.2-1B", "--gpus", "2", "--tp", "2")
    assert result.exit_code == 2
    assert "diagnose traces one process" in result.output and "Traceback" not in result.output


def test_inference_refuses_cp():
    """--tp with --inference is vLLM's tensor-parallel size (issue 40); context parallelism has no serving bill."""
    result = invoke("bill", "meta-llama/Llama-3.1-8B", "--gpu", "2xh100", "--inference", "--cp", "2")
    assert result.exit_code == 2 and "Traceback" not in result.output
