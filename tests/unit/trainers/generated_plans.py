"""The trainer YAML readers' tests (Axolotl, LLaMA-Factory): a YAML parsed as the file loader parses it,
and their round trips through memdoc's emitters over generated plans (every plan field a trainer YAML can
say, as `TrainingPlan.from_dict` takes it)."""

from __future__ import annotations

from pathlib import Path

import yaml
from hypothesis import assume
from hypothesis import strategies as st

from memdoc.core.model.plan import TrainingPlan
from memdoc.core.trainers.emit import EmitContext, emit
from memdoc.core.trainers.reading import SourceDoc
from memdoc.errors import PlanError

PLAN_VALUES = st.fixed_dictionaries(
    {
        "method": st.sampled_from(["full", "lora", "qlora"]),
        "precision": st.sampled_from(["bf16", "fp16", "fp32", "amp-bf16", "amp-fp16"]),
        "optimizer": st.sampled_from(
            ["adamw-fused", "adamw-foreach", "adamw-8bit", "paged-adamw-8bit", "sgd", "adafactor", "lion"]
        ),
        "micro_batch": st.integers(1, 64),
        "seq_len": st.integers(1, 131072),
        "grad_accum": st.integers(1, 64),
        "checkpointing": st.sampled_from(["none", "full", "selective"]),
        "attention": st.sampled_from(["sdpa", "eager"]),
        "loss": st.sampled_from(["hf", "fused", "fused-ce"]),
        "lora_rank": st.integers(1, 256),
        "lora_alpha": st.one_of(st.none(), st.integers(1, 512)),
        "lora_dropout": st.sampled_from([0.0, 0.05, 0.1]),
        "lora_targets": st.sampled_from([["all-linear"], ["q_proj", "v_proj"], ["q_proj", "k_proj", "o_proj"]]),
        "shard": st.sampled_from(["none", "zero1", "zero2", "zero3", "fsdp"]),
        "offload": st.sampled_from(["none", "optimizer", "optimizer+params"]),
        "gpus_per_node": st.sampled_from([1, 2, 8]),
    }
)


def generated_plan(values: dict) -> TrainingPlan:
    try:
        return TrainingPlan.from_dict(values)
    except PlanError:
        assume(False)


def load_doc(path: Path | str, text: str | None = None) -> SourceDoc:
    """A parsed YAML with each top-level key's 1-based line (as the file loader gives it)."""
    text = Path(path).read_text() if text is None else text
    node = yaml.compose(text)
    lines = {k.value: k.start_mark.line + 1 for k, _ in node.value} if node is not None else {}
    return SourceDoc(str(path), yaml.safe_load(text) or {}, lines)


def emitted_and_read_back(fmt: str, model: str, plan: TrainingPlan, read):
    """(memdoc's `fmt` emit of `plan`, `read(SourceDoc)` of the emitted config)."""
    ctx = EmitContext(model_id=model, plan=plan, peak_allocated=1 << 30, process_total=1 << 31)
    emitted = emit(fmt, ctx)
    return emitted, read(SourceDoc(ctx.config_path, emitted.config))
