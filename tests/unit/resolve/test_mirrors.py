"""Mirrors of catalog models (`memdoc.resolve.models.mirror_of`): an unknown `org/name` whose repository name is
exactly one catalog model's is taken as that model, offline, with a note; nothing fuzzier."""

from __future__ import annotations

import pytest

from memdoc.errors import UnknownModelError
from memdoc.resolve import models
from memdoc.resolve.models import catalog_config, mirror_note, mirror_of, resolve_model


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.mark.parametrize(
    "mirror,catalog_id",
    [
        ("NousResearch/Meta-Llama-3-8B", "meta-llama/Meta-Llama-3-8B"),  # the catalog's repository name
        ("unsloth/Meta-Llama-3.1-8B", "meta-llama/Llama-3.1-8B"),  # Meta's older name, an alias of the catalog's
        ("someone/qwen2.5-7b", "Qwen/Qwen2.5-7B"),  # case-insensitive, as the Hub's ids are
        ("mistral-community/Mistral-7B-v0.1", "mistralai/Mistral-7B-v0.1"),
    ],
)
def test_a_mirror_is_the_catalog_model_of_the_same_name(mirror, catalog_id):
    spec = resolve_model(mirror)
    assert mirror_of(mirror) == catalog_id and spec.id == catalog_id and spec.source == "catalog"
    assert spec.config == catalog_config(catalog_id)  # the catalog's own config.json, not a near one
    assert mirror_note(mirror, spec) == f"{mirror} taken as {catalog_id}: the catalog's model of the same name"


@pytest.mark.parametrize(
    "model",
    [
        "meta-llama/Meta-Llama-3-8B",  # the catalog id itself
        "meta-llama/llama-3-8b",  # an alias
        "Meta-Llama-3-8B",  # no org
        "a/b/Meta-Llama-3-8B",  # not org/name
        "NousResearch/Meta-Llama-3-8B-GGUF",  # a longer name is another repository
        "NousResearch/Meta-Llama-3",  # and so is a shorter one
    ],
)
def test_only_an_exact_repository_name_of_an_unknown_id_is_a_mirror(model):
    assert mirror_of(model) is None


def test_no_note_for_catalog_ids_and_variants():
    for model in ("meta-llama/Meta-Llama-3-8B", "meta-llama/llama-3-8b", "Qwen/Qwen2.5-7B-Instruct"):
        assert mirror_note(model, resolve_model(model)) is None


def test_a_near_name_is_still_unknown():
    with pytest.raises(UnknownModelError, match="unknown model 'NousResearch/Meta-Llama-3-8B-GGUF'"):
        resolve_model("NousResearch/Meta-Llama-3-8B-GGUF")


def test_a_name_of_two_catalog_models_is_unknown(monkeypatch):
    """Two catalog entries of the same repository name (a second org's copy added to the catalog): ambiguous,
    so the unknown-model error, as for any other unknown id."""
    ids = dict(models.catalog_ids())
    ids["other-org/meta-llama-3-8b"] = "other-org/Meta-Llama-3-8B"
    monkeypatch.setattr(models, "catalog_ids", lambda: ids)
    assert mirror_of("NousResearch/Meta-Llama-3-8B") is None
    with pytest.raises(UnknownModelError, match="unknown model 'NousResearch/Meta-Llama-3-8B'"):
        resolve_model("NousResearch/Meta-Llama-3-8B")
