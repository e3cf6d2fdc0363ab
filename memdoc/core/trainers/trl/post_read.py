"""The post-training keys of a TRL config (`trl dpo|kto|reward|grpo|rloo --config`): which task the file trains and
its knobs, as plan fields (the inverse of `memdoc.core.trainers.trl.post`).

A TRL YAML does not name its config class; the script that reads it does (`trl dpo` parses it as a `DPOConfig`).
memdoc tells the class by the keys only that class has (TRL 1.16, `trl/trainer/*_config.py`; fields beyond
`SFTConfig`'s and `TrainingArguments`'): the first rule that matches decides, and `--task` given alongside
overrides it (flags override files).

1. `normalize_advantages`, `reward_clip_range` (RLOOConfig only) -> rloo;
2. the generation keys (`num_generations`, `max_completion_length`, `generation_batch_size`, `steps_per_generation`,
   `num_iterations`, `use_vllm`, `vllm_mode`, `vllm_gpu_memory_utilization`, `vllm_enable_sleep_mode`; the GRPO
   script's `reward_funcs`, `reward_model_name_or_path`), or a GRPO `loss_type` (grpo, dapo, bnpo, dr_grpo) -> grpo;
3. `desirable_weight`, `undesirable_weight` (KTOConfig only), or `loss_type` kto / apo_zero_unpaired -> kto;
4. `center_rewards_coefficient` (RewardConfig only) -> rm;
5. `beta`, `precompute_ref_log_probs`, `rpo_alpha`, `ref_model_sync_steps`, or a DPO `loss_type` -> dpo;
6. none of them: SFT (nothing is set).

`beta` is read only when the file sets it: absent, the plan keeps None (the task's own default,
`Task.default_beta`), so `--task rloo` over a file without `beta` bills RLOO's 0.05, not GRPO's 0.0.

`prompt_len` (`--prompt-len`, the unscored prompt of each DPO/KTO/RM row) is read from no file: TRL 1.16's
`DPOConfig`, `KTOConfig`, `RewardConfig`, `ORPOConfig` and `CPOConfig` have no prompt-length key (no
`max_prompt_length`), so it comes from the flag or a recipe only.
"""

from __future__ import annotations

from memdoc.core.trainers.reading import ConfigReading, SourceDoc
from memdoc.core.trainers.trl.keys import DPO_KEYS, KEYS, KTO_KEYS, ONLINE_KEYS, RLOO_KEYS, RM_KEYS
from memdoc.core.trainers.values import fail, get_bool, get_choice, get_float, get_int, get_str

GRPO_LOSSES = frozenset({"grpo", "dapo", "bnpo", "dr_grpo", "cispo", "sapo", "luspo", "vespo"})
KTO_LOSSES = frozenset({"kto", "apo_zero_unpaired"})
DPO_LOSSES = frozenset(
    {"sigmoid", "hinge", "ipo", "exo_pair", "nca_pair", "robust", "bco_pair", "sppo_hard", "aot", "aot_unpaired"}
    | {"apo_zero", "apo_down", "discopop", "sigmoid_norm", "sft"}
)
"""`loss_type` values of GRPOConfig, KTOConfig and DPOConfig (TRL 1.16 help texts)."""


def _loss_types(doc: SourceDoc) -> set[str]:
    """`loss_type` as a set of names (DPOConfig takes a list, the others one string)."""
    value = doc.data.get(KEYS["loss"])
    if isinstance(value, str):
        return {value}
    if isinstance(value, list):
        return {v for v in value if isinstance(v, str)}
    return set()


def trl_task(doc: SourceDoc) -> tuple[str, str] | None:
    """The task the document's keys say and the key that says it (rules 1-5 of the module docstring)."""
    keys = set(doc.data)
    losses = _loss_types(doc)
    for task, marks, loss_names in (
        ("rloo", RLOO_KEYS, frozenset()),
        ("grpo", ONLINE_KEYS, GRPO_LOSSES),
        ("kto", KTO_KEYS, KTO_LOSSES),
        ("rm", RM_KEYS, frozenset()),
        ("dpo", DPO_KEYS, DPO_LOSSES),
    ):
        key = next((k for k in marks if k in keys), None)
        if key:
            return task, key
        if losses & loss_names:
            return task, KEYS["loss"]
    return None


def read_trl_post(doc: SourceDoc, reading: ConfigReading) -> str | None:
    """The task and its knobs; returns the task read (None: SFT)."""
    found = trl_task(doc)
    if found is None:
        return None
    task, key = found
    reading.set(doc, key, "task", task)
    beta = get_float(doc, KEYS["beta"])
    if beta is not None:
        if beta < 0:
            raise fail(doc, KEYS["beta"], f"must be 0 or more, got {beta!r}")
        reading.set(doc, KEYS["beta"], "beta", beta)
    if task in ("dpo", "kto") and get_bool(doc, KEYS["precompute_ref"]) is not None:
        reading.set(doc, KEYS["precompute_ref"], "precompute_ref", get_bool(doc, KEYS["precompute_ref"]))
    if task in ("grpo", "rloo"):
        _online(doc, reading)
    return task


def _online(doc: SourceDoc, reading: ConfigReading) -> None:
    """GRPOConfig/RLOOConfig's generation keys (TRL 1.16), and the prompt length of older TRL (`max_prompt_length`,
    gone in 1.16, where prompts are never truncated)."""
    for key, plan_field in (
        (KEYS["num_generations"], "num_generations"),
        (KEYS["completion_len"], "completion_len"),
        (KEYS["generation_batch"], "generation_batch"),
        (KEYS["num_iterations"], "num_iterations"),
        (KEYS["max_prompt_length"], "seq_len"),
    ):
        value = get_int(doc, key)
        if value is not None:
            reading.set(doc, key, plan_field, value)
    if get_int(doc, KEYS["max_prompt_length"]) is None:
        reading.skip(
            doc,
            "max_prompt_length (absent)",
            "TRL 1.16 has no prompt-length key and never truncates prompts: give your longest prompt as --seq",
        )
    if get_int(doc, KEYS["steps_per_generation"]) is not None:
        reading.skip(
            doc,
            KEYS["steps_per_generation"],
            "the generation batch as a number of steps: give --generation-batch (completions over all GPUs)",
        )
    if get_bool(doc, KEYS["vllm"]):
        mode = get_choice(doc, KEYS["vllm_mode"], ("colocate", "server"))
        reading.set(doc, KEYS["vllm"], "vllm", mode or "colocate")  # GRPOConfig's default mode
        if mode:
            reading.set(doc, KEYS["vllm_mode"], "vllm", mode)
        memory = get_float(doc, KEYS["vllm_memory"])
        if memory is not None:
            reading.set(doc, KEYS["vllm_memory"], "vllm_memory", memory)
        sleep = get_bool(doc, KEYS["vllm_sleep"])
        if sleep is not None:
            reading.set(doc, KEYS["vllm_sleep"], "vllm_sleep", sleep)
    elif get_bool(doc, KEYS["vllm"]) is False:
        reading.set(doc, KEYS["vllm"], "vllm", "none")
    if get_str(doc, KEYS["reward_model"]):
        reading.skip(doc, KEYS["reward_model"], "a reward model's weights and forward: not billed")


__all__ = ["read_trl_post", "trl_task"]
