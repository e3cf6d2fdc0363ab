"""Activation offloading in the plan search (issue 29): at a length where full checkpointing's layer inputs no
longer fit one card, the search offers the plan that keeps them on the host, within the host RAM it is given."""

from conftest import bill_plan

from memdoc.core.model.gpu import resolve_gpu
from memdoc.core.model.plan import parse_plan
from memdoc.core.remedies.search import search
from memdoc.resolve.models import resolve_model

MODEL, SEQ = "meta-llama/Llama-3.1-8B", 200_000
FIXED = frozenset({"method", "seq_len", "shard", "offload", "loss", "allow_long"})
LAYER_INPUTS = 32 * SEQ * 4096 * 2  # 32 decoder layers × tokens × hidden × bf16 (Llama-3.1-8B config.json)


def test_checkpointing_alone_does_not_fit_one_h100_at_200k_tokens():
    bill = bill_plan(MODEL, "h100", method="lora", seq=SEQ, allow_long=True, loss="fused", checkpointing="full")
    assert not bill.fit.fits and bill.peak.activations >= LAYER_INPUTS


def test_plan_search_offloads_the_layer_inputs_within_the_host_ram():
    base = parse_plan(method="lora", seq=SEQ, allow_long=True, loss="fused")
    model, gpu = resolve_model(MODEL), resolve_gpu("h100")
    found = search(model, base, gpu, fixed=FIXED, host_ram_bytes=256 * 2**30)
    assert found and all(c.plan.activation_offload and c.plan.checkpointing.value == "full" for c in found)
    assert found[0].bill.host["activations"] == LAYER_INPUTS
    assert search(model, base, gpu, fixed=FIXED, host_ram_bytes=LAYER_INPUTS - 1) == []  # the host must hold them
