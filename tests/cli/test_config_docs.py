"""docs/configs.md's key tables: current (the generator in check mode), one per format the readers know,
covering the readers' own tables of unbilled keys, and naming only keys the trainers themselves define
(checked against the installed trainers' schemas)."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import sys

import pytest
from conftest import ROOT

from memdoc.core.trainers.axolotl import read as axolotl
from memdoc.core.trainers.deepspeed import read as deepspeed
from memdoc.core.trainers.detect import FORMATS
from memdoc.core.trainers.llamafactory import read as llamafactory


def _generator():
    spec = importlib.util.spec_from_file_location("config_keys_table", ROOT / "scripts" / "config_keys_table.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up by name
    spec.loader.exec_module(module)
    return module


GEN = _generator()


@pytest.fixture(scope="module")
def keys():
    return GEN.collect()


def test_key_tables_are_current(keys, capsys):
    tables = GEN.render(keys)
    with capsys.disabled():  # the issue: a test prints, per format, which keys are read
        for fmt, found in keys.items():
            print(f"\n{fmt}: reads {', '.join(found.read)}")
    assert GEN.main(["--check"]) == 0, "docs/configs.md is stale: run `make docs`"
    assert tables in (ROOT / "docs" / "configs.md").read_text(encoding="utf-8")


def test_every_format_has_its_tables(keys):
    page = (ROOT / "docs" / "configs.md").read_text(encoding="utf-8")
    assert list(keys) == list(FORMATS)
    for fmt, found in keys.items():
        assert f"\n### {fmt}\n" in page
        assert found.read, f"{fmt}: no key read"


def test_the_readers_own_unbilled_keys_are_listed(keys):
    assert set(axolotl.NOT_BILLED) <= set(keys["axolotl"].not_billed)
    assert set(llamafactory.NOT_BILLED) <= set(keys["llamafactory"].not_billed)
    assert {f"zero_optimization.{k}" for k in deepspeed.BUCKETS} <= set(keys["deepspeed"].not_billed)


def _names(*classes) -> set[str]:
    """Field names (and pydantic aliases) of dataclasses and pydantic models."""
    names = set()
    for cls in classes:
        if dataclasses.is_dataclass(cls):
            names |= {f.name for f in dataclasses.fields(cls)}
        else:
            names |= set(cls.model_fields) | {f.alias for f in cls.model_fields.values() if f.alias}
    return names


def _trainer_args_names() -> set[str]:
    """TRL's SFTConfig (a TrainingArguments), ModelConfig and ScriptArguments: what `trl sft --config` parses; and the
    post-training configs `trl dpo|kto|reward|grpo|rloo --config` parse."""
    trl = pytest.importorskip("trl")
    post = (trl.DPOConfig, trl.KTOConfig, trl.RewardConfig, trl.GRPOConfig, trl.RLOOConfig)
    return _names(trl.SFTConfig, trl.ModelConfig, trl.ScriptArguments, *post)


def _axolotl_names() -> set[str]:
    """Axolotl's input schema plus the Liger plugin's (axolotl/integrations/liger/args.py)."""
    pytest.importorskip("axolotl")
    from axolotl.integrations.liger.args import LigerArgs
    from axolotl.utils.schemas.config import AxolotlInputConfig

    return _names(AxolotlInputConfig, LigerArgs)


def _llamafactory_names(monkeypatch) -> set[str]:
    """LLaMA-Factory's argument dataclasses (llamafactory/hparams/), as `get_train_args` parses them."""
    monkeypatch.setenv("DISABLE_VERSION_CHECK", "1")  # llamafactory pins transformers ≤ 5.6 at import
    pytest.importorskip("llamafactory")
    from llamafactory import hparams

    return _names(
        hparams.ModelArguments,
        hparams.DataArguments,
        hparams.FinetuningArguments,
        hparams.TrainingArguments,
        hparams.GeneratingArguments,  # `stage: ppo`'s max_new_tokens
    )


def _deepspeed_names() -> set[str]:
    """Top-level keys (the string constants of deepspeed/runtime/constants.py, zero/config.py,
    activation_checkpointing/config.py) and `zero_optimization`'s fields (DeepSpeedZeroConfig)."""
    pytest.importorskip("deepspeed")
    from deepspeed.runtime import constants
    from deepspeed.runtime.activation_checkpointing import config as ac_config
    from deepspeed.runtime.zero import config as zero_config
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    modules = (constants, zero_config, ac_config)
    top = {v for m in modules for k, v in vars(m).items() if k.isupper() and isinstance(v, str)}
    return top | {f"zero_optimization.{n}" for n in _names(DeepSpeedZeroConfig)}


def _accelerate_names() -> set[str]:
    """ClusterConfig's fields; nested plugin keys are `accelerate launch` options, which a config file's
    `fsdp_config` / `deepspeed_config` entries fill by name (accelerate/commands/launch.py)."""
    pytest.importorskip("accelerate")
    from accelerate.commands.config.config_args import ClusterConfig
    from accelerate.commands.launch import launch_command_parser

    options = {a.dest for a in launch_command_parser()._actions}
    nested = {f"{block}.{o}" for block in ("fsdp_config", "deepspeed_config") for o in options}
    return _names(ClusterConfig) | nested


LEGACY = {"trainer-args": {"max_seq_length", "torch_dtype", "max_prompt_length", "reward_model_name_or_path"}}
"""Older spellings the reader accepts (TRL < 0.20's `max_seq_length`, transformers 4.x's `torch_dtype`, the prompt
length of TRL's DPO/GRPO configs before 1.x, `max_prompt_length`, and the reward model of its PPO/RLOO configs,
`reward_model_name_or_path`); a key listed as "KEY (absent)" is a note that the file lacks KEY."""


@pytest.mark.slow
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_every_listed_key_is_one_the_trainer_defines(fmt, keys, monkeypatch):
    schema = {
        "trainer-args": _trainer_args_names,
        "axolotl": _axolotl_names,
        "llamafactory": lambda: _llamafactory_names(monkeypatch),
        "deepspeed": _deepspeed_names,
        "accelerate": _accelerate_names,
    }[fmt]()
    blocks = {name.split(".")[0] for name in schema if "." in name}  # blocks whose own keys are checked too
    listed = set(keys[fmt].read) | set(keys[fmt].not_billed)
    unknown = []
    for key in sorted(listed):
        key = key.removesuffix(" (absent)")
        parts = key.split(".")
        name = ".".join(parts[:2]) if parts[0] in blocks else parts[0]
        if name not in schema and key not in schema and name not in LEGACY.get(fmt, set()):
            unknown.append(key)
    assert not unknown, f"{fmt}: keys the trainer does not define: {unknown}"


def test_readme_links_the_config_page():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "memdoc bill --config" in readme and "(docs/configs.md)" in readme
    assert re.search(r"40\.41 GiB.*102\.74 GiB", readme, flags=re.S)
