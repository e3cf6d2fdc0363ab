"""`--activation-offload` against transformers' own offload path and fake-tensor traces.

* What goes to the host: transformers 5.24's `activation_checkpointing_enable(offload=True)` wraps each
  checkpointed layer in `save_on_cpu`; a real CPU step of a small Llama counts every tensor it hands to that
  hook (a subclass of torch's `save_on_cpu`), against the bill's host bytes.
* What stays on the GPU: fake-tensor traces with the probe's offloading hooks (`memdoc/probe/offload.py`), with and
  without offloading, against the bill's drop in activation bytes (LoRA keeps layer 0's input: a graph leaf).
* The time: two copies of the host bytes over the card's host link (H100 SXM: PCIe 5.0 x16, gpus.yaml).
"""

import json

import pytest
from conftest import CATALOG, bill_plan

from memdoc.core.billing.bill import compute_bill
from memdoc.core.billing.steptime import step_time
from memdoc.core.model.gpu import resolve_gpu
from memdoc.core.model.model_spec import spec_from_config
from memdoc.core.model.plan import parse_plan
from memdoc.core.model.plan_checks import check_requested_plan
from memdoc.errors import PlanError

SMALL = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "vocab_size": 128,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 5,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
    "tie_word_embeddings": False,
}


def _transformers_offloaded(every: int, batch: int, seq: int) -> list[int]:
    """Bytes of each tensor transformers' offload hands to `save_on_cpu` in one real CPU forward."""
    import torch
    import transformers.modeling_utils as modeling_utils
    from transformers import LlamaConfig, LlamaForCausalLM

    packed: list[int] = []
    real = modeling_utils.save_on_cpu

    class Counting(real):
        def __init__(self, pin_memory=False, device_type="cuda"):
            super().__init__(pin_memory=False, device_type=device_type)  # no pinned allocator without a GPU
            pack = self.pack_hook

            def counting(tensor):
                packed.append(tensor.numel() * tensor.element_size())
                return pack(tensor)

            self.pack_hook = counting

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**SMALL)).to(torch.bfloat16).train()
    ids = torch.randint(0, SMALL["vocab_size"], (batch, seq))
    try:
        modeling_utils.save_on_cpu = Counting
        model.activation_checkpointing_enable(every_n_layers=every, offload=True)  # binds the counting hook
        model(input_ids=ids, labels=ids).loss.backward()
    finally:
        modeling_utils.save_on_cpu = real
    return packed


@pytest.mark.parametrize("every", [1, 2])
def test_host_bytes_are_what_transformers_offloads(every):
    packed = _transformers_offloaded(every, batch=2, seq=32)
    spec = spec_from_config(SMALL, model_id="small-llama")
    plan = parse_plan(batch=2, seq=32, checkpointing="full", checkpoint_every=every, activation_offload=True)
    bill = compute_bill(spec, plan, None)
    layers = -(-SMALL["num_hidden_layers"] // every)  # transformers checkpoints layers 0, N, 2N, …
    assert len(packed) == layers  # one input per checkpointed layer (cos/sin are keyword arguments)
    assert bill.host["activations"] == sum(packed) == layers * 2 * 32 * SMALL["hidden_size"] * 2


@pytest.mark.slow
@pytest.mark.parametrize(("method", "kept_leaf"), [("lora", 1), ("full", 0)])
def test_gpu_bytes_drop_as_the_trace_shows(method, kept_leaf):
    """Llama-3.2-1B, 16 layers traced whole: offloading frees 16 layer inputs under full fine-tuning, 15 under
    LoRA (transformers' `enable_input_require_grads` makes the embedding output a leaf the graph holds)."""
    from memdoc.probe.tracer import trace_training_step

    config = json.loads((CATALOG / "meta-llama--Llama-3.2-1B.json").read_text())
    flags = {"method": method, "seq": 256, "checkpointing": "full"}
    traced, billed, notes = {}, {}, []
    for offload in (False, True):
        plan = parse_plan(**flags, activation_offload=offload)
        measured = trace_training_step(config, plan, layers=4)
        traced[offload] = measured.phases["forward"]["activations"]
        notes += [n for n in measured.notes if n.startswith("activation offload")]
        spec = spec_from_config({**config, "num_hidden_layers": 4}, model_id="llama-4-layers")
        billed[offload] = compute_bill(spec, plan, None)
    residual = 256 * config["hidden_size"] * 2
    assert traced[False] - traced[True] == (4 - kept_leaf) * residual
    assert billed[False].phases["forward"].activations - billed[True].phases["forward"].activations == (
        traced[False] - traced[True]
    )
    assert billed[True].host["activations"] == 4 * residual
    assert notes == [f"activation offload: 4 checkpointed layer input(s) of {residual:,} bytes each kept on the host"]


def test_offload_time_is_two_copies_over_the_host_link():
    gpu = resolve_gpu("h100")
    base = bill_plan("meta-llama/Llama-3.1-8B", "h100", method="lora", seq=32768, checkpointing="full")
    off = bill_plan(
        "meta-llama/Llama-3.1-8B", "h100", method="lora", seq=32768, checkpointing="full", activation_offload=True
    )
    host = 32 * 32768 * 4096 * 2  # 32 layer inputs of 32K tokens × 4096 × bf16
    assert off.host["activations"] == host
    assert base.peak.activations - off.peak.activations == host - 32768 * 4096 * 2  # LoRA keeps layer 0's input
    seconds = step_time(off.model, off.plan, gpu).host - step_time(base.model, base.plan, gpu).host
    assert seconds == pytest.approx(2 * host / (gpu.host_link_gbps * 1e9))


def test_offload_needs_full_checkpointing():
    with pytest.raises(PlanError, match="--checkpointing full"):
        check_requested_plan(parse_plan(activation_offload=True))
    with pytest.raises(PlanError, match="--checkpointing full"):
        check_requested_plan(parse_plan(activation_offload=True, checkpointing="selective"))
