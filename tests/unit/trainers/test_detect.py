"""Format detection by keys (never by the file extension), on the fixtures of every format."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import FIXTURES

from memdoc.core.trainers.detect import FORMATS, detect_format
from memdoc.core.trainers.reading import SourceDoc
from memdoc.errors import ConfigError
from memdoc.resolve.user_config import load_source

USER = FIXTURES / "user_configs"
EXPECTED = {"trl": "trainer-args", "hf": "trainer-args", "deepspeed": "deepspeed", "accelerate": "accelerate"}


@pytest.mark.parametrize("path", sorted(p for d in EXPECTED for p in (USER / d).iterdir()), ids=lambda p: p.name)
def test_fixtures_detected_by_their_folder(path: Path):
    expected = "deepspeed" if path.suffix == ".json" and path.parent.name == "trl" else EXPECTED[path.parent.name]
    assert detect_format(load_source(path)) == expected


def test_extension_never_decides(tmp_path):
    """A DeepSpeed config saved as .yaml and a TRL config saved as .json are still what their keys say."""
    ds = tmp_path / "ds.yaml"
    ds.write_text("zero_optimization:\n  stage: 3\n")
    trl = tmp_path / "sft.json"
    trl.write_text('{"model_name_or_path": "m", "use_peft": true}')
    assert detect_format(load_source(ds)) == "deepspeed"
    assert detect_format(load_source(trl)) == "trainer-args"


def test_axolotl_and_llamafactory_by_their_distinctive_keys():
    axolotl = SourceDoc("a.yaml", {"base_model": "m", "datasets": [{"path": "d", "type": "alpaca"}]})
    factory = SourceDoc("l.yaml", {"model_name_or_path": "m", "stage": "sft", "finetuning_type": "lora"})
    assert detect_format(axolotl) == "axolotl"
    assert detect_format(factory) == "llamafactory"
    assert list(FORMATS) == ["axolotl", "llamafactory", "deepspeed", "accelerate", "trainer-args"]


def test_unrecognised_document_is_one_line(tmp_path):
    path = tmp_path / "x.yaml"
    path.write_text("name: hello\nsteps: 3\n")
    with pytest.raises(ConfigError) as err:
        detect_format(load_source(path))
    message = str(err.value)
    assert str(path) in message and "not a config memdoc recognises" in message and "\n" not in message
