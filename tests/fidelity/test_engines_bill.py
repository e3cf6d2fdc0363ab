"""memdoc's per-rank bill against what DeepSpeed and FSDP2 allocated on the CPU (world size 2, gloo).

The fixtures (`tests/fixtures/engines/<engine>-<model>-<variant>.json`, written by
`benchmarks/engines/harness.py`) hold every tensor each rank's engine held, found by walking the engine's own
objects, sorted into categories (`benchmarks/engines/categories.py`, which names each attribute after the
engine's source). Here the same tiny model goes through memdoc's own resolution (its config.json on disk,
`resolve_setup`), and the same ds_config through memdoc's `--config` reading; `compute_bill` must give each
rank the bytes the engine held:

* weights: the optimizer phase's `weights` = the engine's 16-bit working parameters (ZeRO-3: the partition plus
  the unpartitioned small parameters; FSDP2: the local shards);
* gradients: the optimizer phase's `gradients` = the gradients held at the end of backward;
* optimizer: the optimizer phase's `optimizer` = fp32 master partition + optimizer state;
* buffers: `Bill.buffers` "reduce buckets" = the IPG buckets (`ipg_buckets[dtype].buffer`), "fp32 step
  gradient" = the master partition's fp32 `.grad` during the inner step;
* host: `Bill.host` = every byte the engine keeps in host memory with `offload_optimizer: cpu`.

Tolerances are stated per comparison: exact, except where DeepSpeed rounds a partition to whole parameters
(`GRAD_ROUNDING`).
"""

from __future__ import annotations

import json

import pytest
from conftest import FIXTURES

from benchmarks.engines.tiny import MEMDOC_FLAGS, MODELS
from memdoc.core.billing.bill import compute_bill
from memdoc.resolve.setup import resolve_setup

ENGINES = FIXTURES / "engines"
DS_CASES = sorted(p.stem for p in ENGINES.glob("deepspeed-*-z*.json"))
FSDP_CASES = sorted(p.stem for p in ENGINES.glob("fsdp2-*.json"))
FSDP_PLANS = {
    "fp32": {"precision": "fp32"},
    "fp32-mp-bf16": {"precision": "amp-bf16"},
    "bf16": {"precision": "bf16", "master_weights": "bf16"},
}
"""The memdoc plan of each FSDP2 run: fp32 parameters without a policy; fp32 parameters under
`MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)` (accelerate's FSDP2 after its fp32 upcast);
bf16 parameters without a policy (a 16-bit master, asked for with `--master-weights bf16`)."""


def load(case: str) -> dict:
    return json.loads((ENGINES / f"{case}.json").read_text())


def largest_tensor_bytes(model: str) -> int:
    """Bytes of the tiny model's largest 16-bit parameter tensor: the embedding (vocab × hidden) here, else an
    MLP projection (intermediate × hidden)."""
    config = MODELS[model]
    return 2 * config["hidden_size"] * max(config["vocab_size"], config["intermediate_size"])


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    """{model: a folder holding its config.json}, as a user's local checkpoint would."""
    out = {}
    for name, config in MODELS.items():
        folder = tmp_path_factory.mktemp(name)
        (folder / "config.json").write_text(json.dumps(config))
        out[name] = folder
    return out


def ds_bill(case: str, model_dirs, tmp_path):
    """memdoc's bill of a DeepSpeed fixture: the tiny model, its ds_config read with `--config`, 2 GPUs."""
    doc = load(case)
    definition = doc["definition"]
    ds = tmp_path / "ds_config.json"
    ds.write_text(json.dumps(definition["ds_config"]))
    setup = resolve_setup(str(model_dirs[definition["model"]]), config=[ds], need_gpu=False, **MEMDOC_FLAGS)
    return doc, compute_bill(setup.model, setup.plan, None)


def fsdp_bill(case: str, model_dirs):
    """memdoc's bill of an FSDP2 fixture: `--shard fsdp2` with the plan of `FSDP_PLANS`, 2 GPUs."""
    doc = load(case)
    definition = doc["definition"]
    flags = MEMDOC_FLAGS | FSDP_PLANS[definition["variant"]] | {"shard": "fsdp2"}
    setup = resolve_setup(str(model_dirs[definition["model"]]), need_gpu=False, **flags)
    return doc, compute_bill(setup.model, setup.plan, None)


def engine(doc: dict, when: str, where: str = "device") -> list[dict]:
    """Each rank's categories at `when` (backward_peak, during_step, after_step) in `where`."""
    return [r["categories"][when][where] for r in doc["ranks"]]


GRAD_ROUNDING = "largest tensor"
"""ZeRO-1/2 copy every parameter that overlaps a rank's partition whole into `grads_in_partition`
(`stage_1_and_2.py` `reduce_independent_p_g_buckets_and_remove_grads`, `total_size` of `params_in_partition`),
so a rank holds up to one straddling tensor more than its partition."""


def test_fixtures_cover_the_issue():
    """ZeRO-1/2/3, each with and without optimizer offload, and FSDP2, on both tiny models."""
    for model in MODELS:
        for stage in (1, 2, 3):
            assert f"deepspeed-{model}-z{stage}-bf16" in DS_CASES
            assert f"deepspeed-{model}-z{stage}-bf16-offload" in DS_CASES
        assert {f"fsdp2-{model}-{v}" for v in FSDP_PLANS} <= set(FSDP_CASES)


@pytest.mark.parametrize("case", DS_CASES)
def test_deepspeed_weights(case, model_dirs, tmp_path):
    doc, bill = ds_bill(case, model_dirs, tmp_path)
    for held in engine(doc, "after_step"):
        assert bill.phases["optimizer"].weights == held["weights"]


@pytest.mark.parametrize("case", [c for c in DS_CASES if "offload" not in c])
def test_deepspeed_gradients(case, model_dirs, tmp_path):
    doc, bill = ds_bill(case, model_dirs, tmp_path)
    rounding = largest_tensor_bytes(doc["definition"]["model"]) if "-z3-" not in case else 0
    for held in engine(doc, "backward_peak"):
        assert 0 <= held["gradients"] - bill.phases["optimizer"].gradients <= rounding


@pytest.mark.parametrize("case", [c for c in DS_CASES if "offload" not in c])
def test_deepspeed_optimizer_states(case, model_dirs, tmp_path):
    """fp32 master partition + exp_avg + exp_avg_sq: 12 bytes per parameter of the partition."""
    doc, bill = ds_bill(case, model_dirs, tmp_path)
    for held in engine(doc, "after_step"):
        assert bill.phases["optimizer"].optimizer == held["master"] + held["optimizer"]


def is_ipg_bucket(record: dict) -> bool:
    """A storage reached through `ipg_buckets[dtype].buffer` (ZeRO-1's gradients can be views of it)."""
    return any("ipg_buckets" in p for p in [record["path"], *record.get("aliases", [])])


@pytest.mark.parametrize("case", DS_CASES)
def test_deepspeed_reduce_buckets(case, model_dirs, tmp_path):
    """The IPG buckets at backward's peak: `reduce_bucket_size` 16-bit elements, twice with `overlap_comm` under
    ZeRO-1/2, once under ZeRO-3 (1 GB per rank at the default 5e8, whatever the model's size)."""
    doc, bill = ds_bill(case, model_dirs, tmp_path)
    buckets = [
        sum(t["bytes"] for t in r["census"].get("at_release", r["census"]["after_backward"]) if is_ipg_bucket(t))
        for r in doc["ranks"]
    ]
    for held in buckets:
        assert getattr(bill, "buffers", {}).get("reduce buckets", 0) == held


@pytest.mark.parametrize("case", DS_CASES)
def test_deepspeed_device_buffers(case, model_dirs, tmp_path):
    """Every communication or staging buffer the engine holds on the GPU at backward's peak is billed: the IPG
    buckets, and with ZeRO-1/2 offload the one-largest-parameter `temp_grad_buffer_for_gpu_offload`
    (`stage_1_and_2.py:659`). `Bill.buffers` minus the items billed elsewhere (the fp32 step gradient is a
    step-time buffer, the unpartitioned parameters are weights)."""
    doc, bill = ds_bill(case, model_dirs, tmp_path)
    billed = sum(
        v
        for k, v in getattr(bill, "buffers", {}).items()
        if k not in ("fp32 step gradient", "unpartitioned small parameters")
    )
    for held in engine(doc, "backward_peak"):
        assert billed == held["buffers"]


@pytest.mark.parametrize("case", [c for c in DS_CASES if "offload" not in c])
def test_deepspeed_fp32_step_gradient(case, model_dirs, tmp_path):
    """The fp32 gradient of the master partition while the inner optimizer steps (one `sub_group_size` group
    under ZeRO-3: here the whole partition, the group is larger)."""
    doc, bill = ds_bill(case, model_dirs, tmp_path)
    for held in engine(doc, "during_step"):
        assert getattr(bill, "buffers", {}).get("fp32 step gradient", 0) == held["master_grads"]


@pytest.mark.parametrize("case", [c for c in DS_CASES if "offload" in c])
def test_deepspeed_offload_host(case, model_dirs, tmp_path):
    """Host bytes per rank with `offload_optimizer: cpu`: master, states, fp32 gradients, and the 16-bit
    gradient partition (ZeRO-3) or the 16-bit copy-back partition and staging buffer (ZeRO-1/2)."""
    doc, bill = ds_bill(case, model_dirs, tmp_path)
    for held in engine(doc, "after_step", "host"):
        assert sum(bill.host.values()) == sum(held.values())


@pytest.mark.parametrize("case", [c for c in DS_CASES if "offload" in c])
def test_deepspeed_offload_device(case, model_dirs, tmp_path):
    """With the optimizer offloaded, the GPU keeps the 16-bit weights (and ZeRO-3's 16-bit gradient partition
    moves to the host): no gradients, master or states billed on the device."""
    doc, bill = ds_bill(case, model_dirs, tmp_path)
    for held in engine(doc, "backward_peak"):
        assert held["gradients"] == held["master"] == held["optimizer"] == 0
        assert (bill.phases["optimizer"].gradients, bill.phases["optimizer"].optimizer) == (0, 0)


@pytest.mark.parametrize("case", FSDP_CASES)
def test_fsdp2_states(case, model_dirs):
    """FSDP2's local shards, their gradients and AdamW's states, exact (the tiny models' dim-0 sizes divide
    by the world size: no padding)."""
    doc, bill = fsdp_bill(case, model_dirs)
    for after_step, backward in zip(engine(doc, "after_step"), engine(doc, "backward_peak"), strict=True):
        phase = bill.phases["optimizer"]
        assert (phase.weights, phase.gradients, phase.optimizer) == (
            after_step["weights"],
            backward["gradients"],
            after_step["optimizer"],
        )
