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

import json
import os
import socket

import pytest

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

    params = {local(p).untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}
    kept: list = []

    def pack(t):
        storage = local(t).untyped_storage()
        if storage.data_ptr() not in params:
            seen.setdefault(storage.data_ptr(), storage.nbytes())
        kept.append(t)
        return len(kept) - 1

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(**inputs)
    kept.clear()
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


def _rank(rank: int, port: int, path: str) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2")
    os.environ.update(LOCAL_RANK=str(rank), HF_HUB_OFFLINE="1")
    dist.init_process_group("gloo", rank=rank, world_size=2)
    out: dict = {}
    _tp(out)
    _ulysses(out, rank)
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
    mp.spawn(_rank, args=(port, path), nprocs=2)
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
