"""`bill --inference`: the inference bill, its ladder and vLLM's budget on the card."""

from __future__ import annotations

import math

from memdoc.render.bill import render_verdict
from memdoc.render.common import gib, ruled_table, table
from memdoc.render.layout import NARROW_COLUMNS, parts_line, stdout, title


def _setting(plan) -> str:
    """'batch 8 × 8192 tokens, KV fp8, weights nf4' (only what differs from the defaults after the first part)."""
    text = f"batch {plan.batch} × {plan.context:,} tokens"
    if plan.kv_cache.value != "auto":
        text += f", KV {plan.kv_cache.value}"
    if plan.weight_format.value != "auto":
        text += f", weights {plan.weight_format.value}"
    if plan.chunk < plan.context:
        text += f", prefill by {plan.chunk:,}"
    return text


def render_inference(result, ladder=(), vllm=None) -> None:
    rows = [
        [
            "weights"
            + ("" if result.inference.weight_format.value == "auto" else f" ({result.inference.weight_format.value})"),
            gib(result.weights),
        ],
        [
            "KV cache" + ("" if result.inference.kv_cache.value == "auto" else f" ({result.inference.kv_cache.value})"),
            gib(result.kv_cache),
        ],
        [
            "activations (prefill"
            + (f" by {result.inference.chunk:,} tokens" if result.inference.chunk < result.inference.context else "")
            + ")",
            gib(result.activations),
        ],
        ["[b]peak allocated[/b]", gib(result.peak_allocated)],
        ["process total", gib(result.process_total)],
    ]
    table(f"{result.model.id} inference · {_setting(result.inference)}", [("item", "left"), ("per GPU", "right")], rows)
    if result.gpu is not None:
        render_verdict(
            result.fit,  # no allocator simulation: the process total is the minimum
            result.gpu,
            result.plan.world_size,
            basis="inference is checked against fake-tensor traces, not yet measured on a GPU",
        )
    if ladder:
        _render_ladder(ladder)
    if vllm is not None:
        _render_vllm(vllm, result)


def _render_ladder(ladder) -> None:
    narrow = stdout.width < NARROW_COLUMNS
    title("The inference ladder: cheapest remedies first, each on top of the last")
    t = ruled_table(narrow)
    for header, justify in (
        ("#", "right"),
        ("remedy", "left"),
        ("then", "left"),
        ("process", "right"),
        ("costs", "left"),
        ("fits", "left"),
    ):
        t.add_column(header, justify=justify, no_wrap=header in ("#", "process", "fits"))
    for i, step in enumerate(ladder, 1):
        t.add_row(
            str(i),
            step.rung.action,
            _setting(step.bill.inference),
            gib(step.bill.process_total),
            step.rung.cost,
            "[green]yes[/]" if step.fits else "no",
        )
    stdout.print(t)
    if not ladder[-1].fits:
        stdout.print(
            "[red]Nothing on the ladder makes it fit: the weights alone are too large for this card; "
            "use tensor parallelism over more GPUs or a bigger GPU.[/]"
        )


def _render_vllm(vllm, result) -> None:
    title(f"vLLM on this card (gpu_memory_utilization {vllm.utilization}, an estimate)")
    if vllm.kv_tokens == 0:
        parts_line(
            f"[red]vLLM would not start[/]: weights, its profiling run and the CUDA context exceed "
            f"{vllm.utilization} of the card by {gib(-vllm.kv_budget_bytes)}",
            indent="",
        )
        return
    parts_line(
        f"KV cache {gib(vllm.kv_budget_bytes)} = {vllm.kv_tokens:,} tokens",
        f"max_model_len up to {vllm.max_model_len:,}",
        *([f"{vllm.sequences:,} sequences of {result.inference.context:,} tokens at once"] if vllm.sequences else []),
        indent="",
    )
    need = math.ceil(vllm.utilization_needed * 100) / 100  # the setting to pass, rounded up
    wanted = f"batch {result.inference.batch} × {result.inference.context:,} tokens"
    if need <= vllm.utilization:
        parts_line(f"{wanted} fits at the default utilization (it needs {need:.2f})", indent="")
    elif need <= 0.99:
        parts_line(f"{wanted} needs gpu_memory_utilization ≥ {need:.2f} (if nothing else runs on the card)", indent="")
    else:
        fp8 = "" if result.inference.kv_cache.value == "fp8" else ", or kv_cache_dtype fp8"
        parts_line(
            f"[red]{wanted} does not fit vLLM's cache on this card[/] (it would need {need:.2f} of it): "
            f"lower max_num_seqs / max_model_len{fp8}",
            indent="",
        )


def render_inference_trace(traced, billed) -> None:
    """`diagnose MODEL --inference`: the traced prefill next to the inference bill."""
    rows = []
    for label, measured, bill in (
        ("weights", traced.weights, billed.weights),
        ("KV cache", traced.kv_cache, billed.kv_cache),
        ("activations (prefill)", traced.activations, billed.activations),
        ("[b]peak allocated[/b]", traced.peak, billed.peak_allocated),
    ):
        delta = "" if not measured else f"{(bill - measured) / measured:+.1%}"
        rows.append([label, gib(measured), gib(bill), delta])
    table(
        f"{billed.model.id} prefill traced on fake tensors · {_setting(billed.inference)}",
        [("item", "left"), ("traced", "right"), ("billed", "right"), ("Δ", "right")],
        rows,
        caption="traced: transformers' own forward into a DynamicCache, logits of the last position only",
    )
