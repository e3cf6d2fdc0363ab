"""QLoRA's fp32 upcast (`--kbit-upcast`, peft's prepare_model_for_kbit_training) against independent
expectations: parameter counts from the published configs and the meta device, peft's own cast,
and fake-tensor traces of the upcast model."""

import sys

import pytest
from conftest import ROOT, bill_plan

from memdoc.core.billing.kbit import non_quantised_params
from memdoc.core.model.plan import parse_plan
from memdoc.core.trainers.emit import EmitContext, emit
from memdoc.resolve.models import catalog_config, resolve_model

sys.path.insert(0, str(ROOT / "benchmarks"))
GiB = 1024**3


bill = bill_plan


# ------------------------------------------------------------------- which parameters are upcast
def test_llama_3_1_8b_upcast_adds_the_fp32_copies_of_embeddings_head_and_norms():
    # config.json: vocab 128256, hidden 4096, 32 layers, tie_word_embeddings false; no biases.
    embed = head = 128256 * 4096
    norms = 2 * 32 * 4096 + 4096  # input + post-attention norm per layer, final norm
    extra = (embed + head + norms) * 2  # bf16 -> fp32: 2 more bytes each
    assert extra / GiB == pytest.approx(1.957, abs=1e-3)  # the "about 2 GiB on an 8B model"
    plain = bill("meta-llama/Llama-3.1-8B", method="qlora")
    upcast = bill("meta-llama/Llama-3.1-8B", method="qlora", kbit_upcast=True)
    assert upcast.states.weights - plain.states.weights == extra
    assert upcast.states.gradients == plain.states.gradients and upcast.states.optimizer == plain.states.optimizer


def test_qwen2_5_biases_and_tied_embedding_stay_16_bit():
    # Qwen2.5-0.5B: vocab 151936 × 896 tied; q/k/v biases (896 + 2 × 64 + 2 × 64) per layer, 24 layers.
    spec = resolve_model("Qwen/Qwen2.5-0.5B")
    assert non_quantised_params(spec) == 151936 * 896 + (2 * 24 + 1) * 896 + 24 * (896 + 128 + 128)


def _meta_non_linear_params(config: dict) -> int:
    """Parameters transformers' `replace_with_bnb_linear` leaves alone: all but the weights of the
    decoder's `nn.Linear` modules (lm_head is skipped; biases stay plain parameters)."""
    torch = pytest.importorskip("torch")
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config))
    quantised = {
        id(m.weight) for name, m in model.named_modules() if isinstance(m, torch.nn.Linear) and name != "lm_head"
    }
    return sum(p.numel() for p in model.parameters() if id(p) not in quantised)


@pytest.mark.parametrize(
    "model_id", ["meta-llama/Llama-3.1-8B", "Qwen/Qwen2.5-0.5B", "google/gemma-2b", "mistralai/Mixtral-8x7B-v0.1"]
)
def test_non_quantised_count_equals_the_meta_device(model_id):
    pytest.importorskip("transformers")
    assert non_quantised_params(resolve_model(model_id)) == _meta_non_linear_params(catalog_config(model_id))


def test_tracer_cast_is_peft_prepare_model_for_kbit_training():
    """The tracer's cast, parameter by parameter, against peft's own function on the same 4-bit model."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("peft")
    from peft import prepare_model_for_kbit_training
    from transformers import AutoConfig, AutoModelForCausalLM

    from memdoc.probe.emulation import quantize_linears_nf4, upcast_non_quantised

    config = dict(
        catalog_config("Qwen/Qwen2.5-0.5B"),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=256,
    )

    def four_bit():
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config), dtype=torch.bfloat16)
        quantize_linears_nf4(model, torch.bfloat16)
        return model

    ours, peft = four_bit(), four_bit()
    upcast_non_quantised(ours)
    prepare_model_for_kbit_training(peft, use_gradient_checkpointing=False)
    dtypes = {n: p.dtype for n, p in ours.named_parameters()}
    assert dtypes == {n: p.dtype for n, p in peft.named_parameters()}
    assert dtypes["model.embed_tokens.weight"] == torch.float32
    assert dtypes["model.layers.0.self_attn.q_proj.bias"] == torch.float32  # a 4-bit linear's bias is a plain parameter
    assert dtypes["model.layers.0.self_attn.q_proj.weight"] == torch.uint8  # packed NF4: never cast


# ------------------------------------------------------------------- the bill against fake-tensor traces
@pytest.mark.slow
@pytest.mark.parametrize(
    "model,flags",
    [
        ("meta-llama/Llama-3.2-1B", {"seq": 1024}),  # no autocast: fp32 between the 4-bit matmuls, fp32 logits
        (
            "meta-llama/Llama-3.2-1B",
            {"seq": 1024, "precision": "amp-bf16"},
        ),  # autocast: fp32 MLP + the head's 16-bit copy
        ("meta-llama/Llama-3.1-8B", {"seq": 1024}),
        ("meta-llama/Llama-3.2-1B", {"seq": 1024, "batch": 2, "checkpointing": "full", "precision": "amp-bf16"}),
        ("Qwen/Qwen2.5-0.5B", {"seq": 1024, "lora_targets": "all-linear", "precision": "amp-bf16"}),
        ("Qwen/Qwen2.5-0.5B", {"seq": 1024, "checkpointing": "selective"}),
    ],
)
def test_upcast_bill_matches_the_trace(model, flags):
    """The tracer builds the 4-bit model, applies peft's cast, and runs the step on fake tensors."""
    from accuracy import traced_vs_billed

    row = traced_vs_billed(model, dict(flags, method="qlora", kbit_upcast=True))
    assert abs(row["error"]) <= 0.01, row
    assert row["billed_phase"] == row["traced_phase"], row


@pytest.mark.slow
@pytest.mark.parametrize(
    "flags",
    [
        {},
        {"lora_targets": "all-linear"},
        {"lora_dropout": 0.1},
        {"lora_targets": "all-linear", "kbit_upcast": True},
    ],
)
def test_qlora_under_autocast_saves_each_adapter_input_once(flags):
    """peft's 4-bit LoRA layer skips its fp32 cast under autocast (`lora.bnb.Linear4bit.forward`):
    the adapters reading one 16-bit tensor save it once, not one copy each as `lora.Linear` does."""
    from accuracy import traced_vs_billed

    row = traced_vs_billed("meta-llama/Llama-3.2-1B", dict(flags, method="qlora", precision="amp-bf16", seq=1024))
    assert abs(row["error"]) <= 0.01, row


def test_qlora_lora_layers_run_peft_bnb_forward():
    torch = pytest.importorskip("torch")
    pytest.importorskip("peft")
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    from memdoc.probe.emulation import bnb4_lora_forward, quantize_linears_nf4

    config = dict(
        catalog_config("meta-llama/Llama-3.2-1B"),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=256,
        head_dim=16,
    )
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config), dtype=torch.bfloat16)
    model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    quantize_linears_nf4(model, torch.bfloat16)
    q = model.base_model.model.model.layers[0].self_attn.q_proj
    assert q.forward.__func__ is bnb4_lora_forward
    saved = []
    x = torch.randn(1, 8, 64, dtype=torch.bfloat16, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            q(x)
    assert any(t.untyped_storage().data_ptr() == x.untyped_storage().data_ptr() for t in saved)  # x itself, no copy
    assert not any(t.dtype == torch.float32 and t.shape == x.shape for t in saved)


@pytest.mark.slow
def test_upcast_weights_in_the_trace_are_the_fp32_copies():
    pytest.importorskip("torch")
    from memdoc.probe.tracer import trace_training_step

    config = catalog_config("meta-llama/Llama-3.2-1B")
    plain, upcast = (
        trace_training_step(config, parse_plan(method="qlora", seq_len=256, kbit_upcast=up)) for up in (False, True)
    )
    # tied 128256 × 2048 embedding (counted once) + 16 × 2 + 1 norms of 2048, 2 more bytes each
    extra = (128256 * 2048 + 33 * 2048) * 2
    assert upcast.phases["optimizer"]["weights"] - plain.phases["optimizer"]["weights"] == pytest.approx(
        extra, rel=1e-4
    )


# ------------------------------------------------------------------- plan, CLI and emit
def test_default_is_no_upcast_and_the_flag_needs_qlora():
    from typer.testing import CliRunner

    from memdoc.cli import app

    assert parse_plan(method="qlora").kbit_upcast is False
    result = CliRunner().invoke(app, ["bill", "meta-llama/Llama-3.1-8B", "--gpu", "80", "--kbit-upcast"])
    assert result.exit_code == 2 and "--method qlora" in result.output
    ok = CliRunner().invoke(
        app, ["bill", "meta-llama/Llama-3.1-8B", "--gpu", "80", "--method", "qlora", "--kbit-upcast", "--json"]
    )
    assert ok.exit_code == 0, ok.output
    assert '"kbit_upcast": true' in ok.output
    assert parse_plan(kbit_upcast="true").kbit_upcast is True  # as a recipe or the command line writes it


@pytest.mark.parametrize("upcast", [False, True])
def test_emit_says_per_format_whether_the_upcast_runs(upcast):
    ctx = EmitContext(
        model_id="meta-llama/Llama-3.1-8B",
        plan=parse_plan(method="qlora", kbit_upcast=upcast),
        peak_allocated=1,
        process_total=1,
    )
    hf = " ".join(emit("hf", ctx).notes)
    assert ("after prepare_model_for_kbit_training" in hf) is upcast
    assert ("without peft's prepare_model_for_kbit_training" in hf) is not upcast
    for fmt in ("trl", "axolotl", "llamafactory"):
        mismatch = [n for n in emit(fmt, ctx).notes if n.startswith("--kbit-upcast")]
        assert bool(mismatch) is upcast, fmt
        if upcast:
            assert "--no-kbit-upcast" in mismatch[0]
    lora = EmitContext(
        model_id="meta-llama/Llama-3.1-8B", plan=parse_plan(method="lora"), peak_allocated=1, process_total=1
    )
    assert not any("kbit" in n for fmt in ("hf", "trl", "axolotl", "llamafactory") for n in emit(fmt, lora).notes)


def test_diagnose_detects_an_upcast_4_bit_model():
    """A script's model after prepare_model_for_kbit_training has an fp32 embedding next to 4-bit weights."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("peft")
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    from memdoc.probe.script.detect import detect_plan

    class Params4bit(torch.nn.Parameter):  # bitsandbytes' class, recognised by name
        pass

    config = dict(
        catalog_config("meta-llama/Llama-3.2-1B"),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=256,
        head_dim=16,
    )
    for upcast in (False, True):
        hf = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config), dtype=torch.bfloat16)
        mlp = hf.model.layers[0].mlp.down_proj
        mlp.weight = Params4bit(torch.zeros(64, 1, dtype=torch.uint8), requires_grad=False)
        if upcast:
            hf.model.embed_tokens.weight.data = hf.model.embed_tokens.weight.data.float()
        peft_model = get_peft_model(hf, LoraConfig(r=4, target_modules=["q_proj"]))
        plan, detected = detect_plan(
            hf, peft_model, autocast="bf16", checkpointing=False, optimizer=None, input_shape=(1, 8), cuda=False
        )
        assert plan.method.value == "qlora" and plan.kbit_upcast is upcast and detected["kbit_upcast"] is upcast
