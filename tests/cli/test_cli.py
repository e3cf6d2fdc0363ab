"""CLI contract: help everywhere, one-line errors with exit code 2, --json shapes."""

import json
import subprocess
import sys

import pytest
from conftest import invoke as run


@pytest.mark.parametrize("command", ["bill", "diagnose", "prescribe", "emit", "models", "gpus"])
def test_every_command_has_help_with_examples(command):
    result = run(command, "--help")
    assert result.exit_code == 0
    assert "Example" in result.output


@pytest.mark.parametrize(
    "args,message",
    [
        (["bill", "meta-llama/Llama-2-7x", "--gpu", "24"], "unknown model 'meta-llama/Llama-2-7x'"),
        (["bill", "/nonexistent/config.json", "--gpu", "24"], "does not exist"),
        (["bill", "meta-llama/Llama-2-7b", "--gpu", "24", "--batch", "0"], "--batch must be a positive integer"),
        (
            ["bill", "meta-llama/Llama-2-7b", "--gpu", "24", "--seq", "100000"],
            "exceeds meta-llama/Llama-2-7b-hf's context of 4096",
        ),
        (
            ["bill", "meta-llama/Llama-2-7b", "--gpu", "24", "--method", "lora", "--lora-rank", "4096"],
            "--lora-rank 4096 must be smaller",
        ),
        (["bill", "meta-llama/Llama-2-7b", "--gpu", "24", "--method", "qlora", "--precision", "fp32"], "QLoRA"),
        (["bill", "meta-llama/Llama-2-7b", "--gpu", "24", "--shard", "zero3"], "needs more than one GPU"),
        (["bill", "meta-llama/Llama-2-7b", "--gpu", "rtx-9999"], "rtx-9999"),
        (
            ["bill", "microsoft/Phi-3-mini-4k-instruct", "--gpu", "24", "--method", "lora", "--lora-targets", "q_proj"],
            "matches no linear module of microsoft/Phi-3-mini-4k-instruct",
        ),
        (["bill", "meta-llama/Llama-2-7b"], "pass --gpu"),
        (["bill", "--gpu", "24"], "no MODEL given"),
    ],
)
def test_bad_input_is_one_line_exit_2(args, message):
    result = run(*args)
    assert result.exit_code == 2, result.output
    lines = [l for l in result.output.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    assert message in lines[0]


def test_malformed_recipe(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("model: meta-llama/Llama-2-7b\nplan: {batch: two}\n")
    result = run("bill", "--recipe", str(recipe), "--gpu", "24")
    assert result.exit_code == 2 and "--batch must be an integer" in result.output


def test_recipe_flags_override(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("model: meta-llama/Llama-2-7b\ngpu: rtx-4090\nplan: {method: lora, micro_batch: 4}\n")
    data = json.loads(run("bill", "--recipe", str(recipe), "--batch", "2", "--json").output)
    assert data["plan"]["method"] == "lora" and data["plan"]["micro_batch"] == 2
    assert data["gpu"]["name"] == "NVIDIA GeForce RTX 4090" or "4090" in data["gpu"]["name"]


def test_bill_json_contract():
    data = json.loads(run("bill", "meta-llama/Llama-2-7b", "--gpu", "24", "--json").output)
    assert data["model"] == {
        "id": "meta-llama/Llama-2-7b-hf",
        "params": 6_738_415_616,
        "trainable_params": 6_738_415_616,
    }
    assert data["gpu"]["memory_bytes"] == 24 * 1024**3 and data["gpu"]["count"] == 1
    for key in (
        "weights",
        "gradients",
        "optimizer",
        "activations",
        "other",
        "peak_allocated",
        "peak_reserved",
        "process_total",
    ):
        assert isinstance(data["per_gpu"][key], int)
    assert data["fits"] is False and data["headroom_bytes"] < 0
    assert data["ladder"] and data["ladder"][-1]["fits"] is True


def test_check_exit_status():
    assert run("bill", "meta-llama/Llama-2-7b", "--gpu", "24", "--check").exit_code == 3
    assert run("bill", "Qwen/Qwen2.5-0.5B", "--gpu", "80", "--check").exit_code == 0


def test_models_and_gpus_json():
    models = json.loads(run("models", "--json").output)
    assert len(models) >= 35 and any(m["id"] == "mistralai/Mixtral-8x7B-v0.1" and m["experts"] == "2/8" for m in models)
    gpus = json.loads(run("gpus", "--json").output)
    assert any(g["id"] == "h100-sxm" for g in gpus)


@pytest.mark.slow
def test_python_dash_m_and_no_torch_on_the_bill_path():
    code = (
        "import sys, runpy; sys.argv=['memdoc','bill','meta-llama/Llama-2-7b','--gpu','24','--json'];"
        "\ntry:\n    runpy.run_module('memdoc', run_name='__main__')\nexcept SystemExit: pass\n"
        "assert 'torch' not in sys.modules, 'torch was imported'; assert 'transformers' not in sys.modules"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["per_gpu"]["peak_allocated"] > 0


def test_lora_defaults_follow_the_architecture():
    # Phi-3 fuses q/k/v into qkv_proj: peft's default target there, r=16 over 32 layers × (3072 + 9216).
    data = json.loads(
        run("bill", "microsoft/Phi-3-mini-4k-instruct", "--gpu", "24", "--method", "lora", "--json").output
    )
    assert data["plan"]["lora_targets"] == ["qkv_proj"]
    assert data["model"]["trainable_params"] == 32 * 16 * (3072 + 9216)


def test_offload_moves_states_to_the_host_column():
    data = json.loads(
        run(
            "bill",
            "meta-llama/Llama-3.1-8B",
            "--gpu",
            "24",
            "--precision",
            "amp-bf16",
            "--gpus",
            "4",
            "--shard",
            "zero3",
            "--offload",
            "optimizer",
            "--json",
        ).output
    )
    params = 8_030_261_248
    # DeepSpeed ZeRO-Offload keeps fp32 master + Adam states (12 B/param) and the gradients on the host, sharded over 4.
    assert data["host"]["optimizer"] == -(-12 * params // 4)
    assert data["per_gpu"]["optimizer"] == 0
    assert data["host_bytes_per_node"] == 4 * data["host_bytes"]


def test_inference_bill_json():
    data = json.loads(
        run("bill", "meta-llama/Llama-3.1-8B", "--gpu", "24", "--inference", "--seq", "8192", "--json").output
    )
    assert data["mode"] == "inference"
    assert data["per_gpu"]["weights"] == 2 * 8_030_261_248
    assert data["per_gpu"]["kv_cache"] == 1024**3  # 2 × 32 layers × 8 KV heads × 128 × 8192 × 2 B


def test_max_batch_from_the_cli():
    data = json.loads(
        run(
            "bill",
            "meta-llama/Llama-2-7b",
            "--gpu",
            "rtx-4090",
            "--method",
            "qlora",
            "--checkpointing",
            "full",
            "--max",
            "batch",
            "--json",
        ).output
    )
    assert data["max"]["knob"] == "batch" and data["max"]["value"] >= 2


@pytest.mark.slow
def test_unknown_architecture_is_billed_with_a_note(tmp_path):
    # OPT has no analytic layout: exact parameters from the meta device, activations from a generic layer.
    config = {
        "model_type": "opt",
        "hidden_size": 768,
        "ffn_dim": 3072,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "vocab_size": 50272,
        "max_position_embeddings": 2048,
        "word_embed_proj_dim": 768,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    result = run("bill", str(tmp_path), "--gpu", "24", "--method", "lora", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["model"]["trainable_params"] == 12 * 2 * 16 * (768 + 768)  # q_proj, v_proj adapters
    assert any("generic decoder layer" in note for note in data["notes"])
