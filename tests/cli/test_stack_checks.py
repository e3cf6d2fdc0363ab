"""A stack too old for the plan is an error naming the libraries and the keys that asked for the plan.

Versions from peft's guide "Use PEFT QLoRA and DeepSpeed with ZeRO3" (docs/source/accelerate/deepspeed.md):
bitsandbytes>=0.43.3, accelerate>=1.0.1, transformers>4.44.2, trl>0.11.4, peft>0.13.0."""

from __future__ import annotations

import json

from conftest import invoke

QLORA_ZERO3 = ["meta-llama/Llama-3.1-8B", "--method", "qlora", "--shard", "zero3", "--gpus", "2", "--gpu", "24"]


def test_zero3_qlora_on_an_old_bitsandbytes_is_refused():
    result = invoke("bill", *QLORA_ZERO3, "--stack", "bitsandbytes==0.43.1")
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error:") and "bitsandbytes 0.43.1 < 0.43.3" in lines[0]


def test_zero3_qlora_on_the_first_supported_releases_is_billed():
    stack = "bitsandbytes==0.43.3,accelerate==1.0.1,transformers==4.45.0,trl==0.12.0,peft==0.13.1"
    result = invoke("bill", *QLORA_ZERO3, "--stack", stack, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["plan"]["shard"] == "zero3"


def test_the_error_names_the_config_keys(tmp_path):
    (tmp_path / "zero3.json").write_text(json.dumps({"zero_optimization": {"stage": 3}}))
    (tmp_path / "sft.yaml").write_text(
        "model_name_or_path: meta-llama/Llama-3.1-8B\nuse_peft: true\nload_in_4bit: true\n"
        "bf16: true\ndtype: bfloat16\ndeepspeed: zero3.json\n"
    )
    result = invoke("bill", "--config", tmp_path / "sft.yaml", "--gpus", "2", "--gpu", "24", "--stack", "peft==0.12.0")
    assert result.exit_code == 2
    assert "load_in_4bit" in result.output and "zero_optimization" in result.output
    assert "peft 0.12.0 < 0.13.1" in result.output
