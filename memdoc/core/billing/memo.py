"""Bills computed once per (model, plan, GPU): the ladder, the plan search and `--max` bill the same plan
more than once (the report's bill and the climb's first rung; the search's smallest and largest
micro-batch when they are one), and a bill's allocator simulation is its one costly step.

A bill is a pure function of its model, plan and GPU. Plans are frozen dataclasses and compare by
value (every caller derives them with `TrainingPlan.replace`); the model and the GPU are matched by
identity (the model's raw `config` dict takes no part in `ModelSpec`'s equality, yet the bill reads
it), and the cached bill holds both, so their `id`s stay their own.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # (not `Bill`: bill.py imports this module)
    from memdoc.core.model.gpu import GpuSpec
    from memdoc.core.model.model_spec import ModelSpec
    from memdoc.core.model.plan import TrainingPlan

MAX_BILLS = 64
"""Bills kept (least recently used dropped first): a 70B plan search bills about 50 distinct plans."""


def memoized_bill(compute: Callable[..., Any]) -> Callable[..., Any]:
    """`compute(model, plan, gpu)` that returns the earlier Bill for the same model and GPU objects and an
    equal plan."""
    cache: OrderedDict[tuple, Any] = OrderedDict()
    lock = threading.Lock()  # a diagnosed script may bill from its own threads (the HF callback)

    @functools.wraps(compute)
    def wrapper(model: ModelSpec, plan: TrainingPlan, gpu: GpuSpec | None = None) -> Any:
        # lora_dropout may be 0 or 0.0: equal, but the plan's JSON would show the other one
        key = (id(model), id(gpu), plan, type(plan.lora_dropout))
        with lock:
            hit = cache.get(key)
            if hit is not None and hit.model is model and hit.gpu is gpu:
                cache.move_to_end(key)
                return hit
        bill = compute(model, plan, gpu)
        with lock:
            cache[key] = bill
            if len(cache) > MAX_BILLS:
                cache.popitem(last=False)
        return bill

    wrapper.cache_clear = cache.clear  # type: ignore[attr-defined]
    return wrapper
