"""The Axolotl and LLaMA-Factory fixtures that the config readers are tested on are configs the trainers
themselves accept: each goes through the trainer's own validator (the same calls as test_emit.py)."""

import json
import os

import pytest
import yaml
from conftest import FIXTURES

os.environ.setdefault("DISABLE_VERSION_CHECK", "1")  # LLaMA-Factory pins transformers<=5.6; its parser is what we test

CONFIGS = FIXTURES / "user_configs"
AXOLOTL = sorted((CONFIGS / "axolotl").glob("*.y*ml"))
LLAMAFACTORY = sorted((CONFIGS / "llamafactory").glob("*.yaml"))


@pytest.mark.parametrize("path", AXOLOTL, ids=lambda p: p.name)
def test_axolotl_fixture_passes_validate_config(path):
    config_mod = pytest.importorskip("axolotl.utils.config")
    from axolotl.utils.dict import DictDefault
    from axolotl.utils.schemas.config import AxolotlInputConfig

    cfg = yaml.safe_load(path.read_text())
    known = set(AxolotlInputConfig.model_fields)
    if cfg.get("plugins"):  # plugin keys (Liger) live in the plugin's own schema
        from axolotl.integrations.liger.args import LigerArgs

        config_mod.prepare_plugins(DictDefault(cfg))
        known |= set(LigerArgs.model_fields)
    assert not set(cfg) - known, f"Axolotl would drop {set(cfg) - known}"
    validated = config_mod.validate_config(DictDefault(cfg))
    assert validated.micro_batch_size == cfg["micro_batch_size"]
    assert validated.sequence_len == cfg["sequence_len"]


@pytest.mark.parametrize("path", LLAMAFACTORY, ids=lambda p: p.name)
def test_llamafactory_fixture_passes_get_train_args(path, tmp_path, monkeypatch):
    parser = pytest.importorskip("llamafactory.hparams.parser")
    from llamafactory.hparams import TrainingArguments as LFTrainingArguments
    from transformers.training_args import ParallelMode

    cfg = yaml.safe_load(path.read_text())
    cfg["use_cpu"] = True
    # Device checks, not config checks: no bf16 GPU here, and DeepSpeed needs a distributed launch.
    monkeypatch.setattr(parser, "is_torch_bf16_gpu_available", lambda: True)
    if cfg.get("deepspeed"):  # the file LLaMA-Factory would open from its run directory
        ds = tmp_path / cfg["deepspeed"]
        ds.parent.mkdir(parents=True)
        ds.write_text(json.dumps({"zero_optimization": {"stage": 3}, "bf16": {"enabled": "auto"}}))
        monkeypatch.chdir(tmp_path)
        monkeypatch.setattr(LFTrainingArguments, "parallel_mode", property(lambda self: ParallelMode.DISTRIBUTED))
    model_args, data_args, training_args, finetuning_args, _ = parser.get_train_args(cfg)
    assert data_args.cutoff_len == cfg["cutoff_len"]
    assert finetuning_args.finetuning_type == cfg["finetuning_type"]
    assert training_args.per_device_train_batch_size == cfg["per_device_train_batch_size"]
