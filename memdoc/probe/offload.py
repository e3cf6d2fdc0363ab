"""Activation offloading in a traced step: the checkpointed layers' inputs leave the (fake) GPU.

transformers 5.24 offloads by running each checkpointed layer's `checkpoint` inside
`torch.autograd.graph.save_on_cpu(pin_memory=True)` (`modeling_utils.py`
`PreTrainedModel._activation_checkpointing_enable`). The tracer's fake tensors all live on the CPU device, where a
copy to the host would still be counted as device memory, so the trace wraps the same checkpoint calls in
`saved_tensors_hooks` of its own: the pack hook records the tensor's bytes as host memory and keeps only its
shape, so the device tensor dies as `save_on_cpu`'s copy lets it; the unpack hook allocates a device tensor of
that shape in backward, as `save_on_cpu.unpack_from_cpu`'s `tensor.to(device)` does.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class HostOffload:
    """Bytes the pack hook moved to the host: each tensor's size, in the order forward offloaded them."""

    packed: list[int] = field(default_factory=list)
    layers: int = 0
    """Checkpointed decoder layers whose calls are wrapped (`offload_checkpoints`)."""

    def hooks(self):
        """The `saved_tensors_hooks` that move one checkpoint's saved inputs to the (counted) host."""
        import torch

        def pack(tensor):
            self.packed.append(tensor.numel() * tensor.element_size())
            return tensor.size(), tensor.stride(), tensor.dtype, tensor.device, tensor.requires_grad

        def unpack(meta):
            size, stride, dtype, device, requires_grad = meta
            back = torch.empty_strided(size, stride, dtype=dtype, device=device)
            return back.requires_grad_(requires_grad)

        return torch.autograd.graph.saved_tensors_hooks(pack, unpack)

    def note(self) -> str:
        """What the trace offloaded, per layer input (a depth-independent figure)."""
        sizes = sorted(set(self.packed))
        each = ", ".join(f"{n:,}" for n in sizes) or "0"
        return f"activation offload: {self.layers} checkpointed layer input(s) of {each} bytes each kept on the host"


def offload_checkpoints(model, host: HostOffload) -> None:
    """Wrap every checkpointed module's checkpoint call in `host`'s hooks, as transformers wraps it in
    `save_on_cpu` (only modules whose `gradient_checkpointing` is on: `--checkpoint-every N` leaves the others)."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    for module in model.modules():
        inner = getattr(module, "_gradient_checkpointing_func", None)
        if inner is None or not getattr(module, "gradient_checkpointing", False):
            continue

        def offloading(function, *args, _inner=inner, **kwargs):
            with host.hooks():
                return _inner(function, *args, **kwargs)

        module._gradient_checkpointing_func = offloading  # every module transformers gives the function to
        host.layers += isinstance(module, GradientCheckpointingLayer)


__all__ = ["HostOffload", "offload_checkpoints"]
