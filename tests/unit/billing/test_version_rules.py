"""Version rules of the family registry (`Family.before`, `Family.as_of`): a model is billed as the stack's
transformers builds it, against autograd censuses of each release (tests/fixtures/census/, measured with that
release's own modelling code; the installed release is censused live in fidelity/test_activations_census.py)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from conftest import CATALOG, FIXTURES, invoke

from memdoc.core.billing.activations import layer_activations
from memdoc.core.model.families import FAMILIES
from memdoc.core.model.model_spec import spec_from_config
from memdoc.core.model.plan import parse_plan

FALCON_524 = json.loads((FIXTURES / "census" / "falcon-7b-transformers-5.24.json").read_text())
FALCON = json.loads((CATALOG / "tiiuae--falcon-7b.json").read_text())
PLANS = {"full": {"method": "full"}, "lora": {"method": "lora", "lora_targets": ["query_key_value"]}}


@pytest.mark.parametrize("method", ["full", "lora"])
@pytest.mark.parametrize("release, measured", [("5.24.0", "per_layer_bytes"), ("5.25.0", "under_5_25_0")])
def test_falcon_layer_is_billed_as_each_release_saves_it(method, release, measured):
    spec = dataclasses.replace(spec_from_config(FALCON, model_id="tiiuae/falcon-7b"), transformers=release)
    plan = parse_plan(seq=FALCON_524["seq"], lora_dropout=0.05, **PLANS[method])
    billed = sum(layer_activations(spec, plan, 2).values())
    assert billed == pytest.approx(FALCON_524[measured][method], rel=0.005, abs=256 * FALCON_524["seq"])


def test_version_rules_are_ordered_and_name_real_fields():
    fields = {f.name for f in dataclasses.fields(FAMILIES["llama"])}
    for family in FAMILIES.values():
        versions = [tuple(int(p) for p in since.split(".")) for since, _ in family.before]
        assert versions == sorted(versions, reverse=True), family.name
        for _, facts in family.before:
            assert facts and set(facts) <= fields - {"name", "before"}, family.name
        assert family.as_of(None) is family


def test_the_stack_decides_which_falcon_is_billed():
    """`--stack transformers==5.24.0` bills 5.24's Falcon: the forward's activations move by the censused
    difference of the two releases, in every layer."""

    def activations(stack):
        args = ["bill", "tiiuae/falcon-7b", "--gpu", "h200", "--method", "full", "--seq", "128", "--json"]
        result = invoke(*args, "--stack", stack)
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)["phases"]["forward"]["activations"]

    layers = FALCON["num_hidden_layers"]
    moved = FALCON_524["per_layer_bytes"]["full"] - FALCON_524["under_5_25_0"]["full"]
    difference = activations("transformers==5.24.0") - activations("transformers==5.25.0")
    assert difference == pytest.approx(layers * moved, rel=0.001)
