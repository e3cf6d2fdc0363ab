"""DeepSpeed's own model-states estimators for Llama-3.1-8B and 70B, as a fixture for the bill to agree with.

    PYTHONPATH=$PWD .venv/bin/python -m benchmarks.engines.ds_estimators

Calls `estimate_zero2_model_states_mem_needs_all_cold` (`deepspeed/runtime/zero/stage_1_and_2.py`) and
`estimate_zero3_model_states_mem_needs_all_cold` (`deepspeed/runtime/zero/stage3.py`), DeepSpeed 0.19.8,
records the exact call and the table they print, and the (cpu, gpu) bytes of every row from the functions
those two loop over (`estimate_zero2_model_states_mem_needs`, `estimate_zero3_model_states_mem_needs`).
Parameter counts come from memdoc's catalog (`resolve_model`); the largest layer is DeepSpeed's
`model_to_params` definition, the largest parameter count of one module's own parameters (here the
embedding or the LM head).
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "engines" / "deepspeed-estimators.json"
MODELS = ("meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-70B")
SETUPS = ((8, 1), (8, 2))
"""(num_gpus_per_node, num_nodes)."""


def largest_module_params(spec) -> int:
    """DeepSpeed's `model_to_params` largest layer: one module's own parameters (a linear, the embedding,
    the head)."""
    linears = [
        l.out_features * l.in_features * l.copies + (l.out_features * l.copies if l.bias else 0)
        for _, layout, _ in spec.layer_groups
        for l in layout.linears
    ]
    return max([spec.params.embedding, spec.params.head, *linears])


def rows(total: int, largest: int, gpus: int, nodes: int) -> dict:
    """Every row the two `_all_cold` functions print, as exact bytes."""
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    z2 = [
        {"offload_optimizer": off, "cpu_bytes": c, "gpu_bytes": g}
        for off in (True, False)
        for c, g in [estimate_zero2_model_states_mem_needs(total, gpus, nodes, cpu_offload=off)]
    ]
    z3 = []
    for off in (True, False):
        for off_params in (True, False):
            if not off and off_params:
                continue
            for zero_init in (True, False):
                c, g, _ = estimate_zero3_model_states_mem_needs(total, largest, gpus, nodes, off, off_params, zero_init)
                z3.append(
                    {
                        "offload_optimizer": off,
                        "offload_param": off_params,
                        "zero_init": zero_init,
                        "cpu_bytes": c,
                        "gpu_bytes": g,
                    }
                )
    return {"zero2": z2, "zero3": z3}


def printed(total: int, largest: int, gpus: int, nodes: int) -> dict:
    """The tables the `_all_cold` functions print (additional_buffer_factor 1.5, their default)."""
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs_all_cold
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs_all_cold

    out = {}
    for key, call in (
        ("zero2", lambda: estimate_zero2_model_states_mem_needs_all_cold(total, gpus, nodes)),
        ("zero3", lambda: estimate_zero3_model_states_mem_needs_all_cold(total, largest, gpus, nodes)),
    ):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            call()
        out[key] = buf.getvalue().splitlines()
    return out


def main() -> int:
    import deepspeed

    from memdoc.resolve.models import resolve_model

    doc = {"deepspeed": deepspeed.__version__, "additional_buffer_factor": 1.5, "models": []}
    for name in MODELS:
        spec = resolve_model(name)
        total, largest = spec.params.total, largest_module_params(spec)
        for gpus, nodes in SETUPS:
            doc["models"].append(
                {
                    "model": name,
                    "total_params": total,
                    "largest_layer_params": largest,
                    "num_gpus_per_node": gpus,
                    "num_nodes": nodes,
                    "calls": [
                        f"estimate_zero2_model_states_mem_needs_all_cold({total}, {gpus}, {nodes})",
                        f"estimate_zero3_model_states_mem_needs_all_cold({total}, {largest}, {gpus}, {nodes})",
                    ],
                    "rows": rows(total, largest, gpus, nodes),
                    "printed": printed(total, largest, gpus, nodes),
                }
            )
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
