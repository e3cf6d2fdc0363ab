"""Model resolution order and errors."""

import json

import pytest

from memdoc.errors import ConfigError, UnknownModelError
from memdoc.resolve.models import load_config, resolve_model, suggest


def test_meta_original_repo_resolves_to_hf_config():
    spec = resolve_model("meta-llama/Llama-2-7b")
    assert spec.id == "meta-llama/Llama-2-7b-hf"
    assert spec.params.total == 6_738_415_616


def test_ids_are_case_insensitive():
    assert resolve_model("QWEN/qwen2.5-7b").id == "Qwen/Qwen2.5-7B"


def test_unknown_model_suggests_close_names():
    with pytest.raises(UnknownModelError) as err:
        resolve_model("meta-llama/Llama-2-7x-hf")
    assert "Llama-2-7b-hf" in str(err.value)
    assert suggest("meta-llama/Llama-3.1-8b-typo")[0] == "meta-llama/Llama-3.1-8B"
    assert suggest("llama-3.1-8b")[0] == "meta-llama/Llama-3.1-8B"  # the org may be left out


def test_local_config_file_and_directory(tmp_path):
    config = {
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 100,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert resolve_model(str(path)).source == "local"
    spec = resolve_model(str(tmp_path))
    # embed 100*64 + 2 layers * (q 64*64 + k,v 2*64*32 + o 64*64 + mlp 3*64*128 + 2 norms*64) + norm 64 + head 100*64
    assert spec.params.total == 6400 + 2 * (4096 + 4096 + 4096 + 24576 + 128) + 64 + 6400


def test_local_hf_cache_wins_over_catalog(tmp_path, monkeypatch):
    snap = tmp_path / "models--meta-llama--Llama-2-7b-hf" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    config = json.loads(json.dumps(load_config("meta-llama/Llama-2-7b-hf")[1]))
    config["num_hidden_layers"] = 2
    (snap / "config.json").write_text(json.dumps(config))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    spec = resolve_model("meta-llama/Llama-2-7b-hf")
    assert spec.source == "cache" and spec.num_layers == 2


@pytest.mark.parametrize(
    "content,message",
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "not a JSON object"),
        ('{"hidden_size": 8}', "no model_type"),
        ('{"model_type": "llama", "vocab_size": 10}', "no hidden_size"),
    ],
)
def test_malformed_configs(tmp_path, content, message):
    path = tmp_path / "config.json"
    path.write_text(content)
    with pytest.raises(ConfigError, match=message):
        resolve_model(str(path))


def test_unknown_architecture_counts_on_meta_device(tmp_path):
    # OPT has no analytic layout in memdoc: counted exactly by transformers on the meta device.
    config = {
        "model_type": "opt",
        "hidden_size": 64,
        "ffn_dim": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "vocab_size": 100,
        "max_position_embeddings": 128,
        "word_embed_proj_dim": 64,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    spec = resolve_model(str(path))
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config))
    assert spec.params.total == sum(p.numel() for p in model.parameters())
