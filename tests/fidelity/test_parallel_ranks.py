"""Context and tensor parallelism against the real implementations, on the CPU with 2 ranks (gloo).

Two processes run a tiny Llama (random weights, no download), fp32:
* **TP**: torch's `parallelize_module` with the model's own `base_model_tp_plan` (transformers 5.24
  `LlamaConfig`: q/k/v, gate/up `colwise`, o/down `rowwise`) and `LlamaForCausalLM._tp_plan`'s
  `colwise_gather_output` LM head (`ColwiseParallel(output_layouts=Replicate())`); each rank's parameter bytes
  (DTensor local shards), the bytes one decoder layer saves for backward (`saved_tensors_hooks`, the
  difference between 2 and 3 layers, as `test_activations_census.py` counts), and the bytes of every
  collective of a forward and backward (the funcol ops, seen by a dispatch mode).
* **CP**: DeepSpeed 0.19.8's Ulysses for HF models (`deepspeed/runtime/sequence_parallel/ulysses_sp.py`
  `UlyssesSPAttentionHF`, ALST) registered as the attention function, each rank given its half of the
  sequence and its positions; the saved bytes per layer, and the bytes of every `all_to_all_single` of a
  forward and backward.

Each is compared with memdoc's per-rank bill (`core/billing/parallel.py`), which never sees torch.
"""

import datetime
import json
import os
import socket
import time

import pytest
from conftest import saved_storages

torch = pytest.importorskip("torch")

from memdoc.core.billing.activations import layer_activations  # noqa: E402
from memdoc.core.billing.parallel import parallel_traffic, rank_share, tp_rank_model  # noqa: E402
from memdoc.core.model.model_spec import spec_from_config  # noqa: E402
from memdoc.core.model.plan import parse_plan  # noqa: E402

pytestmark = pytest.mark.slow

CONFIG = {
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 256,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": False,
}
SEQ = 64
FP32 = 4
TIMEOUT_S = 180
"""Each collective's timeout (gloo's default is 30 min); the ranks get twice that in all."""


def _build(layers: int, attention: str = "sdpa"):
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(**dict(CONFIG, num_hidden_layers=layers))
    config._attn_implementation = attention
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    model.train()
    return model


def _ids():
    return torch.randint(0, CONFIG["vocab_size"], (1, SEQ), generator=torch.Generator().manual_seed(1))


def _saved_bytes(model, **inputs) -> int:
    """Distinct non-parameter storages a forward saves for backward (a DTensor counted by its local shard)."""
    from torch.distributed.tensor import DTensor

    def local(t):
        return t._local_tensor if isinstance(t, DTensor) else t

    with saved_storages(model, local) as seen:
        model(**inputs)
    return sum(seen.values())


def _tp(out: dict) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    from torch.utils._python_dispatch import TorchDispatchMode

    mesh = init_device_mesh("cpu", (2,))
    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
    for layers in (2, 3):
        model = _build(layers)
        plan = {f"model.{name}": styles[style]() for name, style in model.config.base_model_tp_plan.items()}
        assert type(model)._tp_plan == {"lm_head": "colwise_gather_output"}
        plan["lm_head"] = ColwiseParallel(output_layouts=Replicate())
        parallelize_module(model, mesh, plan)
        local = [p._local_tensor if isinstance(p, DTensor) else p for p in model.parameters()]
        out[f"tp_params_{layers}"] = sum(p.numel() * p.element_size() for p in local)
        out[f"tp_saved_{layers}"] = _saved_bytes(model, input_ids=_ids())

    collectives: list[tuple[str, int]] = []

    class Collectives(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.namespace == "_c10d_functional" and func.__name__.split(".")[0] in (
                "all_reduce",
                "all_gather_into_tensor",
            ):
                collectives.append((func.__name__.split(".")[0], args[0].numel() * args[0].element_size()))
            return func(*args, **(kwargs or {}))

    with Collectives():
        ids = _ids()
        model(input_ids=ids, labels=ids).loss.backward()
    out["tp_collectives"] = collectives


def _ulysses(out: dict, rank: int) -> None:
    import deepspeed.comm as dscomm
    import torch.distributed as dist
    from deepspeed.runtime.sequence_parallel.ulysses_sp import UlyssesSPAttentionHF
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    dscomm.init_distributed(dist_backend="gloo", auto_mpi_discovery=False)
    local = SEQ // 2
    part = slice(rank * local, (rank + 1) * local)
    ids, positions = _ids()[:, part], torch.arange(SEQ)[None, part]

    def build(layers):
        attention = UlyssesSPAttentionHF(
            attn=ALL_ATTENTION_FUNCTIONS["sdpa"],
            batch_size=1,
            attn_head_count=CONFIG["num_attention_heads"],
            attn_head_size=CONFIG["head_dim"],
            kv_head_count=CONFIG["num_key_value_heads"],
            num_hidden_layers=layers,
            process_group=dist.group.WORLD,
            local_seq_length=local,
            global_seq_length=SEQ,
        )
        attention.core_attn_implementation = "sdpa"
        ALL_ATTENTION_FUNCTIONS.register("memdoc_ulysses", attention)
        return _build(layers, "memdoc_ulysses")

    for layers in (2, 3):
        out[f"cp_saved_{layers}"] = _saved_bytes(build(layers), input_ids=ids, position_ids=positions)
    sent: list[int] = []
    original = dscomm.all_to_all_single

    def counted(output, tensor, *args, **kwargs):
        sent.append(tensor.numel() * tensor.element_size())
        return original(output, tensor, *args, **kwargs)

    dscomm.all_to_all_single = counted
    try:
        build(2)(input_ids=ids, position_ids=positions, labels=ids).loss.backward()
    finally:
        dscomm.all_to_all_single = original
    out["cp_all_to_all"] = sent


def _ring_attention_function(group, tape: list):
    """An HF attention function that runs torch 2.13's ring attention on this rank's (head-tail) share.

    torch's `context_parallel` reaches `_templated_ring_attention` through DTensor's SDPA handler, which maps only
    the CUDA kernels (flash, efficient, cuDNN: `_attention.py` `_sdpa_handler`); on the CPU, the same templates are
    called here with the CPU flash kernel (`aten._scaled_dot_product_flash_attention_for_cpu`, GQA native, as
    HF's `use_gqa_in_sdpa` passes kv heads without a mask), under the defaults `context_parallel` runs with:
    causal, head-tail load balance, the all-gather rotater for k/v and all-to-all for dk/dv, fp32 merge.
    The autograd node saves what the flash op's node saves: q, k, v, out, logsumexp.
    """
    from torch.distributed.tensor.experimental._context_parallel import _attention as ring

    aten = torch.ops.aten

    class Ring(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, scale):
            out, lse = ring._templated_ring_attention(
                group,
                2,
                aten._scaled_dot_product_flash_attention_for_cpu.default,
                q,
                k,
                v,
                is_causal=True,
                dropout_p=0.0,
                scale=scale,
            )
            ctx.save_for_backward(q, k, v, out, lse)
            ctx.scale = scale
            return out

        @staticmethod
        def backward(ctx, grad):
            q, k, v, out, lse = ctx.saved_tensors
            dq, dk, dv = ring._templated_ring_attention_backward(
                group,
                2,
                aten._scaled_dot_product_flash_attention_for_cpu_backward.default,
                grad.contiguous(),
                "grad_out",
                q,
                k,
                v,
                out,
                lse,
                is_causal=True,
                dropout_p=0.0,
                scale=ctx.scale,
            )
            return dq, dk, dv, None

    def attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        return Ring.apply(query, key, value, scaling).transpose(1, 2).contiguous(), None

    return attention


def _ring(out: dict, rank: int) -> None:
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol
    from torch.distributed.tensor.experimental._context_parallel import _attention as ring
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    assert ring._cp_options.enable_load_balance and ring._cp_options.convert_to_f32  # context_parallel's defaults
    assert ring._cp_options.rotate_method is ring._RotateMethod.ALL_GATHER
    chunk = SEQ // 4  # head-tail: rank r holds chunks r and 3 − r (`_load_balancer.py` `_HeadTailLoadBalancer`)
    part = torch.cat(
        [torch.arange(rank * chunk, (rank + 1) * chunk), torch.arange((3 - rank) * chunk, (4 - rank) * chunk)]
    )
    ids, positions = _ids()[:, part], part[None]
    tape: list = []
    ALL_ATTENTION_FUNCTIONS.register("memdoc_ring", _ring_attention_function(dist.group.WORLD, tape))
    for layers in (2, 3):
        out[f"ring_saved_{layers}"] = _saved_bytes(_build(layers, "memdoc_ring"), input_ids=ids, position_ids=positions)

    originals = {name: getattr(funcol, name) for name in ("all_gather_single", "permute_tensor")}

    def counted(name):
        def call(tensor, *args, **kwargs):
            result = originals[name](tensor, *args, **kwargs)
            tape.append((name, tensor.numel() * tensor.element_size(), result.numel() * result.element_size()))
            return result

        return call

    merge = ring._SDPAMerger.results

    def results(self):
        tape.append(("merge", self._out.numel() * self._out.element_size(), 0))
        return merge(self)

    model = _build(2, "memdoc_ring")
    for name in originals:
        setattr(funcol, name, counted(name))
    ring._SDPAMerger.results = results
    try:
        logits = model(input_ids=ids, position_ids=positions).logits
        out["ring_forward"] = list(tape)
        tape.clear()
        logits.float().pow(2).mean().backward()
        out["ring_backward"] = list(tape)
    finally:
        for name, fn in originals.items():
            setattr(funcol, name, fn)
        ring._SDPAMerger.results = merge
    reference = _build(2)(input_ids=_ids()).logits[:, part]
    out["ring_error"] = (logits - reference).abs().max().item()


def _rank(rank: int, port: int, path: str) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2")
    os.environ.update(LOCAL_RANK=str(rank), HF_HUB_OFFLINE="1", GLOO_SOCKET_IFNAME="lo")
    torch.set_num_threads(1)  # two ranks on a 2-core machine
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=TIMEOUT_S))
    out: dict = {}
    _tp(out)
    _ulysses(out, rank)
    _ring(out, rank)
    with open(f"{path}.{rank}", "w") as f:
        json.dump(out, f)
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    """Both ranks' counts, from one run of two processes."""
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    path = str(tmp_path_factory.mktemp("ranks") / "rank")
    context = mp.spawn(_rank, args=(port, path), nprocs=2, join=False)
    deadline = time.monotonic() + 2 * TIMEOUT_S
    while not context.join(timeout=5):  # a rank that fails raises here; a hung one is killed at the deadline
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            pytest.fail(f"the two gloo ranks did not finish in {2 * TIMEOUT_S} s")
    results = []
    for rank in (0, 1):
        with open(f"{path}.{rank}") as f:
            results.append(json.load(f))
    return results


def _spec(layers: int):
    return spec_from_config(dict(CONFIG, num_hidden_layers=layers), model_id="tiny-llama")


def test_tp_rank_parameters_are_the_rank_model(ranks):
    for layers in (2, 3):
        billed = tp_rank_model(_spec(layers), 2).params.total * FP32
        assert [r[f"tp_params_{layers}"] for r in ranks] == [billed, billed]


def test_tp_rank_layer_saves_what_the_rank_model_saves(ranks):
    plan = parse_plan(precision="fp32", seq=SEQ, gpus=2, tp=2)
    share = rank_share(_spec(2), plan)
    billed = sum(layer_activations(share.model, share.plan).values())
    assert [r["tp_saved_3"] - r["tp_saved_2"] for r in ranks] == [billed, billed]


def test_tp_collectives_send_what_is_billed(ranks):
    """Ring algorithm: an all-reduce sends 2(w−1)/w of its tensor, an all-gather its input w − 1 times."""
    plan = parse_plan(precision="fp32", seq=SEQ, gpus=2, tp=2)
    model = _spec(3)  # the last model `_tp` built
    assert len(ranks[0]["tp_collectives"]) == len(ranks[1]["tp_collectives"])
    for rank in ranks:
        kinds = [kind for kind, _ in rank["tp_collectives"]]
        # 2 per layer in forward (o_proj, down_proj), 5 in backward (the inputs of q, k, v, gate, up), 1 for the head
        assert kinds.count("all_reduce") == 7 * model.num_layers + 1
        assert kinds.count("all_gather_into_tensor") == 1
        sent = sum(n * (2 * (2 - 1) / 2 if kind == "all_reduce" else 2 - 1) for kind, n in rank["tp_collectives"])
        assert parallel_traffic(model, plan).tp_bytes == sent


def test_ulysses_rank_layer_saves_its_sequence_share(ranks):
    """A rank saves what its seq/cp tokens save without CP, plus o_proj's input: the output all-to-all's own
    tensor (without CP it is a view of the attention's saved output)."""
    plan = parse_plan(precision="fp32", seq=SEQ, gpus=2, cp=2)
    share = rank_share(_spec(2), plan)
    billed = sum(layer_activations(share.model, share.plan).values()) + share.extra_saved // 2  # 2 layers
    assert [r["cp_saved_3"] - r["cp_saved_2"] for r in ranks] == [billed, billed]


def test_ulysses_all_to_alls_send_what_is_billed(ranks):
    plan = parse_plan(precision="fp32", seq=SEQ, gpus=2, cp=2)
    for rank in ranks:
        assert len(rank["cp_all_to_all"]) == 8 * 2  # q, k, v, output; forward and backward; 2 layers
        assert parallel_traffic(_spec(2), plan).cp_bytes == sum(rank["cp_all_to_all"]) / 2


def test_ring_runs_torch_ring_attention(ranks):
    """The ring's logits equal the model's without CP at the rank's positions (the run is the algorithm)."""
    assert [r["ring_error"] < 1e-5 for r in ranks] == [True, True]


def _ring_layer(rank: dict, phase: str) -> list:
    """One layer's ring collectives and merge of `phase` (2 layers ran; both the same)."""
    tape = rank[f"ring_{phase}"]
    assert tape[: len(tape) // 2] == tape[len(tape) // 2 :]
    return tape[: len(tape) // 2]


def test_ring_rank_layer_saves_its_sequence_share(ranks):
    """Rank 0 ran a partial (second-half) step, whose merge `torch.cat`s the output back to (B, H, L, D), so
    o_proj's input is a copy: the bill's seq/2 share plus o_proj's input. The last rank's merged output keeps
    the kernel's (B, L, H, D) layout, o_proj's input a view: the share alone."""
    plan = parse_plan(precision="fp32", seq=SEQ, gpus=2, cp=2, cp_impl="ring")
    share = rank_share(_spec(2), plan)
    alone = sum(layer_activations(share.model, share.plan).values())
    assert [r["ring_saved_3"] - r["ring_saved_2"] for r in ranks] == [alone + share.extra_saved // 2, alone]


def test_ring_buffers_in_flight_are_billed(ranks):
    """Forward: the all-gathered k/v, the concatenated local k/v sent, the fp32 merge. Backward: the gather
    again, one dk/dv block sent and one received (fp32), and the fp32 dq accumulator (`_attention.py`
    `_templated_ring_attention_backward`: `grad_query = torch.zeros_like(query, dtype=accum_dtype)`, the merge's
    size: not hooked)."""
    plan = parse_plan(precision="fp32", seq=SEQ, gpus=2, cp=2, cp_impl="ring")
    share = rank_share(_spec(2), plan)
    for rank in ranks:
        (gather, sent, gathered), (merge, merged, _) = _ring_layer(rank, "forward")
        assert (gather, merge) == ("all_gather_single", "merge")
        assert share.forward_buffers == gathered + sent + merged
        backward = _ring_layer(rank, "backward")
        assert [kind for kind, *_ in backward] == ["all_gather_single", "permute_tensor", "permute_tensor"]
        _, sent, gathered = backward[0]
        dkv = max(i + o for _, i, o in backward[1:])
        assert share.backward_buffers == gathered + sent + dkv + merged


def test_ring_sends_what_is_billed(ranks):
    """An all-gather sends its input w − 1 times; `permute_tensor` sends its input once (to the next rank)."""
    plan = parse_plan(precision="fp32", seq=SEQ, gpus=2, cp=2, cp_impl="ring")
    for rank in ranks:
        tape = rank["ring_forward"] + rank["ring_backward"]
        sent = sum(n * (2 - 1) if kind == "all_gather_single" else n for kind, n, _ in tape if kind != "merge")
        assert parallel_traffic(_spec(2), plan).cp_bytes == sent
