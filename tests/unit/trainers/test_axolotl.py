"""The Axolotl reader (`memdoc.core.trainers.axolotl.read`) against Axolotl's own examples, its own schema
defaults (axolotl's `validate_config`), and memdoc's emitter (the round trip over generated plans)."""

from __future__ import annotations

import os

import pytest
import yaml
from conftest import FIXTURES
from generated_plans import PLAN_VALUES, emitted_and_read_back, generated_plan, load_doc
from hypothesis import HealthCheck, given, settings

from memdoc.core.model.plan import TrainingPlan
from memdoc.core.model.stack import Stack
from memdoc.core.trainers.axolotl.read import read_axolotl
from memdoc.errors import ConfigError

AXOLOTL = FIXTURES / "user_configs" / "axolotl"
MODEL = "meta-llama/Llama-3.1-8B"


def read_text(text: str, name: str = "axolotl.yaml"):
    return read_axolotl(load_doc(name, text), Stack())


def not_billed(reading) -> set[str]:
    return {n.key for n in reading.not_billed}


# --------------------------------------------------------------------------------------------
# Configs in the shape of Axolotl's examples (tests/fixtures/user_configs/SOURCES.md)


def test_qlora_example():
    """fixtures axolotl/qlora.yml: adapter qlora + load_in_4bit, r 32, alpha 16, dropout 0.05, all linears,
    sequence_len 4096, micro_batch_size 2, accumulation 4, bf16 auto, checkpointing, flash attention,
    paged_adamw_32bit (not billed), sample packing (billed since issue 29: `--packing`)."""
    r = read_axolotl(load_doc(AXOLOTL / "qlora.yml"), Stack())
    assert r.model == "NousResearch/Meta-Llama-3-8B"
    assert r.plan == {
        "method": "qlora",
        "lora_rank": 32,
        "lora_alpha": 16,
        "lora_dropout": 0.05,
        "lora_targets": ["all-linear"],
        "precision": "amp-bf16",
        "micro_batch": 2,
        "grad_accum": 4,
        "seq_len": 4096,
        "checkpointing": "full",
        "attention": "sdpa",
        "loss": "hf",
        "optimizer": "adamw-fused",
        "packing": True,  # the fixture's `sample_packing: true` (issue 29 bills packing; it was a note before)
    }
    assert not_billed(r) == {"optimizer"}
    assert r.referenced == [] and r.formats == ["axolotl"]


def test_lora_8b_example():
    """fixtures axolotl/lora-8b.yml: LoRA over an 8-bit base (not billed), lora_modules_to_save (not billed),
    adamw_bnb_8bit."""
    r = read_axolotl(load_doc(AXOLOTL / "lora-8b.yml"), Stack())
    assert r.plan["method"] == "lora"
    assert (r.plan["lora_rank"], r.plan["lora_alpha"], r.plan["lora_targets"]) == (32, 16, ["all-linear"])
    assert r.plan["optimizer"] == "adamw-8bit"
    assert (r.plan["micro_batch"], r.plan["grad_accum"], r.plan["seq_len"]) == (2, 4, 4096)
    assert not_billed(r) == {"load_in_8bit", "lora_modules_to_save"}
    assert r.plan["packing"] is True  # `sample_packing: true`, billed since issue 29 (it was a note)


def test_fft_8b_example():
    """fixtures axolotl/fft-8b.yaml: full fine-tune, bf16 auto (weights bf16: pure bf16), paged_adamw_8bit,
    sequence_len 8192, micro_batch_size 1, accumulation 8."""
    r = read_axolotl(load_doc(AXOLOTL / "fft-8b.yaml"), Stack())
    assert r.model == "NousResearch/Meta-Llama-3.1-8B"
    assert r.plan["method"] == "full" and r.plan["precision"] == "bf16"
    assert r.plan["optimizer"] == "paged-adamw-8bit"
    assert (r.plan["micro_batch"], r.plan["grad_accum"], r.plan["seq_len"]) == (1, 8, 8192)
    assert r.plan["checkpointing"] == "full"


def test_fft_liger_fsdp_example():
    """fixtures axolotl/fft-8b-liger-fsdp.yaml: Liger plugin with every kernel (fused), FSDP full shard
    with fsdp_offload_params (the accelerate-style prefixed key)."""
    r = read_axolotl(load_doc(AXOLOTL / "fft-8b-liger-fsdp.yaml"), Stack())
    assert r.plan["loss"] == "fused"
    assert r.plan["shard"] == "fsdp" and r.plan["offload"] == "optimizer+params"
    assert r.plan["optimizer"] == "adamw-fused"
    plan = TrainingPlan.from_dict({**r.plan, "gpus_per_node": 8})  # the launch gives the GPUs
    assert plan.micro_batch == 2 and plan.seq_len == 4096


@pytest.mark.parametrize("name", sorted(p.name for p in AXOLOTL.iterdir()))
def test_every_example_gives_a_valid_plan(name):
    r = read_axolotl(load_doc(AXOLOTL / name), Stack())
    TrainingPlan.from_dict({**r.plan, "gpus_per_node": 8})
    for k in r.read:
        assert k.file == str(AXOLOTL / name) and k.key in load_doc(AXOLOTL / name).data


# --------------------------------------------------------------------------------------------
# defaults: Axolotl's schema, through Axolotl's own validator


def test_absent_keys_take_axolotls_schema_defaults():
    config_mod = pytest.importorskip("axolotl.utils.config")
    from axolotl.utils.dict import DictDefault

    minimal = {"base_model": MODEL, "learning_rate": 1e-5, "datasets": [{"path": "x", "type": "alpaca"}]}
    cfg = config_mod.validate_config(DictDefault(dict(minimal)))
    r = read_text(yaml.safe_dump(minimal))
    assert r.plan["micro_batch"] == cfg.micro_batch_size
    assert r.plan["grad_accum"] == cfg.gradient_accumulation_steps
    assert r.plan["seq_len"] == cfg.sequence_len
    assert r.plan["optimizer"] == "adamw-fused" and cfg.optimizer == "adamw_torch_fused"
    assert r.plan["checkpointing"] == ("full" if cfg.gradient_checkpointing else "none")
    lora = {**minimal, "adapter": "lora", "lora_r": 8, "lora_alpha": 16, "lora_target_linear": True}
    cfg = config_mod.validate_config(DictDefault(dict(lora)))
    assert read_text(yaml.safe_dump(lora)).plan["lora_dropout"] == cfg.lora_dropout


# --------------------------------------------------------------------------------------------
# mappings


@pytest.mark.parametrize(
    "text,field,value",
    [
        ("adapter: lora\nload_in_4bit: true\n", "method", "qlora"),
        ("adapter: lora\nlora_target_modules: [q_proj, k_proj]\n", "lora_targets", ["q_proj", "k_proj"]),
        ("adapter: lora\nlora_target_modules: q_proj\n", "lora_targets", ["q_proj"]),
        ("adapter: lora\nlora_target_modules: [q_proj]\nlora_target_linear: true\n", "lora_targets", ["all-linear"]),
        ("bf16: false\n", "precision", "fp32"),
        ("fp16: true\n", "precision", "fp16"),
        ("bf16: false\nbfloat16: true\n", "precision", "bf16"),
        ("adapter: lora\nfp16: true\n", "precision", "amp-fp16"),
        ("adapter: lora\nbf16: false\nbfloat16: true\n", "precision", "bf16"),
        ("optimizer: adamw_torch\n", "optimizer", "adamw-foreach"),
        ("optimizer: adafactor\n", "optimizer", "adafactor"),
        ("optimizer: lion_32bit\n", "optimizer", "lion"),
        ("attn_implementation: eager\n", "attention", "eager"),
        ("eager_attention: true\n", "attention", "eager"),
        ("sdp_attention: true\n", "attention", "sdpa"),
        ("attn_implementation: flash_attention_3\n", "attention", "sdpa"),
        ("gradient_checkpointing: offload\n", "checkpointing", "full"),
        (
            "plugins: [axolotl.integrations.liger.LigerPlugin]\nliger_fused_linear_cross_entropy: true\n",
            "loss",
            "fused-ce",
        ),
        ("fsdp_version: 2\nfsdp_config: {reshard_after_forward: false}\n", "shard", "zero2"),
        ("micro_batch_size: 4\nbatch_size: 32\n", "grad_accum", 8),
    ],
)
def test_mapping(text, field, value):
    assert read_text(text).plan[field] == value


def test_deepspeed_path_is_resolved_next_to_the_yaml():
    r = read_axolotl(load_doc("configs/run/axolotl.yaml", "deepspeed: ../ds/zero3.json\n"), Stack())
    assert r.referenced == [os.path.normpath("configs/ds/zero3.json")]
    assert read_axolotl(load_doc("a.yaml", "deepspeed: /abs/z.json\n"), Stack()).referenced == ["/abs/z.json"]


@pytest.mark.parametrize(
    "text,key",
    [
        ("optimizer: ademamix\n", "optimizer"),
        ("optimizer: sgd\n", "optimizer"),  # no momentum in optim_args: no state, billed with one
        ("plugins: [axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin]\n", "plugins"),
        ("liger_fused_linear_cross_entropy: true\n", "plugins"),  # without the plugin it does nothing
        ("adapter: lora\npeft_use_dora: true\n", "peft_use_dora"),
        ("activation_offloading: true\n", "activation_offloading"),
        ("attn_implementation: fp8\n", "attn_implementation"),
        ("adapter: llama-adapter\n", "adapter"),
    ],
)
def test_memory_keys_memdoc_does_not_bill_are_listed(text, key):
    assert key in not_billed(read_text(text))


@pytest.mark.parametrize(
    ("text", "plan"),
    [  # issue 29 bills these (they were listed as not billed): ring-flash-attn CP and DeepSpeed AutoTP
        ("sequence_parallel_degree: 2\n", {"cp": 2, "cp_impl": "ring"}),
        ("context_parallel_size: 4\ntensor_parallel_size: 2\n", {"cp": 4, "cp_impl": "ring", "tp": 2}),
        ("context_parallel_size: 1\n", {}),
    ],
)
def test_context_and_tensor_parallel_keys_set_the_degrees(text, plan):
    reading = read_text(text)
    assert {k: reading.plan[k] for k in ("cp", "cp_impl", "tp") if k in reading.plan} == plan


# --------------------------------------------------------------------------------------------
# errors: one line, file:line: key: message


@pytest.mark.parametrize(
    "text,expected",
    [
        (
            "base_model: m\nmicro_batch_size: two\n",
            "axolotl.yaml:2: micro_batch_size: must be a positive integer, got 'two'",
        ),
        ("sequence_len: 0\n", "axolotl.yaml:1: sequence_len: must be a positive integer, got 0"),
        (
            "gradient_checkpointing: maybe\n",
            "axolotl.yaml:1: gradient_checkpointing: must be true or false, got 'maybe'",
        ),
        (
            "adapter: lora\nlora_target_modules: 7\n",
            "axolotl.yaml:2: lora_target_modules: must be a list of module names, got 7",
        ),
        ("bf16: true\nfp16: true\n", "axolotl.yaml:2: fp16: bf16 and fp16 are both true; choose one"),
        (
            "load_in_4bit: true\nload_in_8bit: true\n",
            "axolotl.yaml:1: load_in_4bit: load_in_4bit and load_in_8bit are both true; choose one",
        ),
        (
            "adapter: qlora\nload_in_4bit: false\n",
            "axolotl.yaml:2: load_in_4bit: adapter: qlora needs load_in_4bit: true (Axolotl's "
            "QLoRA loads a 4-bit base)",
        ),
        (
            "attn_implementation: sdpa\nflash_attention: true\n",
            "axolotl.yaml:2: flash_attention: attn_implementation and flash_attention both choose "
            "the attention; keep one",
        ),
        (
            "deepspeed: ds.json\nfsdp_version: 2\n",
            "axolotl.yaml:2: fsdp_version: deepspeed and fsdp_version both shard the model; keep one",
        ),
    ],
)
def test_errors_are_one_line_with_file_line_and_key(text, expected):
    with pytest.raises(ConfigError) as err:
        read_text(text)
    assert str(err.value) == expected and "\n" not in str(err.value)


# --------------------------------------------------------------------------------------------
# round trip: memdoc's emitter, read back


def axolotl_runs(plan: TrainingPlan) -> str:
    """The precision Axolotl runs for the emitted config (the emitter's notes say so): bf16/fp16 load the
    weights in that dtype, so a full fine-tune has no fp32 master copy (amp-* comes back pure), and over a
    frozen LoRA base `bf16: true` is autocast (bf16/fp16 come back amp-*)."""
    p = plan.precision.value
    if plan.is_peft:
        return {"bf16": "amp-bf16", "fp16": "amp-fp16"}.get(p, p)
    return {"amp-bf16": "bf16", "amp-fp16": "fp16"}.get(p, p)


def expected_back(plan: TrainingPlan) -> dict:
    """Every plan field an Axolotl YAML expresses, as the reader must give it back. Not expressible (so
    not compared): checkpoint_every and kbit_upcast (notes only), gpus_per_node and nodes (the launch),
    offload_to (FSDP offloads to CPU only), allocator (an environment variable), allow_long (memdoc's own
    check), and a ZeRO stage, offload and their precision (in the DeepSpeed JSON: `referenced`)."""
    d = plan.to_dict()
    out = {k: d[k] for k in ("method", "optimizer", "micro_batch", "seq_len", "grad_accum", "attention", "loss")}
    out["precision"] = axolotl_runs(plan)
    out["checkpointing"] = "none" if plan.checkpointing.value == "none" else "full"  # selective: no key
    if plan.is_peft:
        out.update({k: d[k] for k in ("lora_rank", "lora_alpha", "lora_dropout", "lora_targets")})
    if plan.shard.value == "fsdp":
        out["shard"] = "fsdp"
        if plan.offload.value != "none":  # FSDP offloads weights, gradients and states together
            out["offload"] = "optimizer+params"
        if plan.method.value == "qlora":  # FSDP2 + 4-bit loads on every rank (Axolotl refuses rank-0-only)
            out["low_mem_load"] = False
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(values=PLAN_VALUES)
def test_round_trip_through_the_emitter(values):
    plan = generated_plan(values)
    emitted, reading = emitted_and_read_back("axolotl", MODEL, plan, lambda doc: read_axolotl(doc, Stack()))
    assert reading.model == MODEL
    assert reading.plan == expected_back(plan)
    assert reading.not_billed == []
    if emitted.side_files:
        assert reading.referenced == [emitted.side_files[0].name]


def test_activation_offloading_hidden_states_reads_back_as_emitted():
    """emit writes --activation-offload as `activation_offloading: hidden_states` with non-reentrant checkpointing,
    which Axolotl 0.19 hands to transformers' offload switch (`core/builders/base.py`
    `_configure_gradient_checkpointing`: only with `use_reentrant: false`); the reader bills it as such (it used to
    list it as not billed: reader and writer disagreed)."""
    import importlib.util
    from pathlib import Path

    package = Path(importlib.util.find_spec("axolotl").submodule_search_locations[0])
    source = (package / "core" / "builders" / "base.py").read_text(encoding="utf-8")  # importing it needs triton
    assert 'activation_offloading == "hidden_states"' in source and 'gc_kwargs["use_reentrant"] is False' in source
    from memdoc.core.billing.bill import compute_bill
    from memdoc.core.model.plan import parse_plan
    from memdoc.core.model.stack import latest_known_stack
    from memdoc.core.trainers.base import EmitContext
    from memdoc.core.trainers.emit import emit
    from memdoc.core.trainers.reading import SourceDoc
    from memdoc.resolve.models import resolve_model

    model = resolve_model("meta-llama/Llama-3.1-8B")
    plan = parse_plan(method="lora", checkpointing="full", activation_offload=True)
    bill = compute_bill(model, plan, None)
    ctx = EmitContext(model.id, plan, bill.peak_allocated, bill.process_total)
    config = emit("axolotl", ctx).config
    reading = read_axolotl(SourceDoc("axolotl.yaml", config), latest_known_stack())
    assert reading.plan["activation_offload"] is True and reading.plan["checkpointing"] == "full"
    assert "activation_offloading" not in {n.key for n in reading.not_billed}
