"""`--loss trl-fused`: what TRL's fused LM head allocates and saves (trl/kernels/chunked_logprob.py,
`ChunkedLogProbFunction`, and trl/trainer/utils.py, `add_fused_lm_head`), by hand.

With N = batch × (seq − 1) scored tokens (the last position has no label), compute dtype `cb`:
forward saves the gathered hidden states (N × H), int64 targets, fp32 `log_z` and entropy and the bool
label mask, and holds `mm_buf = empty(min(N, 4096), 32768)` plus 7 fp32 running statistics per token;
backward holds fp32 `grad_hidden` (N × H), fp32 `grad_weight` (V × H) when the head trains and
`mm_buf` again, and at its return casts them to the input's and the weight's dtypes. The measured
step is in tests/fidelity/test_trl_fused_head_measured.py.
"""

from __future__ import annotations

from conftest import bill_plan

from memdoc.core.model.plan import Loss, parse_plan
from memdoc.core.model.stack import parse_stack, trl_fused_lm_head
from memdoc.core.trainers.trl.defaults import trl_sft_defaults

LLAMA = "meta-llama/Llama-3.1-8B"  # hidden 4096, vocabulary 128256, untied
H, V = 4096, 128_256
GIB = 2**30


def test_plain_bill_keeps_transformers_loss_by_default():
    assert parse_plan().loss is Loss.HF
    assert bill_plan(LLAMA).plan.loss is Loss.HF


def test_forward_holds_one_tile_buffer_and_saves_the_gathered_hidden_states():
    acts = bill_plan(LLAMA, method="lora", seq_len=4096, loss="trl-fused").acts
    hf = bill_plan(LLAMA, method="lora", seq_len=4096).acts
    N, T = 4095, 4096
    assert acts.loss_forward_peak == 4095 * 32768 * 2 + 7 * 4 * N  # bf16 tile of 4095 rows, fp32 statistics
    # HF saves the fp32 log-softmax (T × V); TRL the hidden states (bf16), targets, log_z, entropy, mask
    assert acts.head_saved - hf.head_saved == 2 * N * H + (8 + 4 + 4 + 1) * N - 4 * T * V
    # fp32 grad_hidden, the tile, and at its return grad_hidden cast to bf16; frozen head: no grad_weight
    assert acts.loss_backward_peak == 4 * N * H + 4095 * 32768 * 2 + 2 * N * H


def test_tile_rows_stop_at_4096_tokens():
    acts = bill_plan(LLAMA, method="lora", micro_batch=4, seq_len=8192, loss="trl-fused").acts
    assert acts.loss_forward_peak == 4096 * 32768 * 2 + 7 * 4 * 4 * 8191


def test_full_fp32_backward_holds_fp32_head_gradients():
    acts = bill_plan(LLAMA, precision="fp32", seq_len=512, loss="trl-fused").acts
    N = 511
    assert acts.loss_backward_peak == 4 * N * H + 4 * V * H + N * 32768 * 4


def test_at_128k_vocabulary_trl_bills_gibs_less_than_full_logits():
    """The issue: at a 128K vocabulary TRL never holds the full fp32 logits memdoc bills for `--loss hf`."""
    hf = bill_plan(LLAMA, method="lora", seq_len=8192)
    trl = bill_plan(LLAMA, method="lora", seq_len=8192, loss="trl-fused")
    assert hf.peak_allocated - trl.peak_allocated > 8 * GIB


def test_the_stack_says_whether_trl_runs_its_fused_head():
    assert trl_fused_lm_head(parse_stack("trl==1.16.0"))
    assert not trl_fused_lm_head(parse_stack("trl==0.19"))
    assert trl_fused_lm_head(parse_stack("transformers==5.24"))  # TRL unknown: the newest
    assert trl_sft_defaults(parse_stack("trl==1.16.0")).loss is Loss.TRL_FUSED
    assert trl_sft_defaults(parse_stack("trl==0.19")).loss is Loss.HF
