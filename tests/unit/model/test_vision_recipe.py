"""docs/extending.md's recipe for a vision-language family, kept true: the files it names exist, it names every
field of the records, and every record a family module defines is in the registry (and the reverse), so that the
registry, the package and the recipe cannot drift apart."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import re

import pytest
from conftest import ROOT

from memdoc.core.model import vision
from memdoc.core.model.vision.records import Projector, Tower, VisionRules, Vlm
from memdoc.core.model.vision.registry import RULES, TOWERS, VLMS, image_family

TEXT = (ROOT / "docs" / "extending.md").read_text(encoding="utf-8")
RECIPE = TEXT[TEXT.index("## A vision-language model family") :].split("\n## ", 1)[0]
NAMED = set(re.findall(r"`([^`\s]+)`", RECIPE))
MODULES = {
    name: importlib.import_module(f"memdoc.core.model.vision.{name}")
    for _, name, _ in pkgutil.iter_modules(vision.__path__)
}


def test_the_recipe_is_found():
    assert "registry.py" in RECIPE and len(RECIPE.splitlines()) > 20


def test_every_file_the_recipe_names_exists():
    paths = {p for p in NAMED if re.fullmatch(r"(memdoc|tests)/[\w/.-]+\.(py|md)", p) and "<" not in p}
    assert len(paths) >= 8
    assert sorted(p for p in paths if not (ROOT / p).is_file()) == []


@pytest.mark.parametrize("record", [Tower, Vlm, Projector, VisionRules], ids=lambda r: r.__name__)
def test_the_recipe_names_every_field(record):
    assert sorted(f.name for f in dataclasses.fields(record) if f.name not in NAMED) == []


def _defined() -> dict[type, list]:
    """Every Tower, Vlm and VisionRules a module of the package holds at its top level."""
    out: dict[type, list] = {Tower: [], Vlm: [], VisionRules: []}
    for module in MODULES.values():
        for value in vars(module).values():
            if type(value) in out and all(value is not v for v in out[type(value)]):
                out[type(value)].append(value)
    return out


def test_every_record_of_a_family_module_is_in_the_registry_and_back():
    defined = _defined()
    registered = {Tower: list(TOWERS.values()), Vlm: list(VLMS.values()), VisionRules: list(RULES.values())}
    for record, values in defined.items():
        assert {id(v) for v in values} == {id(v) for v in registered[record]}, record.__name__


def test_registry_keys_are_the_records_names():
    assert all(kind == t.kind for kind, t in TOWERS.items())
    assert all(model_type == v.model_type for model_type, v in VLMS.items())
    assert all(VLMS[model_type].tower.startswith(tuple(TOWERS)) for model_type in VLMS)


def test_every_vlm_has_a_processor_rule():
    assert sorted(m for m in VLMS if image_family(m) not in RULES) == []


def test_every_processor_rule_is_checked_against_its_processor():
    """Each key of `RULES` (or a record it shares: Qwen2-VL's is Qwen2.5-VL's) is a case of the processor test."""
    cases = (ROOT / "tests" / "fidelity" / "test_image_tokens.py").read_text(encoding="utf-8")
    named = {key for key in RULES if f'"{key}"' in cases}
    assert sorted(k for k in RULES if not any(RULES[k] is RULES[n] for n in named)) == []


def test_the_package_docstring_names_every_module():
    doc = vision.__doc__ or ""
    assert sorted(name for name in MODULES if f"`{name}.py`" not in doc) == []
