"""The inference bill vs a fake-tensor trace of transformers' own prefill (no GPU needed).

    python benchmarks/inference.py

Each case builds the real model (random weights on fake tensors), prefills `batch` sequences of
`seq` tokens into a DynamicCache — whole, or in chunks as `generate(prefill_chunk_size=N)` does —
and takes the peak of live tensor bytes (memdoc.probe.inference_trace). The bill is
`memdoc bill --inference` for the same plan. Weights and cache must match exactly; the peak is
compared. This is a trace, not a GPU measurement: CUDA's kernels and allocator are not in it.
Done when: weights and cache exact in every case, peak within 2% in every case (both printed).
"""

from __future__ import annotations

import statistics

from memdoc.core.billing.inference import InferencePlan, inference_bill
from memdoc.probe.inference_trace import trace_prefill
from memdoc.probe.quiet import quiet_libraries
from memdoc.resolve.models import load_config
from memdoc.resolve.setup import resolve_setup

CASES = [
    # model, batch, seq, prefill chunk, extra plan flags
    ("Qwen/Qwen2.5-0.5B", 2, 1024, None, {}),
    ("meta-llama/Llama-3.2-1B", 4, 2048, None, {}),
    ("meta-llama/Llama-3.2-1B", 2, 4096, 512, {}),
    ("meta-llama/Llama-3.2-1B", 1, 2048, None, {"attention": "eager"}),
    ("meta-llama/Llama-3.2-1B", 2, 2048, None, {"precision": "fp32"}),
    ("Qwen/Qwen3-1.7B", 2, 4096, None, {}),
    ("meta-llama/Llama-2-7b-hf", 1, 4096, None, {}),
    ("meta-llama/Llama-2-7b-hf", 1, 4096, 1024, {}),
    ("mistralai/Mistral-7B-v0.1", 2, 4096, None, {}),
    ("Qwen/Qwen2.5-7B", 4, 4096, None, {}),
    ("meta-llama/Llama-3.1-8B", 1, 16384, 2048, {}),
    ("microsoft/Phi-3-mini-4k-instruct", 2, 4096, None, {}),
    ("google/gemma-2-2b", 1, 8192, None, {}),  # eager attention (softcapping), sliding + full masks
    # MoE: transformers' expert loop sizes each expert's batch from the routing, which fake tensors
    # cannot know; the transient of this row is not a prediction target (the peak still is)
    ("Qwen/Qwen3-30B-A3B", 1, 2048, None, {}),
]


def main() -> None:
    print("| model | batch × seq | chunk | flags | traced peak | billed peak | Δ peak | Δ transient |")
    print("|---|---|---|---|---|---|---|---|")
    errors, exact = [], True
    for model_id, batch, seq, chunk, flags in CASES:
        setup = resolve_setup(model_id, need_gpu=False, **({"precision": "bf16"} | flags), batch=batch, seq=seq)
        model, plan = setup.model, setup.plan
        _, config, _ = load_config(model_id)
        with quiet_libraries():
            traced = trace_prefill(config, plan, chunk=chunk, vocab_size=model.vocab_size)
        billed = inference_bill(model, InferencePlan(plan=plan, prefill_chunk=chunk), None)
        exact &= (billed.weights, billed.kv_cache) == (traced.weights, traced.kv_cache)
        error = billed.peak_allocated / traced.peak - 1
        errors.append(error)
        flag_text = " ".join(f"--{k} {v}" for k, v in flags.items()) or "—"
        print(
            f"| {model_id} | {batch} × {seq} | {chunk or '—'} | {flag_text} | {traced.peak / 2**30:.2f} GiB | "
            f"{billed.peak_allocated / 2**30:.2f} GiB | {error:+.2%} | "
            f"{billed.activations / traced.activations - 1:+.1%} |"
        )
    worst = max(errors, key=abs)
    print(
        f"\n{len(errors)} cases · weights and KV cache exact: {exact} · peak: median |Δ| "
        f"{statistics.median(abs(e) for e in errors):.2%}, worst {worst:+.2%}"
    )


if __name__ == "__main__":
    main()
