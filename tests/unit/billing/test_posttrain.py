"""The post-training bill (issue 23) against independent truth: TRL 1.16's collator rows and defaults, the
published parameter counts and configs, the vLLM fraction of the card, and the SFT bill left as it was."""

import pytest

from memdoc.core.billing.bill import bill_json, compute_bill
from memdoc.core.billing.posttrain.generation import kv_cache
from memdoc.core.billing.posttrain.rows import policy_plan
from memdoc.core.model.gpu import resolve_gpu
from memdoc.core.model.plan import parse_plan
from memdoc.resolve.models import resolve_model

LLAMA2_7B = 6_738_415_616  # published parameter count of Llama-2-7b-hf


def bill(model="meta-llama/Llama-2-7b-hf", gpu=None, **flags):
    return compute_bill(resolve_model(model), parse_plan(**flags), resolve_gpu(gpu) if gpu else None)


def test_dpo_concatenated_rows_match_trls_collator():
    """TRL's `DataCollatorForPreference` stacks chosen and rejected: 2 × the examples' rows in one batch."""
    from trl.trainer.dpo_trainer import DataCollatorForPreference

    examples = [
        {"prompt_ids": [1, 2, 3], "chosen_ids": [4, 5], "rejected_ids": [6]},
        {"prompt_ids": [7, 8], "chosen_ids": [9], "rejected_ids": [10, 11]},
    ]
    rows = DataCollatorForPreference(pad_token_id=0)(examples)["input_ids"].shape[0]
    assert policy_plan(parse_plan(task="dpo", micro_batch=len(examples))).micro_batch == rows


def test_dpo_full_reference_is_a_frozen_copy_in_every_phase():
    """Full fine-tuning: TRL builds the reference in the policy's dtype: params × 2 bytes more in every phase."""
    dpo, sft = bill(task="dpo", micro_batch=1, seq_len=512), bill(micro_batch=2, seq_len=512)
    assert dpo.phase_names == ("forward", "reference", "backward", "optimizer")  # TRL scores after the forward
    for name in sft.phase_names:
        assert dpo.phases[name].weights - sft.phases[name].weights == 2 * LLAMA2_7B


def test_dpo_lora_reference_adds_no_weights_and_precompute_removes_the_forward():
    """PEFT: the adapter-disabled base is the reference (no weights); precomputed log-probs: no reference phase."""
    dpo, sft = bill(task="dpo", method="lora", seq_len=512), bill(method="lora", micro_batch=2, seq_len=512)
    assert dpo.phases["forward"].weights == sft.phases["forward"].weights
    assert dpo.phases["reference"].total > dpo.phases["forward"].total  # on top of the policy's forward
    pre = bill(task="dpo", method="lora", seq_len=512, precompute_ref=True)
    assert pre.phase_names == ("forward", "backward", "optimizer")


def test_grpo_default_beta_has_no_reference():
    """GRPOConfig.beta defaults to 0.0 in TRL 1.16: no reference model and no reference forward."""
    from trl import GRPOConfig

    assert GRPOConfig.__dataclass_fields__["beta"].default == 0.0
    plain = bill(task="grpo", method="full", micro_batch=8, seq_len=256, completion_len=256)
    assert plain.phase_names == ("generation", "forward", "backward", "optimizer")
    ref = bill(task="grpo", method="full", micro_batch=8, seq_len=256, completion_len=256, beta=0.04)
    assert ref.phase_names == ("generation", "reference", "forward", "backward", "optimizer")
    params = resolve_model("meta-llama/Llama-2-7b-hf").params.total
    assert ref.phases["forward"].weights - plain.phases["forward"].weights == 2 * params  # the bf16 reference copy


def test_grpo_kv_cache_from_the_published_config():
    """Qwen2.5-7B's config.json: 28 layers, 4 kv heads of 128; bf16 cache of K and V per token per row."""
    plan = parse_plan(task="grpo", micro_batch=8, seq_len=256, completion_len=768)
    assert kv_cache(resolve_model("Qwen/Qwen2.5-7B"), plan) == 2 * 28 * 4 * 128 * 8 * (256 + 768) * 2


def test_colocated_vllm_takes_its_fraction_and_sleeps():
    """`vllm_gpu_memory_utilization` × the card in generation; held in training unless sleep mode frees it."""
    flags = dict(task="grpo", method="lora", micro_batch=1, grad_accum=8, seq_len=256, completion_len=256)
    gpu = resolve_gpu("h100-sxm")
    awake = bill("Qwen/Qwen2.5-7B", "h100-sxm", vllm="colocate", vllm_memory=0.3, **flags)
    asleep = bill("Qwen/Qwen2.5-7B", "h100-sxm", vllm="colocate", vllm_memory=0.3, vllm_sleep=True, **flags)
    pool = int(0.3 * gpu.memory_bytes)
    assert awake.phases["generation"].other == pool == asleep.phases["generation"].other
    assert awake.phases["backward"].total - asleep.phases["backward"].total == pool
    server = bill("Qwen/Qwen2.5-7B", "h100-sxm", vllm="server", **flags)
    assert server.phases["generation"].other == 0


def test_trained_row_is_prompt_plus_completion():
    """GRPO's trained rows are prompt + completion long: the policy's step is SFT's at that length, with the prompt
    unscored (`_get_per_token_logps_and_entropies`: `labels[:, :-logits_to_keep] = -100`; TRL's fused head gathers
    only the labelled positions: `--prompt-len`)."""
    grpo = bill(task="grpo", method="lora", micro_batch=8, seq_len=256, completion_len=256)
    sft = bill(method="lora", micro_batch=8, seq_len=512, loss="trl-fused", prompt_len=256)
    assert grpo.phases["backward"].total == sft.phases["backward"].total


def test_sft_keeps_its_phases_and_json_names_them():
    sft = bill(seq_len=512)
    assert sft.phase_names == ("forward", "backward", "optimizer")
    out = bill_json(bill(task="dpo", seq_len=512, gpu="h100-sxm"))
    assert out["phase_names"] == ["forward", "reference", "backward", "optimizer"]
    assert list(out["phases"]) == out["phase_names"] and out["peak_phase"] in out["phase_names"]


@pytest.mark.parametrize("task", ["orpo", "simpo", "kto", "rm", "rloo", "ppo"])
def test_every_task_bills_and_simulates(task):
    b = bill(task=task, method="lora", micro_batch=2, grad_accum=4, seq_len=256, completion_len=128, gpu="h100-sxm")
    assert b.peak_phase in b.phase_names
    assert b.allocator.events is not None  # its allocation stream was simulated, not skipped


@pytest.mark.slow
def test_reward_model_is_a_sequence_classifier():
    """TRL 1.16's RewardTrainer trains `AutoModelForSequenceClassification(num_labels=1)`: its parameters are what
    transformers builds on the meta device (no LM head, a hidden × 1 score), and no vocabulary logits exist: the
    forward's transients stay far below the fp32 logits of its rows (2 × 2 × 512 tokens × 152,064 × 4 bytes)."""
    import torch
    from transformers import AutoConfig, AutoModelForSequenceClassification

    spec = resolve_model("Qwen/Qwen2.5-7B")
    data = {k: v for k, v in spec.config.items() if k not in ("model_type", "transformers_version")}
    conf = AutoConfig.for_model(spec.config["model_type"], **data, num_labels=1)
    with torch.device("meta"):
        classifier = AutoModelForSequenceClassification.from_config(conf)
    counted = sum(p.numel() for p in classifier.parameters())
    b = compute_bill(spec, parse_plan(task="rm", method="full", micro_batch=2, seq_len=512), resolve_gpu("h100-sxm"))
    assert b.model.params.total == counted
    assert b.phases["forward"].weights == 2 * counted  # bf16
    assert b.phases["forward"].other < 2 * 2 * 512 * spec.vocab_size * 4 // 10


def test_post_training_time_adds_decode_and_scoring_first_order():
    """Decode reads the weights and the mean cache once per new token (Qwen2.5-7B's config: 28 layers, 4 kv heads
    of 128); one reference forward is a third of the policy's forward + backward; the output says first-order."""
    from memdoc.core.billing.posttrain.steptime import post_step_time
    from memdoc.core.billing.steptime import MEMORY_EFFICIENCY, step_time

    model, gpu = resolve_model("Qwen/Qwen2.5-7B"), resolve_gpu("h100-sxm")
    flags = dict(task="grpo", method="lora", micro_batch=8, seq_len=256, completion_len=512)
    plain = post_step_time(model, parse_plan(**flags), gpu)
    policy = step_time(model, policy_plan(parse_plan(**flags)), gpu)
    cache = 2 * 28 * 4 * 128 * 8 * (256 + 256) * 2
    decode = 512 * (model.params.total * 2 + cache) / (gpu.memory_bandwidth_gbps * 1e9 * MEMORY_EFFICIENCY)
    assert plain.compute == pytest.approx(policy.compute + decode)
    with_ref = post_step_time(model, parse_plan(beta=0.04, **flags), gpu)
    assert with_ref.compute - plain.compute == pytest.approx(policy.compute / 3)
    assert "first-order" in plain.to_json()["note"]


def test_zero3_generation_gathers_the_whole_policy():
    """TRL's `ds3_gather_for_generation` defaults to True: under ZeRO-3 generation holds every parameter (bf16)."""
    from trl import GRPOConfig

    assert GRPOConfig.__dataclass_fields__["ds3_gather_for_generation"].default is True
    flags = dict(task="grpo", micro_batch=8, seq_len=256, completion_len=256, gpus_per_node=4)
    z3 = bill(shard="zero3", **flags).phases["generation"]
    z2 = bill(shard="zero2", **flags).phases["generation"]
    assert z3.other - z2.other == 2 * LLAMA2_7B - 2 * LLAMA2_7B // 4
