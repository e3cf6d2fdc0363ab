"""Fake tensors that still know their index values: what a VLM's forward needs to run under FakeTensorMode.

A vision-language model's forward reads values, not just shapes, from small integer tensors: Qwen-VL's
`image_grid_thw.tolist()` and the windows, positions and rope index derived from it
(`transformers/vision_utils.py` `get_vision_position_ids`, `get_vision_window_index`, transformers 5.24),
`input_ids == image_token_id` masks whose sums are checked against the image features, Idefics3's patch
masks. A plain `FakeTensorMode` refuses each of them (`DataDependentOutputException`).

torch's fake mode already propagates *constants*: a fake tensor made from a real one (`torch.tensor([...])`)
carries the real values, and an op whose inputs are all constants runs for real
(`torch/_subclasses/fake_tensor.py` `FakeTensorMode._dispatch_impl`, torch 2.13), but only for tensors of at
most `CONSTANT_NUMEL_LIMIT` (1) element, and integer factories (`torch.arange`) never make constants.
`IndexFakeTensorMode` raises that limit to `INDEX_NUMEL_LIMIT` for the duration and makes integer and boolean
factories constants too, so index arithmetic runs for real while every floating-point tensor (weights,
activations, pixels) stays fake. The constants are still fake tensors with their storage sizes: the
memory tracker sees them as it sees any tensor.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
import torch._subclasses.fake_tensor as fake_tensor
from torch._guards import detect_fake_mode

INDEX_NUMEL_LIMIT = 1 << 26
"""Most elements of a constant computed for real (64M: Idefics3's constant pixels of 13 views of 384² in a row of 4;
position ids and masks of long rows)."""


def _is_constructor(func) -> bool:
    """An op that makes one tensor from no tensor argument (`torch/_subclasses/fake_impls.py`'s rule, torch 2.13)."""
    schema = getattr(func, "_schema", None)
    if schema is None or len(schema.returns) != 1 or not isinstance(schema.returns[0].type, torch.TensorType):
        return False
    return not any("Tensor" in str(a.type) for a in schema.arguments)


def _integral_factory(func, args, kwargs) -> bool:
    """An integer or boolean constructor on the CPU with no tensor argument (`arange(n)`, `zeros(…, dtype=long)`)."""
    if not _is_constructor(func) or any(isinstance(a, torch.Tensor) for a in args):
        return False
    device = kwargs.get("device")
    if device is not None and torch.device(device).type != "cpu":
        return False
    dtype = kwargs.get("dtype")
    if dtype is not None:
        return not (dtype.is_floating_point or dtype.is_complex)
    # arange's dtype follows its arguments: integers make int64
    return func.overloadpacket.__name__ == "arange" and all(isinstance(a, int) for a in args)


class IndexFakeTensorMode(fake_tensor.FakeTensorMode):
    """`FakeTensorMode` whose integer and boolean factories make constants (real values kept alongside)."""

    def dispatch(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if _integral_factory(func, args, kwargs):
            with fake_tensor.no_dispatch():
                real = func(*args, **kwargs)
            if real.numel() <= INDEX_NUMEL_LIMIT:
                return self.fake_tensor_converter.from_real_tensor(self, real, make_constant=True)
        return super().dispatch(func, types, args, kwargs)


def constant(make: Callable[[], torch.Tensor]) -> torch.Tensor:
    """The real tensor `make()` returns, as a constant of the active fake mode (its values kept)."""
    mode = detect_fake_mode()
    with fake_tensor.unset_fake_temporarily():
        real = make()
    return mode.fake_tensor_converter.from_real_tensor(mode, real, make_constant=True)


@contextlib.contextmanager
def index_fake_mode() -> Iterator[IndexFakeTensorMode]:
    """Enter an `IndexFakeTensorMode` with torch's constant limit raised to `INDEX_NUMEL_LIMIT` (restored after)."""
    old = fake_tensor.CONSTANT_NUMEL_LIMIT
    fake_tensor.CONSTANT_NUMEL_LIMIT = INDEX_NUMEL_LIMIT
    try:
        with IndexFakeTensorMode() as mode:
            yield mode
    finally:
        fake_tensor.CONSTANT_NUMEL_LIMIT = old


__all__ = ["INDEX_NUMEL_LIMIT", "IndexFakeTensorMode", "constant", "index_fake_mode"]
