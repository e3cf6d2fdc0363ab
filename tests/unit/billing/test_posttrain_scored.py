"""The tokens TRL 1.16's fused LM head scores per task (issue 23, P-fidelity) against TRL's own labels, and the
`prompt_len` plan field (`--prompt-len`).

On a Triton device `add_fused_lm_head` (trl/trainer/utils.py) gathers only the positions whose shifted label is not
-100 (`hidden_states[mask]`, `mask = labels[:, 1:] != -100`): DPO's collator marks the completion
(`DataCollatorForPreference`, `completion_mask`) and `DPOTrainer._compute_loss` masks the rest
(`input_ids.masked_fill(completion_mask == 0, -100)`).
"""

from __future__ import annotations

import pytest

from memdoc.core.billing.activations.head import trl_scored_tokens
from memdoc.core.billing.posttrain.rows import policy_plan
from memdoc.core.model.plan import parse_plan
from memdoc.core.model.plan_checks import check_requested_plan, inapplicable_flags
from memdoc.errors import PlanError


def _dpo_scored_by_trl(prompt: int, completion: int, pairs: int) -> int:
    """The labelled positions of a DPO batch as TRL builds it: its collator, then `_compute_loss`'s labels."""
    from trl.trainer.dpo_trainer import DataCollatorForPreference

    examples = [
        {"prompt_ids": list(range(1, prompt + 1)), "chosen_ids": [5] * completion, "rejected_ids": [6] * completion}
        for _ in range(pairs)
    ]
    batch = DataCollatorForPreference(pad_token_id=0)(examples)
    labels = batch["input_ids"].masked_fill(batch["completion_mask"] == 0, -100)
    return int((labels[:, 1:] != -100).sum())


@pytest.mark.parametrize(("prompt", "completion", "pairs"), [(32, 96, 2), (7, 5, 3)])
def test_dpo_scores_the_completion_tokens_as_trl_labels_them(prompt, completion, pairs):
    plan = parse_plan(task="dpo", micro_batch=pairs, seq_len=prompt + completion, prompt_len=prompt)
    assert trl_scored_tokens(policy_plan(plan)) == _dpo_scored_by_trl(prompt, completion, pairs)


def test_without_prompt_len_every_position_but_the_last_is_scored():
    """The upper bound (and SFT's count, unchanged): batch × (seq − 1)."""
    assert trl_scored_tokens(policy_plan(parse_plan(task="dpo", micro_batch=2, seq_len=128))) == 4 * 127
    assert trl_scored_tokens(parse_plan(micro_batch=3, seq_len=512, loss="trl-fused")) == 3 * 511


def test_grpo_scores_the_completion_of_every_row():
    """`_get_per_token_logps_and_entropies`: `labels[:, :-logits_to_keep] = -100` with logits_to_keep the
    completion length, so each row of prompt + completion has `completion_len` labelled positions."""
    import inspect

    import torch
    from trl import GRPOTrainer

    source = inspect.getsource(GRPOTrainer._get_per_token_logps_and_entropies)
    labelling = (
        "labels = input_ids_batch.masked_fill(attention_mask_batch == 0, -100)",
        "labels[:, :-logits_to_keep] = -100",
    )
    assert all(line in source for line in labelling)  # the two lines run below, as TRL 1.16 runs them
    rows, prompt, completion = 4, 32, 96
    input_ids_batch = torch.ones(rows, prompt + completion, dtype=torch.long)
    attention_mask_batch, logits_to_keep = torch.ones_like(input_ids_batch), completion  # full rows: no padding
    labels = input_ids_batch.masked_fill(attention_mask_batch == 0, -100)
    labels[:, :-logits_to_keep] = -100
    trl = int((labels[:, 1:] != -100).sum())
    plan = parse_plan(task="grpo", micro_batch=rows, seq_len=prompt, completion_len=completion, num_generations=4)
    assert trl_scored_tokens(policy_plan(plan)) == trl == rows * completion


def test_prompt_len_must_leave_a_completion():
    with pytest.raises(PlanError, match="--prompt-len 128 must be shorter"):
        check_requested_plan(parse_plan(task="dpo", seq_len=128, prompt_len=128))
    with pytest.raises(PlanError, match="--prompt-len"):
        parse_plan(task="dpo", seq_len=128, prompt_len=0)
    assert parse_plan(task="dpo", seq_len=128, prompt_len="32").prompt_len == 32


def test_prompt_len_is_ignored_with_an_online_task_and_said_so():
    plan = parse_plan(task="grpo", micro_batch=4, num_generations=4, prompt_len=16, seq_len=64)
    (note,) = inapplicable_flags(plan, frozenset({"prompt_len"}))
    assert note.startswith("--prompt-len does not apply")
    assert not inapplicable_flags(parse_plan(task="dpo", prompt_len=16), frozenset({"prompt_len"}))
