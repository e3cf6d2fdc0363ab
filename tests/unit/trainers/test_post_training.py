"""Reading the post-training keys of users' configs (`user_config.trl_post`, `user_config.rl_keys`).

Truths: the installed trainers' own config classes (TRL 1.16's DPOConfig, KTOConfig, RewardConfig, GRPOConfig,
RLOOConfig fields and loss names; Axolotl 0.19's `RLType` and `VllmConfig` default; LLaMA-Factory 0.9.5's
`RLHFArguments` defaults), and the round trip with memdoc's emitters, whose output those parsers accept
(tests/fidelity/test_emit_post.py).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re

import pytest
from conftest import invoke
from generated_plans import emitted_and_read_back, load_doc

from memdoc.core.model.plan import parse_plan
from memdoc.core.model.stack import Stack
from memdoc.core.trainers.axolotl import post_read as rl_keys
from memdoc.core.trainers.axolotl.read import read_axolotl
from memdoc.core.trainers.detect import detect_format
from memdoc.core.trainers.llamafactory import post_read as lf_post
from memdoc.core.trainers.llamafactory.read import read_llamafactory
from memdoc.core.trainers.trl import keys as trl_keys
from memdoc.core.trainers.trl import post_read as trl_post
from memdoc.core.trainers.trl.read import read_trainer_args
from memdoc.errors import ConfigError

MODEL = "meta-llama/Llama-3.1-8B"
os.environ.setdefault("DISABLE_VERSION_CHECK", "1")  # LLaMA-Factory pins transformers; its dataclasses are read


def _fields(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def test_trl_task_marks_belong_to_their_class_only():
    """Each rule's keys are fields of its config class and of none of the classes the other rules stand for."""
    trl = pytest.importorskip("trl")
    from trl.experimental.kto import KTOConfig

    sft, dpo, kto = _fields(trl.SFTConfig), _fields(trl.DPOConfig), _fields(KTOConfig)
    rm, grpo, rloo = _fields(trl.RewardConfig), _fields(trl.GRPOConfig), _fields(trl.RLOOConfig)
    assert set(trl_keys.RLOO_KEYS) <= rloo - grpo - dpo - kto - rm - sft
    script_only = {"reward_funcs", "reward_model_name_or_path"}  # GRPOScriptArguments (trl/scripts/grpo.py)
    online = set(trl_keys.ONLINE_KEYS) - script_only
    assert online <= grpo and not online & (dpo | kto | rm | sft)
    assert set(trl_keys.KTO_KEYS) <= kto - dpo - rm - grpo - rloo - sft
    assert set(trl_keys.RM_KEYS) <= rm - dpo - kto - grpo - rloo - sft
    assert {"beta", "precompute_ref_log_probs", "ref_model_sync_steps"} <= dpo
    assert not {"beta", "precompute_ref_log_probs"} & (rm | sft)
    from trl.scripts.grpo import GRPOScriptArguments

    assert script_only <= _fields(GRPOScriptArguments)


def test_trl_loss_names_are_trl_s():
    """DPO's and GRPO's `loss_type` names as the installed configs' help texts list them."""
    trl = pytest.importorskip("trl")

    def help_text(cls):
        return next(f for f in dataclasses.fields(cls) if f.name == "loss_type").metadata["help"]

    dpo = set(re.findall(r"`'([a-z_]+)'`", help_text(trl.DPOConfig)))
    grpo = help_text(trl.GRPOConfig).split("Supported values are ")[1].split(".")[0]
    assert trl_post.DPO_LOSSES == dpo  # every name, both ways: an unknown one would read a GRPO file as DPO
    assert trl_post.GRPO_LOSSES == set(re.findall(r"'([a-z_]+)'", grpo))


POST_PLANS = [
    {"task": "dpo", "method": "lora", "beta": 0.3, "precompute_ref": True},
    {"task": "kto", "method": "lora", "beta": 0.2},
    {"task": "rm", "method": "lora"},
    {"task": "grpo", "method": "lora", "grad_accum": 4, "num_generations": 4, "completion_len": 256,
     "num_iterations": 2, "vllm": "colocate", "vllm_memory": 0.45, "vllm_sleep": True, "beta": 0.04},
    {"task": "grpo", "method": "full", "micro_batch": 2, "grad_accum": 4, "num_generations": 8,
     "generation_batch": 16, "vllm": "server"},
    {"task": "rloo", "method": "lora", "grad_accum": 2, "num_generations": 2, "vllm": "none"},
]  # fmt: skip

FIELDS = ("task", "beta", "precompute_ref", "num_generations", "completion_len", "generation_batch")
FIELDS += ("num_iterations", "vllm", "vllm_memory", "vllm_sleep")


def _round_trip(fmt, read, values):
    plan = parse_plan(**values)
    _, reading = emitted_and_read_back(fmt, MODEL, plan, lambda doc: read(doc, Stack()))
    return plan, reading


@pytest.mark.parametrize("values", POST_PLANS, ids=lambda v: v["task"])
def test_trl_round_trip(values):
    """A TRL config memdoc writes (accepted by TRL's own script parser) reads back as the plan's post-training
    fields and task (KTO, reward and RLOO files carry a key only their class has, at TRL's default)."""
    plan, reading = _round_trip("trl", read_trainer_args, values)
    assert reading.plan.get("task") == values["task"]
    for name in FIELDS[1:]:
        if name in values:
            want = getattr(plan, name)
            assert reading.plan[name] == (want.value if name == "vllm" else want), name


def test_trl_sft_file_has_no_task():
    reading = read_trainer_args(load_doc("sft.yaml", "model_name_or_path: x\nmax_length: 512\n"), Stack())
    assert "task" not in reading.plan


def test_task_flag_overrides_the_file(tmp_path):
    """A GRPOConfig-shaped file billed with `--task rloo`: the flag wins, and the beta left out of the file is
    RLOO's own default (the plan keeps None), not GRPO's."""
    path = tmp_path / "rloo.yaml"
    path.write_text("model_name_or_path: Qwen/Qwen2.5-0.5B\nnum_generations: 4\nmax_completion_length: 64\n")
    result = invoke("bill", "--config", path, "--gpu", "h100", "--task", "rloo", "--accum", "4", "--json")
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)["plan"]
    assert (plan["task"], plan["beta"], plan["num_generations"], plan["completion_len"]) == ("rloo", None, 4, 64)


def test_grpo_file_without_prompt_length_says_so():
    doc = load_doc("grpo.yaml", "model_name_or_path: x\nnum_generations: 8\n")
    reading = read_trainer_args(doc, Stack())
    assert "seq_len" not in reading.plan  # not SFTConfig's max_length default: GRPO has no such key
    assert any(n.key.startswith("max_prompt_length") for n in reading.not_billed)


def test_bad_beta_is_one_line():
    with pytest.raises(ConfigError, match=r"t.yaml:2: beta: must be 0 or more"):
        read_trainer_args(load_doc("t.yaml", "model_name_or_path: x\nbeta: -1\n"), Stack())


AXOLOTL_PLANS = [p for p in POST_PLANS if p["task"] != "rloo"] + [
    {"task": "orpo", "method": "lora"},
    {"task": "simpo", "method": "lora", "beta": 2.0},
]


@pytest.mark.parametrize("values", AXOLOTL_PLANS, ids=lambda v: v["task"])
def test_axolotl_round_trip(values):
    plan, reading = _round_trip("axolotl", read_axolotl, values)
    assert reading.plan["task"] == values["task"]
    for name in FIELDS[1:]:
        if name in values:
            want = getattr(plan, name)
            assert reading.plan[name] == (want.value if name == "vllm" else want), name


def test_axolotl_keys_and_defaults_are_axolotl_s():
    pytest.importorskip("axolotl")
    from axolotl.utils.schemas.enums import RLType
    from axolotl.utils.schemas.vllm import VllmConfig

    assert set(rl_keys.AXOLOTL_RL) <= {t.value for t in RLType}
    assert VllmConfig.model_fields["gpu_memory_utilization"].default == rl_keys.AXOLOTL_VLLM_MEMORY
    doc = load_doc("ax.yaml", "base_model: x\nsequence_len: 512\nrl: ebft\n")
    reading = read_axolotl(doc, Stack())
    assert "task" not in reading.plan and any(n.key == "rl" for n in reading.not_billed)


def test_axolotl_grpo_without_a_vllm_mode_keeps_trl_s_fraction():
    """Axolotl hands `vllm.gpu_memory_utilization` (its default 0.9) to TRL only under `trl.vllm_mode: colocate`
    written out (`axolotl/core/trainers/grpo/__init__.py`); without it GRPOConfig's own 0.3 holds."""
    axolotl = pytest.importorskip("axolotl")
    from pathlib import Path

    source = (Path(axolotl.__file__).parent / "core/trainers/grpo/__init__.py").read_text(encoding="utf-8")
    guard = source.index('if trl.vllm_mode == "colocate":')
    assert guard < source.index('grpo_args_kwargs["vllm_gpu_memory_utilization"]')
    text = "base_model: x\nsequence_len: 512\nrl: grpo\ntrl:\n  use_vllm: true\n"
    loose = read_axolotl(load_doc("ax.yaml", text), Stack())
    assert loose.plan["vllm"] == "colocate" and "vllm_memory" not in loose.plan
    explicit = read_axolotl(load_doc("ax.yaml", text + "  vllm_mode: colocate\n"), Stack())
    assert explicit.plan["vllm_memory"] == rl_keys.AXOLOTL_VLLM_MEMORY


LF_PLANS = [
    {"task": "dpo", "method": "lora", "beta": 0.3},
    {"task": "orpo", "method": "lora", "beta": 0.2},
    {"task": "simpo", "method": "full"},
    {"task": "kto", "method": "lora"},
    {"task": "rm", "method": "lora"},
    {"task": "ppo", "method": "lora", "completion_len": 128},
]


@pytest.mark.parametrize("values", LF_PLANS, ids=lambda v: v["task"])
def test_llamafactory_round_trip(values):
    plan, reading = _round_trip("llamafactory", read_llamafactory, values)
    assert reading.plan["task"] == values["task"]
    if "beta" in values:
        assert reading.plan["beta"] == values["beta"]
    if values["task"] == "ppo":
        assert reading.plan["completion_len"] == 128 and reading.plan["num_generations"] == 1


def test_llamafactory_defaults_are_its_own():
    """`pref_beta` absent: LLaMA-Factory's dataclass default; `pref_loss` absent: sigmoid (DPO)."""
    pytest.importorskip("llamafactory")
    from llamafactory.hparams.finetuning_args import RLHFArguments

    defaults = {f.name: f.default for f in dataclasses.fields(RLHFArguments)}
    assert defaults["pref_beta"] == lf_post.LF_PREF_BETA and defaults["pref_loss"] == "sigmoid"
    doc = load_doc("lf.yaml", "model_name_or_path: x\nstage: dpo\n")
    assert detect_format(doc) == "llamafactory"
    reading = read_llamafactory(doc, Stack())
    assert (reading.plan["task"], reading.plan["beta"]) == ("dpo", defaults["pref_beta"])
    import typing

    losses = typing.get_args(typing.get_type_hints(RLHFArguments)["pref_loss"])
    assert set(lf_post.LF_DPO_LOSSES) == set(losses)
