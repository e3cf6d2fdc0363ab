"""The accumulator of one decoder layer's saved tensors, and the RMSNorm rule every norm follows."""

from __future__ import annotations

FP32 = 4
"""Bytes of an fp32 element."""


class SavedTensors:
    """Accumulates the tensors one decoder layer (or the head) saves for backward, in bytes by module."""

    def __init__(self) -> None:
        self.items: dict[str, int] = {}

    def add(self, module: str, nbytes: float) -> None:
        self.items[module] = self.items.get(module, 0) + int(nbytes)

    @property
    def total(self) -> int:
        return sum(self.items.values())


def norm_saved(
    layer: SavedTensors,
    name: str,
    T: int,
    width: int,
    *,
    dt: int,
    trainable: bool,
    gemma: bool,
    amp: bool,
    liger: bool = False,
) -> None:
    """RMSNorm: fp32 copy of the input (pow/mul), rsqrt (T floats), normalised output if the weight trains.

    LlamaRMSNorm: `x32 = x.float(); x32 * rsqrt(mean(x32²)); weight * y.to(dtype)`. In fp32 the
    `.float()` is a no-op (no copy, the residual stream is saved instead — same bytes).
    GemmaRMSNorm multiplies in fp32 by (1 + weight), so its saved normalised tensor is fp32.
    Liger's RMSNorm (`LigerRMSNormFunction`) saves its input X itself and an fp32 RSTD per row; the
    weight's gradient is rebuilt from them, so nothing more when the weight trains.
    """
    if liger:
        layer.add(name, (FP32 if amp else dt) * T * width + FP32 * T)
        return
    layer.add(name, FP32 * T * width + FP32 * T)
    if trainable:
        out_bytes = FP32 if (gemma or amp) else dt
        layer.add(name, out_bytes * T * width)


__all__ = ["FP32", "SavedTensors", "norm_saved"]
