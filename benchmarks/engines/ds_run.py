"""One DeepSpeed training step per rank (CPU accelerator, gloo) and the census of the engine's tensors."""

from __future__ import annotations

import os

from benchmarks.engines import tiny
from benchmarks.engines.census import Census


def ds_config(stage: int, *, precision: str, offload: bool, buckets: dict | None) -> dict:
    """The DeepSpeed JSON of one case: memdoc's emitted keys (overlap_comm, contiguous_gradients,
    `optimizer` AdamW block with offload: `memdoc/core/trainers/deepspeed/write.py`), numbers instead of "auto"."""
    zero = {"stage": stage, "overlap_comm": True, "contiguous_gradients": True} | (buckets or {})
    if offload:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    cfg = {
        "train_micro_batch_size_per_gpu": tiny.MICRO_BATCH,
        "gradient_accumulation_steps": 1,
        "zero_optimization": zero,
        precision: {"enabled": True},
        "gradient_clipping": 1.0,
        "steps_per_print": 1000000,
    }
    if offload:
        cfg["optimizer"] = {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.0}}
    return cfg


def run(rank: int, model_name: str, cfg: dict, load_dtype: str) -> dict:
    """Initialise DeepSpeed on `model_name`, run forward/backward/step, return the census of this rank."""
    import deepspeed
    import torch

    deepspeed.init_distributed(dist_backend="gloo")
    model = tiny.build(model_name, getattr(torch, load_dtype))
    params = sum(p.numel() for p in model.parameters())
    kwargs = {} if "optimizer" in cfg else {"optimizer": torch.optim.AdamW(model.parameters(), lr=1e-3)}
    engine, *_ = deepspeed.initialize(model=model, config=cfg, **kwargs)
    censuses = {}
    _census_at_ipg_release(engine, cfg, censuses)
    _census_in_inner_step(engine, cfg, censuses)
    ids, labels = tiny.batch(rank)
    for step in (1, 2):
        loss = engine(input_ids=ids, labels=labels).loss
        engine.backward(loss)
        if step == 2:
            censuses["after_backward"] = _census(engine, cfg)
        engine.step()
    censuses["after_step"] = _census(engine, cfg)
    return {
        "rank": rank,
        "params": params,
        "loss": float(loss.detach()),
        "optimizer_class": type(engine.optimizer).__name__,
        "inner_optimizer_class": type(getattr(engine.optimizer, "optimizer", None)).__name__,
        "census": censuses,
        "knobs": _knobs(engine),
    }


def _census_in_inner_step(engine, cfg: dict, censuses: dict) -> None:
    """Take the census `during_step` when the ZeRO optimizer calls its inner optimizer's `step`: the fp32
    gradients of the master partitions exist then (`stage_1_and_2.py` `step`: `single_grad_partition`;
    `stage3.py` `_prepare_fp32_grad_for_sub_group`) and are freed after it."""
    inner = engine.optimizer.optimizer
    step = inner.step

    def step_with_census(*args, **kwargs):
        censuses["during_step"] = _census(engine, cfg)
        return step(*args, **kwargs)

    inner.step = step_with_census


def _census_at_ipg_release(engine, cfg: dict, censuses: dict) -> None:
    """Take the census `at_release` when ZeRO-1/2 free their IPG buckets at the end of backward
    (`_release_ipg_buffers`, called by `independent_gradient_partition_epilogue`): the buckets (allocated when
    backward starts, `setup_buckets`: one `reduce_bucket_size` buffer per communication dtype, a second one with
    `overlap_comm`) and the gradients not yet freed are all alive then, `deepspeed/runtime/zero/stage_1_and_2.py`.
    ZeRO-3 keeps its bucket for the whole run (`stage3.py` `__init__`, "IPG") and has no such method."""
    opt = engine.optimizer
    release = getattr(opt, "_release_ipg_buffers", None)
    if release is None:
        return

    def release_with_census():
        censuses["at_release"] = _census(engine, cfg)
        release()

    opt._release_ipg_buffers = release_with_census


def _census(engine, cfg: dict) -> list[dict]:
    """Every tensor this rank holds: first everything reachable from the ZeRO optimizer's attributes
    (`DeepSpeedZeroOptimizer` in `stage_1_and_2.py`, `DeepSpeedZeroOptimizer_Stage3` in `stage3.py`, the inner
    optimizer's `state` included), so that a storage is named after the engine attribute that owns it; then the
    module's parameters (ZeRO-3: `param.ds_tensor`, the partition, and `param.data`, empty unless persistent or
    gathered), their `.grad` and the module's buffers."""
    census = Census()
    census.walk(engine.optimizer, "opt")  # first: a storage is named after the engine attribute that owns it
    stage = cfg["zero_optimization"]["stage"]
    for name, p in engine.module.named_parameters():
        if stage == 3:
            census.add(p.ds_tensor, f"module.{name}.ds_tensor")
        census.add(p.data, f"module.{name}")
        if p.grad is not None:
            census.add(p.grad, f"module.{name}.grad")
    for name, b in engine.module.named_buffers():
        census.add(b, f"module_buffer.{name}")
    return list(census.seen.values())


def _knobs(engine) -> dict:
    """The ZeRO knobs DeepSpeed resolved (defaults filled in), `deepspeed/runtime/zero/config.py`."""
    z = engine.zero_optimization()
    zc = engine._config.zero_config
    keys = (
        "reduce_bucket_size",
        "allgather_bucket_size",
        "prefetch_bucket_size",
        "max_live_parameters",
        "max_reuse_distance",
        "param_persistence_threshold",
        "sub_group_size",
        "overlap_comm",
        "contiguous_gradients",
    )
    out = {k: getattr(zc, k) for k in keys if hasattr(zc, k)}
    out["zero_enabled"] = bool(z)
    return {k: (int(v) if isinstance(v, float) and v.is_integer() else v) for k, v in out.items()}


def env_for(rank: int, world: int, port: int) -> None:
    """The torch.distributed environment of one rank on this host, DeepSpeed on its CPU accelerator."""
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_WORLD_SIZE=str(world),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        GLOO_SOCKET_IFNAME="lo",  # gloo binds the loopback, not the address the host name resolves to
        DS_ACCELERATOR="cpu",
        DS_BUILD_OPS="0",
        OMP_NUM_THREADS="1",
    )
