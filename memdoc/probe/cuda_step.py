"""`memdoc diagnose MODEL --device cuda`: the same synthetic step as the tracer, for real on a GPU.

The model is built from its config with uninitialised (random) weights on the CUDA device — no
download — through the tracer's own `build_model`/`build_optimizer`, so every knob means the same.
One warm-up step creates the optimizer states; the second step is measured with
`torch.cuda.max_memory_allocated()` and `memory_stats()`.
"""

from __future__ import annotations

from memdoc.core.model.plan import Offload, Shard, TrainingPlan
from memdoc.errors import MemdocError, PlanError


class NoCudaError(MemdocError):
    """--device cuda without a CUDA device."""


def require_cuda(plan: TrainingPlan) -> None:
    """Refuse --device cuda early (before any tracing) when it cannot run."""
    import torch

    if not torch.cuda.is_available():
        raise NoCudaError(
            "--device cuda: no CUDA device is available here", hint="omit --device to trace the step under fake tensors"
        )
    if plan.shard is not Shard.NONE or plan.offload is not Offload.NONE:
        raise PlanError("--device cuda runs on one GPU: drop --shard/--offload (the fake-tensor trace covers them)")


def run_cuda_step(config: dict, plan: TrainingPlan) -> dict:
    """Peak allocated/reserved and the digested memory_stats() of one real steady-state step."""
    import contextlib
    import functools

    import torch

    require_cuda(plan)
    from memdoc.probe.build import build_model, build_optimizer, torch_dtype
    from memdoc.probe.cuda_stats import digest_stats
    from memdoc.probe.tracer import training_step

    vocab = int(config.get("vocab_size") or (config.get("text_config") or {}).get("vocab_size") or 32000)
    notes: list[str] = []
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    with torch.device("cuda"):
        model = build_model(config, plan, None, notes)
    model.to("cuda")
    opt = build_optimizer(model, plan)
    ids = torch.randint(0, vocab, (plan.micro_batch, plan.seq_len), device="cuda")
    autocast = (
        (lambda: torch.autocast("cuda", dtype=torch_dtype(plan.precision.compute_dtype_name)))
        if plan.precision.is_amp
        else contextlib.nullcontext
    )

    step = functools.partial(training_step, model, opt, ids, autocast, plan.grad_accum)
    step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    stats = digest_stats(torch.cuda.memory_stats())
    out = {
        "device": torch.cuda.get_device_name(0),
        "peak_allocated": int(torch.cuda.max_memory_allocated()),
        "peak_reserved": int(torch.cuda.max_memory_reserved()),
        "stats": stats,
        "notes": notes,
    }
    del model, opt, ids
    torch.cuda.empty_cache()
    return out


__all__ = ["NoCudaError", "require_cuda", "run_cuda_step"]
