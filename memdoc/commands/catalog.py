"""`memdoc models` and `memdoc gpus`: the bundled model catalog and GPU table."""

import dataclasses

from memdoc.commands.options import JsonOpt
from memdoc.core.model.gpu import load_gpu_table
from memdoc.units import format_bytes


def models(json_out: JsonOpt = False) -> None:
    """List the bundled model catalog: exact parameters, layers, hidden size, vocabulary, MoE.

    Example: memdoc models --json
    """
    from memdoc import render
    from memdoc.core.model.vision.vlm import model_spec
    from memdoc.resolve.models import catalog_config, catalog_ids

    ids = sorted(set(catalog_ids().values()), key=str.lower)
    specs = [model_spec(catalog_config(i), model_id=i) for i in ids]
    if json_out:
        render.print_json([s.summary() for s in specs])
        return
    rows = [
        [
            s.id,
            s.model_type,
            f"{s.params.total / 1e9:.2f}B",
            f"{s.params.active / 1e9:.2f}B" if s.is_moe else "",
            s.num_layers,
            s.hidden_size,
            f"{s.num_heads}/{s.num_kv_heads}",
            s.vocab_size,
            s.max_positions,
            f"{s.experts_per_token} of {s.num_experts}" if s.is_moe else "",
        ]
        for s in specs
    ]
    render.table(
        f"memdoc catalog: {len(specs)} models (exact parameter counts)",
        [
            ("model", "left"),
            ("type", "left"),
            ("params", "right"),
            ("active", "right"),
            ("layers", "right"),
            ("hidden", "right"),
            ("heads/kv", "right"),
            ("vocab", "right"),
            ("context", "right"),
            ("experts", "right"),
        ],
        rows,
    )


def gpus(json_out: JsonOpt = False) -> None:
    """List the GPU table: memory, bandwidth, bf16 TFLOPs, host link, and the datasheet each comes from.

    Example: memdoc gpus --json
    """
    from memdoc import render

    table = load_gpu_table()
    if json_out:
        render.print_json([dataclasses.asdict(g) for g in table])
        return
    render.table(
        "GPU table (memory as the driver reports it)",
        [
            ("id", "left"),
            ("name", "left"),
            ("memory", "right"),
            ("HBM/GDDR", "right"),
            ("bf16 dense", "right"),
            ("host link", "left"),
        ],
        [
            [
                g.id,
                g.name,
                format_bytes(g.memory_bytes, unit="GiB"),
                f"{g.memory_bandwidth_gbps:,.0f} GB/s" if g.memory_bandwidth_gbps else None,
                f"{g.bf16_tflops:,.0f} TFLOP/s" if g.bf16_tflops else None,
                f"{g.host_link} ({g.host_link_gbps:.0f} GB/s)" if g.host_link_gbps else g.host_link,
            ]
            for g in table
        ],
    )
