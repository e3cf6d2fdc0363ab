"""Bill vs truth: the analytic bill against fake-tensor traces of the real HF code, and against
published measured peaks (../shared/references.md).

    python benchmarks/accuracy.py            # 30+ traced cases (minutes) + published rows
    python benchmarks/accuracy.py --fast     # the subset the tests run
    python benchmarks/accuracy.py --published
    python benchmarks/h200.py                # the bill against real H200 steps (benchmarks/data/h200.jsonl)

Prints one row per case: traced peak_allocated, billed peak_allocated, relative error, and the
phase each puts the peak in. The traced step is `memdoc diagnose MODEL` (layers extrapolated).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from memdoc.core.billing.bill import compute_bill
from memdoc.core.model.lora import fit_lora_targets
from memdoc.core.model.plan import parse_plan
from memdoc.resolve.models import load_config, resolve_model

GiB = 1024**3
GB = 10**9

# (model, plan flags). ≥6 families incl. MoE; full/LoRA/QLoRA; bf16/AMP/fp32; checkpointing;
# sdpa/eager; batch 1–8; seq 512–8192; sharding over 8. GPT-2 is left out on purpose: its attention
# dropout makes CPU SDPA (and so the fake-CPU trace) fall back to the s² math kernel, while CUDA's
# flash kernel (what the bill models) handles dropout in O(s).
CASES = [
    ("meta-llama/Llama-2-7b-hf", {}),
    ("meta-llama/Llama-2-7b-hf", {"method": "lora"}),
    ("meta-llama/Llama-2-7b-hf", {"method": "lora", "checkpointing": "full", "batch": 2}),
    ("meta-llama/Llama-2-7b-hf", {"precision": "amp-bf16"}),
    ("meta-llama/Llama-2-7b-hf", {"method": "qlora", "checkpointing": "full", "lora_targets": "all-linear"}),
    ("meta-llama/Llama-2-7b-hf", {"attention": "eager", "seq": 1024}),
    ("meta-llama/Llama-2-7b-hf", {"shard": "fsdp", "gpus": 8}),
    ("meta-llama/Llama-3.1-8B", {"method": "lora", "checkpointing": "full", "batch": 4}),
    ("meta-llama/Llama-3.1-8B", {"batch": 2, "seq": 4096, "checkpointing": "full"}),
    ("meta-llama/Llama-3.2-1B", {"batch": 8, "seq": 1024}),
    ("meta-llama/Llama-3.2-1B", {"precision": "fp32", "seq": 512}),
    ("meta-llama/Llama-3.2-3B", {"method": "lora", "seq": 8192, "checkpointing": "full"}),
    ("meta-llama/Llama-3.2-3B", {"optimizer": "adamw-fused", "batch": 2}),
    ("Qwen/Qwen2.5-0.5B", {"batch": 4, "seq": 2048}),
    ("Qwen/Qwen2.5-1.5B", {"precision": "amp-bf16", "seq": 1024}),
    ("Qwen/Qwen2.5-7B", {"method": "lora", "lora_targets": "all-linear", "checkpointing": "full"}),
    ("Qwen/Qwen2.5-7B", {"method": "qlora", "checkpointing": "full", "batch": 2}),
    ("Qwen/Qwen3-0.6B", {"attention": "eager", "seq": 512, "batch": 2}),
    ("Qwen/Qwen3-8B", {"method": "lora", "checkpointing": "full"}),
    ("Qwen/Qwen3-1.7B", {"checkpointing": "selective"}),
    ("mistralai/Mistral-7B-v0.1", {"method": "lora", "batch": 2, "seq": 1024}),
    ("mistralai/Mistral-7B-v0.1", {"optimizer": "adamw-8bit", "checkpointing": "full"}),
    ("google/gemma-2b", {"seq": 1024}),
    ("google/gemma-2b", {"method": "lora", "checkpointing": "full", "batch": 4}),
    ("google/gemma-2-2b", {"method": "lora", "seq": 1024}),
    ("microsoft/Phi-3-mini-4k-instruct", {"method": "lora", "checkpointing": "full"}),
    ("microsoft/Phi-3-mini-4k-instruct", {"seq": 1024}),
    ("mistralai/Mixtral-8x7B-v0.1", {"method": "qlora", "checkpointing": "full", "seq": 1024}),
    ("Qwen/Qwen3-30B-A3B", {"method": "lora", "checkpointing": "full", "seq": 1024}),
    ("meta-llama/Llama-3.1-8B", {"shard": "zero3", "gpus": 8, "checkpointing": "full"}),
    ("meta-llama/Llama-2-13b-hf", {"method": "lora", "checkpointing": "full", "optimizer": "sgd"}),
    ("meta-llama/Llama-3.2-1B", {"method": "lora", "precision": "amp-bf16", "seq": 1024}),
    ("Qwen/Qwen2.5-1.5B", {"method": "lora", "checkpointing": "selective", "seq": 1024}),
    ("EleutherAI/pythia-1b", {"method": "lora", "seq": 1024}),
    ("microsoft/phi-2", {"method": "lora", "seq": 1024}),
    ("tiiuae/falcon-7b", {"method": "lora", "seq": 1024}),
    ("deepseek-ai/DeepSeek-V2-Lite", {"method": "lora", "checkpointing": "full", "seq": 1024}),
    ("Qwen/Qwen2-57B-A14B", {"method": "lora", "checkpointing": "full", "seq": 512}),
    ("google/gemma-2-9b", {"seq": 1024}),
    ("Qwen/Qwen3-30B-A3B", {"method": "lora", "seq": 512}),
    ("mistralai/Mixtral-8x7B-v0.1", {"method": "lora", "seq": 512}),
    # gradient accumulation: the trace runs N micro-batches, later ones with the gradients resident
    ("meta-llama/Llama-3.2-1B", {"precision": "amp-bf16", "batch": 2, "seq": 1024, "accum": 2}),
    ("Qwen/Qwen2.5-0.5B", {"batch": 4, "seq": 1024, "accum": 4}),
    ("meta-llama/Llama-2-7b-hf", {"accum": 2, "seq": 1024}),
    ("meta-llama/Llama-2-7b-hf", {"method": "lora", "accum": 4}),
    ("Qwen/Qwen2.5-1.5B", {"accum": 2, "checkpointing": "full", "optimizer": "adamw-foreach"}),
    # partial checkpointing (every Nth layer): the last layer checkpointed (Llama 16 layers, N = 5) or not
    (
        "meta-llama/Llama-3.2-1B",
        {"method": "lora", "batch": 2, "seq": 1024, "checkpointing": "full", "checkpoint_every": 5},
    ),
    ("Qwen/Qwen2.5-0.5B", {"batch": 4, "seq": 1024, "checkpointing": "full", "checkpoint_every": 3}),
    # LoRA dropout > 0 (TRL's / Axolotl's examples): one more fp32 copy of each adapted input
    ("meta-llama/Llama-2-7b-hf", {"method": "lora", "lora_dropout": 0.05}),
    # QLoRA after peft's prepare_model_for_kbit_training: fp32 embeddings, head, norms and the tensors
    # between 4-bit matmuls
    ("meta-llama/Llama-3.1-8B", {"method": "qlora", "kbit_upcast": True, "seq": 1024}),
    (
        "meta-llama/Llama-3.2-1B",
        {"method": "qlora", "kbit_upcast": True, "precision": "amp-bf16", "batch": 2, "seq": 1024},
    ),
    # QLoRA under autocast: peft's 4-bit LoRA layer does not cast its input, adapters share it
    (
        "meta-llama/Llama-3.2-1B",
        {"method": "qlora", "precision": "amp-bf16", "lora_targets": "all-linear", "seq": 1024},
    ),
]

FAST = [
    ("Qwen/Qwen2.5-0.5B", {"seq": 512}),
    ("Qwen/Qwen2.5-0.5B", {"method": "lora", "seq": 512, "batch": 2}),
    ("meta-llama/Llama-3.2-1B", {"seq": 512, "checkpointing": "full"}),
    ("meta-llama/Llama-3.2-1B", {"seq": 512, "precision": "amp-bf16"}),
    ("Qwen/Qwen3-0.6B", {"seq": 512, "attention": "eager"}),
    ("google/gemma-2b", {"seq": 512, "method": "lora", "checkpointing": "full"}),
    ("meta-llama/Llama-3.2-1B", {"seq": 512, "precision": "fp32", "optimizer": "adamw-fused"}),
]


def traced_vs_billed(model_id: str, flags: dict) -> dict:
    """Trace the step and bill it; returns both peaks and the relative error of the bill."""
    from memdoc.probe.tracer import trace_training_step

    spec = resolve_model(model_id)
    _, config, _ = load_config(model_id)
    plan = fit_lora_targets(parse_plan(**flags), spec)  # peft's defaults where q_proj/v_proj do not exist
    start = time.perf_counter()
    measured = trace_training_step(config, plan)
    seconds = time.perf_counter() - start
    bill = compute_bill(spec, plan)
    return {
        "model": model_id,
        "flags": flags,
        "traced": measured.peak_allocated,
        "traced_phase": measured.peak_phase,
        "billed": bill.peak_allocated,
        "billed_phase": bill.peak_phase,
        "error": bill.peak_allocated / measured.peak_allocated - 1,
        "seconds": seconds,
    }


# Published measured peaks (../shared/references.md). Each row: our plan for it, the figure, its unit, its metric.
# P7-P9 ran AnswerDotAI/fsdp_qlora's train.py, whose `lora_dropout` defaults to 0.1; torchtune's LoRA configs use 0.0.
PUBLISHED = [
    ("P2", "meta-llama/Llama-3.2-3B", {"batch": 2, "seq": 4096, "checkpointing": "full"}, 24.9 * GiB, "active"),
    (
        "P4",
        "meta-llama/Llama-3.2-3B",
        {
            "method": "lora",
            "lora_rank": 64,
            "lora_targets": "q_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",
            "batch": 2,
            "seq": 4096,
            "checkpointing": "full",
        },
        8.5 * GiB,
        "active",
    ),
    (
        "P5",
        "meta-llama/Llama-3.2-3B",
        {
            "method": "qlora",
            "lora_rank": 64,
            "lora_targets": "q_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",
            "batch": 2,
            "seq": 4096,
            "checkpointing": "full",
        },
        4.6 * GiB,
        "active",
    ),
    (
        "P7",
        "meta-llama/Llama-2-7b-hf",
        {
            "method": "lora",
            "lora_rank": 64,
            "lora_targets": "all-linear",
            "shard": "fsdp",
            "gpus": 2,
            "seq": 2048,
            "checkpointing": "full",
            "lora_dropout": 0.1,
        },
        9.16 * GiB,
        "allocated",
    ),
    (
        "P9",
        "meta-llama/Llama-2-7b-hf",
        {
            "method": "lora",
            "lora_rank": 64,
            "lora_targets": "all-linear",
            "shard": "fsdp",
            "gpus": 2,
            "batch": 4,
            "seq": 2048,
            "checkpointing": "full",
            "lora_dropout": 0.1,
        },
        16.14 * GiB,
        "reserved",
    ),
    (
        "P8",
        "meta-llama/Llama-2-7b-hf",
        {
            "method": "qlora",
            "lora_rank": 64,
            "lora_targets": "all-linear",
            "shard": "fsdp",
            "gpus": 2,
            "batch": 4,
            "seq": 2048,
            "checkpointing": "full",
            "lora_dropout": 0.1,
        },
        11.22 * GiB,
        "reserved",
    ),
    (
        "P10",
        "meta-llama/Llama-2-7b-hf",
        {"method": "lora", "lora_rank": 8, "batch": 2, "seq": 512, "checkpointing": "full"},
        15.57 * GB,
        "reserved",
    ),
    (
        "P11",
        "meta-llama/Llama-2-7b-hf",
        {
            "method": "lora",
            "lora_rank": 64,
            "lora_targets": "all-linear",
            "batch": 2,
            "seq": 512,
            "checkpointing": "full",
        },
        17.04 * GB,
        "reserved",
    ),
    (
        "P12",
        "meta-llama/Llama-2-7b-hf",
        {
            "method": "qlora",
            "lora_rank": 8,
            "lora_targets": "all-linear",
            "batch": 2,
            "seq": 512,
            "checkpointing": "full",
        },
        9.29 * GB,
        "reserved",
    ),
    (
        "P13",
        "meta-llama/Meta-Llama-3-8B",
        {"method": "lora", "lora_rank": 8, "batch": 2, "seq": 512, "checkpointing": "full"},
        18.5 * GB,
        "reserved",
    ),
    (
        "P14",
        "meta-llama/Llama-2-7b-hf",
        {"method": "lora", "batch": 4, "seq": 2048, "checkpointing": "full"},
        21.3 * GB,
        "reserved",
    ),
]


def other_estimators(model_id: str, flags: dict) -> dict:
    """What today's estimators say for the same row (bytes, None where they have no answer).

    * accelerate `estimate-memory` (its own `estimate_training_usage`): full fine-tuning with Adam
      = the largest of model / gradients / optimizer / step sizes (8 bytes/param in fp16); for
      LoRA/QLoRA it only has the weights ("Total Size", 16-bit or int4).
    * DeepSpeed `estimate_zero2/3_model_states_mem_needs` (its own functions, buffer factor 1):
      model states of full fine-tuning on the row's GPUs; no answer for LoRA.
    * LLaMA-Factory's README table, x = billions of parameters: full pure bf16 8x GB, LoRA 2x GB,
      QLoRA 4-bit x/2 GB.
    """
    spec = resolve_model(model_id)
    params = spec.params.total
    plan = parse_plan(**flags)
    method = plan.method.value
    out = {"accelerate": None, "deepspeed": None, "llamafactory": None}
    try:
        from accelerate.commands.estimate import estimate_training_usage

        if method == "full":
            out["accelerate"] = max(estimate_training_usage(params * 4, "float16").values())
        else:
            out["accelerate"] = params * 2 if method == "lora" else params // 2
    except ImportError:
        pass
    if method == "full":
        try:
            from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
            from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

            if plan.shard.value in ("zero3", "fsdp"):
                largest = compute_bill(spec, plan).states.largest_layer_params
                out["deepspeed"] = estimate_zero3_model_states_mem_needs(
                    params, largest, plan.gpus_per_node, plan.nodes, False, False, False, 1
                )[1]
            else:
                out["deepspeed"] = estimate_zero2_model_states_mem_needs(params, plan.world_size, 1, False, 1)[1]
        except ImportError:
            pass
    x = params / 1e9
    out["llamafactory"] = int({"full": 8 * x, "lora": 2 * x, "qlora": x / 2}[method] * GB)
    return out


def published_rows() -> list[dict]:
    rows = []
    for ref, model_id, flags, measured, metric in PUBLISHED:
        bill = compute_bill(resolve_model(model_id), parse_plan(**flags))
        ours = bill.peak_reserved if metric == "reserved" else bill.peak_allocated
        rows.append(
            {
                "ref": ref,
                "model": model_id,
                "metric": metric,
                "measured": measured,
                "billed": ours,
                "error": ours / measured - 1,
                **other_estimators(model_id, flags),
            }
        )
    return rows


def _gib(value) -> str:
    return f"{value / GiB:8.2f}Gi" if value is not None else f"{'n/a':>10}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fast", action="store_true", help="only the fast subset (small models)")
    parser.add_argument("--published", action="store_true", help="only the published-figure comparison")
    args = parser.parse_args()
    if not args.published:
        cases = FAST if args.fast else CASES
        errors = []
        print(f"{'model':36} {'plan':58} {'traced':>10} {'billed':>10} {'error':>7}  phase (traced/billed)")
        for model_id, flags in cases:
            row = traced_vs_billed(model_id, flags)
            errors.append(abs(row["error"]))
            plan = " ".join(f"{k}={v}" for k, v in flags.items()) or "defaults"
            print(
                f"{model_id:36} {plan[:58]:58} {row['traced'] / GiB:8.2f}Gi {row['billed'] / GiB:8.2f}Gi "
                f"{row['error'] * 100:+6.1f}%  {row['traced_phase']}/{row['billed_phase']}  ({row['seconds']:.1f}s)",
                flush=True,
            )
        print(
            f"\n{len(errors)} cases: median |error| {statistics.median(errors) * 100:.1f}%, max "
            f"{max(errors) * 100:.1f}%"
        )
    if args.published or not args.fast:
        print(
            f"\n{'ref':4} {'model':28} {'metric':9} {'measured':>10} {'memdoc':>10} {'error':>7} "
            f"{'accelerate':>10} {'DeepSpeed':>10} {'LLaMA-Fac.':>10}"
        )
        for row in published_rows():
            print(
                f"{row['ref']:4} {row['model']:28} {row['metric']:9} {row['measured'] / GiB:8.2f}Gi "
                f"{row['billed'] / GiB:8.2f}Gi {row['error'] * 100:+6.1f}% {_gib(row['accelerate'])} "
                f"{_gib(row['deepspeed'])} {_gib(row['llamafactory'])}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
