"""Engine semantics as data: what DDP, DeepSpeed ZeRO-1/2/3, FSDP1 (accelerate) and FSDP2 allocate for a plan.

`layout.engine_layout(plan)`: the engine and the dtype of each model state, what it shards and offloads;
`buffers.device_buffers(...)`: the engine's buffers on each GPU, from its knobs; `host.host_items(...)`: what
each rank keeps in host RAM (pinned) or on NVMe. Rules and sources: docs/engines.md.
"""

from memdoc.core.engines.layout import Engine, EngineLayout, engine_layout

__all__ = ["Engine", "EngineLayout", "engine_layout"]
