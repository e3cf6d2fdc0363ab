"""One FSDP2 training step per rank (`torch.distributed.fsdp.fully_shard`, gloo, CPU) and its census."""

from __future__ import annotations

from benchmarks.engines import tiny
from benchmarks.engines.census import Census


def run(rank: int, case) -> dict:
    """`fully_shard` each decoder layer then the root (torchtitan's and accelerate's FSDP2 wrapping),
    with `MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)` when `case.precision` is bf16;
    torch AdamW; one step; the census of the local shards, their gradients and the optimizer state."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    if not dist.is_initialized():
        dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    model = tiny.build(case.model, getattr(torch, case.load_dtype))
    params = sum(p.numel() for p in model.parameters())
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    kwargs = {"mesh": mesh} | ({"mp_policy": mp} if case.precision == "bf16" else {})
    for layer in model.model.layers:
        fully_shard(layer, **kwargs)
    fully_shard(model, **kwargs)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids, labels = tiny.batch(rank)
    censuses = {}
    for step in (1, 2):
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        if step == 2:
            censuses["after_backward"] = _census(model, opt)
        opt.step()
        if step == 1:
            opt.zero_grad(set_to_none=True)
    censuses["after_step"] = _census(model, opt)
    return {
        "rank": rank,
        "params": params,
        "loss": float(loss.detach()),
        "census": censuses,
        "knobs": {"reshard_after_forward": True, "mp_policy": case.precision},
    }


def _census(model, opt) -> list[dict]:
    """This rank's local shards (`DTensor.to_local()`), their gradients, buffers and `opt.state`."""
    census = Census()
    for name, p in model.named_parameters():
        census.add(p, f"module.{name}")
        if p.grad is not None:
            census.add(p.grad, f"module.{name}.grad")
    for name, b in model.named_buffers():
        census.add(b, f"module_buffer.{name}")
    census.walk(opt.state, "opt.state")
    return list(census.seen.values())
