"""`--loss trl-fused` against TRL's own fused LM head, measured on the CPU.

A tiny Llama built from a config (random weights, no download) gets TRL's fused head exactly as
`SFTTrainer.__init__` adds it (`trl.trainer.utils.add_fused_lm_head`, outputs log_probs, entropy and
is_top1), and one training step runs the loss as `SFTTrainer.compute_loss` does (`loss_type="nll"`):
`model(**inputs, fused_lm_head=True)`, `-log_probs` summed over the labelled tokens, then backward,
foreach AdamW and `zero_grad`. torch's MemTracker measures the steady step's peak of live tensor bytes.

On the CPU TRL folds each tile with torch ops instead of its Triton kernels (`_forward_tile`,
`_backward_tile` in trl/kernels/chunked_logprob.py): they make a few temporaries of one tile's used part
(tokens × vocabulary, fp32) that the GPU path does not. memdoc bills the GPU path, so the vocabulary here
is small (128: 0.25 MiB per such temporary) while the tile buffer is `[510 × 32768]` fp32 (64 MiB).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow

BATCH, SEQ, VOCAB, HIDDEN = 2, 256, 128, 256
MIB = 2**20


def _tiny_llama():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=HIDDEN,
        intermediate_size=2 * HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=VOCAB,
        max_position_embeddings=SEQ,
        tie_word_embeddings=False,
    )
    return LlamaForCausalLM(config).train(), config.to_dict()


def _measured_peak(trl_head: bool) -> int:
    """Peak live bytes of the second of two training steps (the first creates the optimizer states)."""
    import torch
    from torch.distributed._tools.mem_tracker import MemTracker
    from trl.trainer.utils import add_fused_lm_head

    model, _ = _tiny_llama()
    if trl_head:
        add_fused_lm_head(model, outputs=("log_probs", "entropy", "is_top1"))  # as SFTTrainer.__init__
    opt = torch.optim.AdamW(model.parameters(), foreach=True)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))

    def step() -> None:
        if trl_head:  # SFTTrainer.compute_loss, loss_type="nll"
            out = model(input_ids=ids, labels=ids, fused_lm_head=True)
            loss = (-out.log_probs).sum() / out.label_mask.sum().clamp(min=1)
        else:
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()
    tracker = MemTracker()
    tracker.track_external(model, opt)
    with tracker:
        step()
    peaks = tracker.get_tracker_snapshot("peak")
    return max(v for per_device in peaks.values() for k, v in per_device.items() if str(k).endswith("Total"))


def _billed_peak(loss: str) -> int:
    from memdoc.core.billing.bill import compute_bill
    from memdoc.core.model.model_spec import spec_from_config
    from memdoc.core.model.plan import parse_plan

    _, config = _tiny_llama()
    model = spec_from_config(config, model_id="tiny-llama", source="test")
    plan = parse_plan(precision="fp32", optimizer="adamw-foreach", micro_batch=BATCH, seq_len=SEQ, loss=loss)
    return compute_bill(model, plan).peak_allocated


def test_trl_fused_head_step_matches_the_bill():
    """The real fused-head step (≈ 99 MiB, the 64 MiB tile buffer on top of a ≈ 35 MiB plain step) is billed
    within 3% by `--loss trl-fused`, and the plain transformers step by `--loss hf`."""
    trl_measured, plain_measured = _measured_peak(True), _measured_peak(False)
    trl_billed, plain_billed = _billed_peak("trl-fused"), _billed_peak("hf")
    print(f"trl-fused: measured {trl_measured / MIB:.2f} MiB, billed {trl_billed / MIB:.2f} MiB")
    print(f"hf:        measured {plain_measured / MIB:.2f} MiB, billed {plain_billed / MIB:.2f} MiB")
    assert trl_measured - plain_measured > 60 * MIB  # the tile buffer: 510 × 32768 × 4 B = 63.75 MiB
    assert trl_billed == pytest.approx(trl_measured, rel=0.03)
    assert plain_billed == pytest.approx(plain_measured, rel=0.03)
