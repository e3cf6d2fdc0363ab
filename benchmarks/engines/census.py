"""Walk an engine's own objects and count the bytes of every tensor they hold, once per storage.

`walk(root, name)` follows attributes, lists, tuples and dicts (tensors' `.grad` too) from `root` and
records, for each distinct storage, the first path that reached it, its dtype, element count and bytes, and
the other paths that reached it (`aliases`, indices dropped). Storages are keyed by
`untyped_storage().data_ptr()`, so views (DeepSpeed's narrowed partitions of one flat buffer, gradients that
are views of an IPG bucket) are counted once, at their whole storage size.
"""

from __future__ import annotations

import re

import torch

SKIP_TYPES = (torch.nn.Module, torch.distributed.ProcessGroup, str, bytes, int, float, bool, type(None))
MAX_DEPTH = 6


class Census:
    """Distinct storages seen so far: data_ptr -> record."""

    def __init__(self) -> None:
        self.seen: dict[int, dict] = {}

    def add(self, t: torch.Tensor, path: str) -> None:
        """Record tensor `t` (its whole storage) under `path` unless its storage was already recorded."""
        if t.is_meta:
            return
        if hasattr(t, "to_local"):  # a DTensor (FSDP2): this rank's shard
            t = t.to_local()
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr == 0:
            return
        if ptr in self.seen:
            alias = pattern(path)
            aliases = self.seen[ptr].setdefault("aliases", [])
            if alias != pattern(self.seen[ptr]["path"]) and alias not in aliases:
                aliases.append(alias)
            return
        self.seen[ptr] = {
            "path": path,
            "dtype": str(t.dtype).removeprefix("torch."),
            "numel": storage.nbytes() // t.element_size(),
            "bytes": storage.nbytes(),
            "pinned": bool(t.is_pinned()) if t.device.type == "cpu" else False,
        }

    def walk(self, obj, path: str, depth: int = 0, visited: set | None = None) -> None:
        """Record every tensor reachable from `obj` (attributes, containers, `.grad`)."""
        visited = set() if visited is None else visited
        if id(obj) in visited or depth > MAX_DEPTH:
            return
        visited.add(id(obj))
        if isinstance(obj, torch.Tensor):
            self.add(obj, path)
            if obj.grad is not None:
                self.add(obj.grad, path + ".grad")
            return
        if isinstance(obj, SKIP_TYPES):
            return
        if isinstance(obj, dict):
            items = [(f"{path}[{_key(k)}]", v) for k, v in obj.items()]
        elif isinstance(obj, (list, tuple, set)):
            items = [(f"{path}[{i}]", v) for i, v in enumerate(obj)]
        elif hasattr(obj, "__dict__") and type(obj).__module__.startswith(("deepspeed", "torch.optim")):
            items = [(f"{path}.{k}", v) for k, v in vars(obj).items()]
        else:
            return
        for sub, value in items:
            self.walk(value, sub, depth + 1, visited)


def pattern(path: str) -> str:
    """A path with its indices dropped, so the views of one storage collapse into a few aliases:
    `opt.bit16_groups[0][3].grad` -> `opt.bit16_groups[].grad`,
    `module.model.layers.1.mlp` -> `module.model.layers.N.mlp`."""
    return re.sub(r"\.\d+\.", ".N.", re.sub(r"\[[^\]]*\]", "[]", path))


def _key(k) -> str:
    """A dict key as a path element: tensors by shape (optimizer.state is keyed by parameter)."""
    return f"param{tuple(k.shape)}" if isinstance(k, torch.Tensor) else str(k)


def root_attr(path: str) -> str:
    """The attribute of the walked root a path starts with: `opt.ipg_buffer[0]` -> `ipg_buffer`."""
    head = path.split(".", 2)[1] if path.count(".") else path
    return head.split("[", 1)[0]
