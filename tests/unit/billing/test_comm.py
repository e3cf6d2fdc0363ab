"""Collectives per optimizer step (`core/billing/comm.py`): ring volumes by engine, the slowest link, overlap."""

from __future__ import annotations

import pytest

from memdoc.core.billing.comm import HIDDEN_COMM_FRACTION, bottleneck, communication
from memdoc.core.billing.states import model_states
from memdoc.core.billing.steptime import step_time
from memdoc.core.model.gpu import resolve_gpu
from memdoc.core.model.plan import Method, Shard, TrainingPlan
from memdoc.resolve.models import resolve_model

LLAMA_8B = resolve_model("meta-llama/Llama-3.1-8B")
LLAMA_405B = resolve_model("meta-llama/Llama-3.1-405B")
LLAMA_8B_PARAMS = 8_030_261_248  # the published count (model card: 8.03B; safetensors index total)
H100 = resolve_gpu("h100-sxm")


def _comm(model, gpu=H100, **plan):
    p = TrainingPlan(**plan)
    return communication(model, p, gpu, model_states(model, p))


def test_ddp_all_reduces_the_bf16_gradients_once_per_step():
    # Ring all-reduce: each GPU sends 2(w-1)/w of the buffer; DDP skips the accumulation micro-batches (no_sync).
    c = _comm(LLAMA_8B, gpus_per_node=8, grad_accum=4)
    assert c.bytes_sent == pytest.approx(2 * 7 / 8 * LLAMA_8B_PARAMS * 2)
    assert c.link_gbps == 450  # NVLink 4: 900 GB/s both ways
    assert c.seconds == pytest.approx(2 * 7 / 8 * LLAMA_8B_PARAMS * 2 / 450e9)


def test_zero3_gathers_the_frozen_base_twice_per_micro_batch():
    # LoRA under ZeRO-3: the frozen bf16 base is partitioned, so forward and backward all-gather all of it.
    accum = 2
    c = _comm(LLAMA_8B, gpus_per_node=8, shard=Shard.ZERO3, method=Method.LORA, grad_accum=accum)
    gathers = accum * 2 * 7 / 8 * LLAMA_8B_PARAMS * 2
    assert gathers <= c.bytes_sent <= gathers * 1.01  # + the adapters' reduce-scatter (6.8M parameters)


def test_zero2_reduces_every_micro_batch_zero1_only_at_the_boundary():
    one = _comm(LLAMA_8B, gpus_per_node=8, shard=Shard.ZERO1, grad_accum=4).bytes_sent
    two = _comm(LLAMA_8B, gpus_per_node=8, shard=Shard.ZERO2, grad_accum=4).bytes_sent
    grads = LLAMA_8B_PARAMS * 2 * 7 / 8
    assert one == pytest.approx(2 * grads)  # reduce-scatter + all-gather of the updated weights
    assert two == pytest.approx(4 * grads + grads)


def test_pcie_cards_collect_over_pcie():
    assert _comm(LLAMA_8B, gpu=resolve_gpu("rtx-4090"), gpus_per_node=2).link_gbps == 31.5


@pytest.mark.parametrize(
    ("interconnect", "gbps"),
    [("auto", 400.0), ("ib-ndr-400", 400.0), ("ib-hdr-200", 200.0), ("2xroce-100", 25.0), ("eth-25", 3.125)],
)
def test_across_nodes_the_slowest_link_is_the_nodes_nics(interconnect, gbps):
    plan = TrainingPlan(gpus_per_node=8, nodes=2, interconnect=interconnect)
    assert bottleneck(plan, H100)[0] == gbps


def test_one_node_never_reads_the_network():
    assert bottleneck(TrainingPlan(gpus_per_node=8, interconnect="eth-10"), H100)[0] == 450


def test_405b_lora_zero3_slows_with_nodes_on_the_network():
    """Issue 28: 8.46 s per step at 1, 2, 4 and 8 nodes before; each GPU sends (w-1)/w of the gathers, over
    NVLink on one node (450 GB/s) and over 8 × NDR 400 Gb/s (400 GB/s) across nodes."""
    times = []
    for nodes in (1, 2, 4, 8):
        plan = TrainingPlan(method=Method.LORA, shard=Shard.ZERO3, gpus_per_node=8, nodes=nodes)
        times.append(step_time(LLAMA_405B, plan, H100))
    seconds = [t.seconds for t in times]
    assert seconds == sorted(seconds) and len(set(seconds)) == 4
    assert "NVLink" in times[0].link and "InfiniBand NDR" in times[1].link
    slow = TrainingPlan(method=Method.LORA, shard=Shard.ZERO3, gpus_per_node=8, nodes=2, interconnect="eth-25")
    assert step_time(LLAMA_405B, slow, H100).seconds > 10 * seconds[1]


def test_overlap_hides_half_at_most_and_never_more_than_compute():
    c = _comm(LLAMA_8B, gpus_per_node=8, shard=Shard.ZERO3)
    assert c.exposed(1e9) == pytest.approx(c.seconds * (1 - HIDDEN_COMM_FRACTION))
    assert c.exposed(0.01) == pytest.approx(c.seconds - 0.01)


def test_single_gpu_has_no_collectives():
    time = step_time(LLAMA_8B, TrainingPlan(), resolve_gpu("h200"))
    assert time.communication == 0 and time.link is None
