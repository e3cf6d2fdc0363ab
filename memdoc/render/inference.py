"""`bill --inference`: the inference bill, its ladder and vLLM's budget on the card."""

from __future__ import annotations

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
    """vLLM's start-up on one rank: its budget, what its log would print, and whether it starts."""
    a = vllm.args
    tp = f", tensor_parallel_size {a.tp}" if a.tp > 1 else ""
    title(f"vLLM {a.version} on this card (gpu_memory_utilization {a.gpu_memory_utilization}{tp}, an estimate)")
    graphs = "in the budget" if vllm.graphs_in_budget else "beyond the budget"
    rows = [
        [f"{a.gpu_memory_utilization} × the card", gib(int(vllm.total_bytes * a.gpu_memory_utilization))],
        ["weights", gib(vllm.weights)],
        [f"profile run ({vllm.profile_tokens:,} tokens)", gib(vllm.activation_peak)],
        ["memory outside torch", gib(vllm.non_torch)],
        ["CUDA graphs" + (" (--enforce-eager: none)" if a.enforce_eager else f" ({graphs})"), gib(vllm.cuda_graphs)],
        ["[b]available KV cache[/b]", gib(vllm.available_kv)],
    ]
    table(None, [("per rank", "left"), ("", "right")], rows)
    for line in vllm.log_lines()[1:]:
        parts_line(f"[dim]log:[/] {line}", indent="")
    if vllm.starts:
        parts_line(f"[green]vLLM starts[/] with max_model_len {vllm.max_model_len:,}", indent="")
    elif vllm.blocks:
        parts_line(
            f"[red]vLLM does not start[/] with max_model_len {vllm.max_model_len:,}: "
            f"--max-model-len {vllm.max_model_len_that_starts:,} is the longest that starts",
            indent="",
        )
    else:
        parts_line("[red]vLLM does not start[/]: no KV-cache block fits the budget", indent="")
    if result is not None and vllm.starts:
        wanted = result.inference.batch * result.inference.context
        if wanted > vllm.kv_cache_tokens:
            parts_line(
                f"batch {result.inference.batch} × {result.inference.context:,} tokens needs {wanted:,} cached "
                f"tokens: more than vLLM's {vllm.kv_cache_tokens:,} (it queues the rest)",
                indent="",
            )


def render_vllm_startup(vllm) -> None:
    """`bill --inference --engine vllm`: vLLM's start-up alone."""
    _render_vllm(vllm, None)


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
