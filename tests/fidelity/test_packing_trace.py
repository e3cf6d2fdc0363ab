"""`diagnose MODEL --packing`: a fake-tensor trace of a packed batch against the bill and against attention itself.

* The emulated flash-attention varlen kernel (`memdoc/probe/varlen.py`) attends per document: a real CPU forward of
  a small Llama over one packed row equals the forwards of its documents run one by one; transformers' own SDPA
  path over the same row allocates a tokens² mask (`masking_utils.find_packed_sequence_indices`), the emulation
  none (every op's output shape is recorded by a `TorchDispatchMode`).
* The trace of Llama-3.2-1B at 2 × 2048 with 4 documents per row, against the bill: peak and activations within
  1% (the tolerance of the trace-vs-bill tests, `test_fidelity.py` `test_checkpoint_every_n_layers_matches_the_trace`),
  and no tokens² tensor allocated anywhere in the traced step.
"""

import json
import sys

import pytest
from conftest import CATALOG, ROOT, bill_plan

torch = pytest.importorskip("torch")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

SMALL = {
    "model_type": "llama",
    "vocab_size": 128,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
}


class SquareTensors(TorchDispatchMode):
    """Records the shape of every op output whose last two dimensions are both `tokens` (a tokens² mask or scores)."""

    def __init__(self, tokens: int):
        super().__init__()
        self.tokens, self.seen = tokens, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and t.dim() >= 2 and t.shape[-1] == t.shape[-2] == self.tokens:
                self.seen.append((str(func), tuple(t.shape)))
        return out


def _small_model(attn: str):
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    conf = AutoConfig.for_model(**SMALL)
    return AutoModelForCausalLM.from_config(conf, attn_implementation=attn).eval()


@pytest.mark.slow
def test_varlen_emulation_attends_per_document_without_a_square_mask():
    from memdoc.probe.varlen import VARLEN, document_bounds, packed_inputs, register_varlen

    register_varlen()
    bounds = document_bounds(2, 48, 16)
    assert bounds == (0, 16, 32, 48, 64, 80, 96)
    ids = torch.randint(0, SMALL["vocab_size"], (1, 96))
    inputs = {k: v for k, v in packed_inputs(ids, bounds).items() if k != "labels"}
    varlen = _small_model(VARLEN)
    sdpa = _small_model("sdpa")
    with torch.no_grad():
        with SquareTensors(96) as ours:
            packed = varlen(**inputs).logits
        alone = torch.cat([varlen(input_ids=ids[:, a:b]).logits for a, b in zip(bounds, bounds[1:])], dim=1)
        with SquareTensors(96) as theirs:
            # no cache, as in training: transformers looks for packing only then (`_preprocess_mask_arguments`)
            sdpa(input_ids=ids, position_ids=inputs["position_ids"], use_cache=False)
    torch.testing.assert_close(packed, alone, rtol=1e-4, atol=1e-5)
    assert ours.seen == []
    assert theirs.seen  # transformers' SDPA path: a (1, 1, 96, 96) mask from the packed position_ids
    assert all(shape[-2:] == (96, 96) for _, shape in theirs.seen)


@pytest.mark.slow
def test_packed_trace_matches_the_bill(monkeypatch):
    """Llama-3.2-1B, full fine-tune, 2 × 2048, documents of 512 tokens (4 per row): the trace runs the real
    transformers model on the flattened row (4096 tokens) and allocates no 4096 × 4096 tensor."""
    import memdoc.probe.tracer as tracer
    from memdoc.core.model.plan import parse_plan

    sys.path.insert(0, str(ROOT / "benchmarks"))
    config = json.loads((CATALOG / "meta-llama--Llama-3.2-1B.json").read_text())
    flags = {"batch": 2, "seq": 2048, "packing": True, "document_tokens": 512}
    real_step, recorder = tracer.training_step, SquareTensors(2 * 2048)

    def recorded_step(*args, **kwargs):
        with recorder:
            return real_step(*args, **kwargs)

    monkeypatch.setattr(tracer, "training_step", recorded_step)
    measured = tracer.trace_training_step(config, parse_plan(**flags))
    billed = bill_plan("meta-llama/Llama-3.2-1B", **flags)
    assert recorder.seen == []
    assert any(n.startswith("packing: 2 row(s) of 2048 tokens") and "8 documents" in n for n in measured.notes)
    assert abs(billed.peak_allocated / measured.peak_allocated - 1) <= 0.01
    phase = measured.peak_phase
    assert billed.peak_phase == phase
    assert billed.phases[phase].activations == pytest.approx(measured.phases[phase]["activations"], rel=0.01)
