"""`memdoc emit --task …` (issue 23 item 4): post-training configs read back by the trainers' own parsers.

Validators (the installed packages):
  trl           trl/scripts/<task>.py `make_parser().parse_args_and_config(["--config", p])` (TRL 1.16), whose
                dataclasses are (ScriptArguments, <Task>Config, ModelConfig, DatasetMixtureConfig)
  axolotl       axolotl.utils.config.validate_config (0.19), `AxolotlInputConfig` / `TRLConfig` / `VllmConfig` fields
  llamafactory  llamafactory.hparams.parser.get_train_args (0.9.5)
Some parsers drop unknown keys silently, so every emitted key is also checked against the parser's own fields.
The two CPU training runs (DPO, GRPO) are in test_emit_post_train.py.
"""

import dataclasses
import importlib
import os

import pytest
import yaml
from conftest import invoke

os.environ.setdefault("DISABLE_VERSION_CHECK", "1")  # LLaMA-Factory pins transformers/trl; its parser is what we test

MODEL = "Qwen/Qwen2.5-0.5B"


def emit(tmp_path, fmt, *args) -> dict:
    path = tmp_path / f"{fmt}.yaml"
    result = invoke("emit", MODEL, "--gpu", "h100", "--format", fmt, *args, "-o", path, "--force")
    assert result.exit_code == 0, result.output
    return yaml.safe_load(path.read_text())


# --------------------------------------------------------------------------------------------
# TRL

TRL_CASES = [
    ("dpo", "DPOConfig", ["--method", "lora", "--beta", "0.25"]),
    ("dpo", "DPOConfig", ["--method", "full", "--precompute-ref", "--checkpointing", "full"]),
    ("kto", "KTOConfig", ["--method", "qlora"]),
    ("reward", "RewardConfig", ["--task", "rm", "--method", "lora"]),
    ("grpo", "GRPOConfig", ["--method", "lora", "--accum", "8"]),
    ("grpo", "GRPOConfig", ["--batch", "4", "--accum", "4", "--generations", "16", "--generation-batch", "32",
                            "--completion-len", "1024", "--iterations", "2", "--vllm", "colocate",
                            "--vllm-memory", "0.4", "--vllm-sleep", "--beta", "0.04"]),
    ("grpo", "GRPOConfig", ["--accum", "8", "--vllm", "server", "--shard", "zero3", "--gpus", "4", "--batch", "2",
                            "--generations", "8"]),
    ("rloo", "RLOOConfig", ["--accum", "2", "--generations", "2", "--loss", "fused"]),
]  # fmt: skip


@pytest.fixture(autouse=True)
def _no_deepspeed_config_left_behind():
    """TrainingArguments naming a ZeRO-3 config set transformers' process-wide HfDeepSpeedConfig reference
    (`transformers/integrations/deepspeed.py`); left set by an earlier test, LLaMA-Factory's parser sees ZeRO-3, and
    left set by these, later tests build their models under ZeRO-3."""
    from transformers.integrations.deepspeed import unset_hf_deepspeed_config

    unset_hf_deepspeed_config()
    yield
    unset_hf_deepspeed_config()


def _trl_parse(tmp_path, script: str, cfg: dict):
    module = pytest.importorskip(f"trl.scripts.{script}")
    cfg = {**cfg, "use_cpu": True}
    path = tmp_path / "cpu.yaml"
    path.write_text(yaml.safe_dump(cfg))
    parser = module.make_parser()
    known = {f.name for cls in parser.dataclass_types for f in dataclasses.fields(cls)}
    assert not set(cfg) - known, f"keys TRL's {script} parser does not have: {set(cfg) - known}"
    return parser.parse_args_and_config(["--config", str(path)])


@pytest.mark.parametrize(("script", "config_class", "args"), TRL_CASES)
def test_trl_post_training_parser(tmp_path, script, config_class, args):
    task = [] if "--task" in args else ["--task", script]
    cfg = emit(tmp_path, "trl", *task, *args)
    script_args, training_args, model_args, _ = _trl_parse(tmp_path, script, cfg)
    assert type(training_args).__name__ == config_class
    result = invoke("emit", MODEL, "--gpu", "h100", "--format", "trl", *task, *args, "--json")
    plan = __import__("json").loads(result.stdout)["plan"]
    assert result.exit_code == 0, result.output
    text = invoke("emit", MODEL, "--gpu", "h100", "--format", "trl", *task, *args).stdout
    assert f"trl {script} --config" in text or f"-m trl.scripts.{script} --config" in text
    if script in ("grpo", "rloo"):
        assert training_args.max_completion_length == plan["completion_len"]
        assert training_args.num_generations == plan["num_generations"]
        if plan["generation_batch"] is None:  # TRL's default: its own effective batch (one CPU process here)
            assert "generation_batch_size" not in cfg
            assert training_args.generation_batch_size == plan["micro_batch"] * plan["grad_accum"]
        else:
            assert training_args.generation_batch_size == plan["generation_batch"]
        assert training_args.num_iterations == plan["num_iterations"]
        assert training_args.use_vllm is (plan["vllm"] != "none")
        if plan["vllm"] != "none":
            assert training_args.vllm_mode == plan["vllm"]
        if plan["vllm"] == "colocate":
            assert training_args.vllm_gpu_memory_utilization == plan["vllm_memory"]
            assert training_args.vllm_enable_sleep_mode is plan["vllm_sleep"]
        assert script_args.reward_funcs  # a placeholder the user replaces, in a form the script loads
        assert training_args.use_liger_kernel is (plan["loss"] == "fused")
    else:
        assert training_args.max_length == plan["seq_len"]
    if script in ("dpo", "kto"):
        assert training_args.precompute_ref_log_probs is plan["precompute_ref"]
    expected_beta = {"dpo": 0.1, "kto": 0.1, "grpo": 0.0, "rloo": 0.05}  # TRL 1.16's defaults, by hand
    if script in expected_beta:
        asked = args[args.index("--beta") + 1] if "--beta" in args else None
        assert training_args.beta == (float(asked) if asked else expected_beta[script])
    assert model_args.use_peft is (plan["method"] != "full")
    assert training_args.gradient_checkpointing is (plan["checkpointing"] != "none")


def test_trl_beta_defaults_are_trl_s_own():
    """The betas written when none is asked are TRL 1.16's dataclass defaults (read from the installed TRL)."""
    trl = pytest.importorskip("trl")
    from trl.experimental.kto import KTOConfig

    defaults = {
        c.__name__: {f.name: f.default for f in dataclasses.fields(c)}["beta"]
        for c in (trl.DPOConfig, KTOConfig, trl.GRPOConfig, trl.RLOOConfig)
    }
    assert defaults == {"DPOConfig": 0.1, "KTOConfig": 0.1, "GRPOConfig": 0.0, "RLOOConfig": 0.05}


def test_trl_reward_funcs_placeholder_is_one_the_script_registers():
    """trl/scripts/grpo.py `main` loads names from its registry or dotted paths; the placeholder is in the registry."""
    import inspect

    source = inspect.getsource(importlib.import_module("trl.scripts.grpo").main)
    from memdoc.core.trainers.trl.post import REWARD_FUNCS_PLACEHOLDER

    for name in REWARD_FUNCS_PLACEHOLDER:
        assert f'"{name}": {name}' in source


def test_trl_default_file_name_follows_the_script(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    result = invoke("emit", MODEL, "--gpu", "h100", "--format", "trl", "--task", "rm", "-o", out)
    assert result.exit_code == 0, result.output
    assert (out / "reward.yaml").exists()


# --------------------------------------------------------------------------------------------
# Axolotl

AXOLOTL_CASES = [
    ("dpo", ["--method", "lora", "--precompute-ref"]),
    ("kto", ["--method", "lora", "--beta", "0.2"]),
    ("orpo", ["--method", "lora"]),
    ("simpo", ["--method", "full", "--beta", "2.0"]),
    ("rm", ["--method", "lora"]),
    ("grpo", ["--method", "lora", "--accum", "8", "--vllm", "colocate", "--vllm-memory", "0.5", "--vllm-sleep"]),
    ("grpo", ["--method", "lora", "--accum", "4", "--generations", "4", "--completion-len", "256"]),
]


def _axolotl_known_keys():
    from axolotl.utils.schemas.config import AxolotlInputConfig

    fields = AxolotlInputConfig.model_fields
    return set(fields) | {f.alias for f in fields.values() if f.alias}


@pytest.mark.parametrize(("task", "args"), AXOLOTL_CASES)
def test_axolotl_post_training_validate_config(tmp_path, task, args):
    config_mod = pytest.importorskip("axolotl.utils.config")
    from axolotl.utils.dict import DictDefault
    from axolotl.utils.schemas.trl import TRLConfig
    from axolotl.utils.schemas.vllm import VllmConfig

    cfg = emit(tmp_path, "axolotl", "--task", task, *args)
    unknown = set(cfg) - _axolotl_known_keys()
    assert not unknown, f"Axolotl would silently drop {unknown}"
    assert not set(cfg.get("trl", {})) - set(TRLConfig.model_fields)
    assert not set(cfg.get("vllm", {})) - set(VllmConfig.model_fields)
    validated = config_mod.validate_config(DictDefault(cfg))
    if task == "rm":
        assert validated.reward_model is True and validated.rl is None
        assert validated.num_labels == 1
        return
    assert validated.rl == task
    if "--beta" in args:
        assert validated.rl_beta == float(args[args.index("--beta") + 1])
    if task == "dpo":
        assert validated.rl_beta == 0.1 and validated.precompute_ref_log_probs is True
    if task == "grpo":
        trl_block = validated.trl
        assert trl_block.beta == 0.0 and trl_block.num_generations == int(
            args[args.index("--generations") + 1] if "--generations" in args else 8
        )
        assert trl_block.use_vllm is ("--vllm" in args)
        if "--vllm" in args:
            assert trl_block.vllm_mode == "colocate" and trl_block.vllm_enable_sleep_mode is True
            assert validated.vllm.gpu_memory_utilization == 0.5
        assert trl_block.reward_funcs


def test_axolotl_dataset_types_exist():
    """Each task's dataset `type` names a loader in Axolotl's prompt strategies (module.function), read from the
    installed sources (importing them needs colorama, which the validators' set does not install)."""
    import ast

    spec = importlib.util.find_spec("axolotl")
    if spec is None:
        pytest.skip("axolotl not installed")
    from pathlib import Path

    from memdoc.core.model.plan_post import Task
    from memdoc.core.trainers.axolotl.post import AXOLOTL_DATASET_TYPES

    root = Path(spec.origin).parent / "prompt_strategies"
    packages = {Task.DPO: "dpo", Task.SIMPO: "dpo", Task.ORPO: "orpo", Task.KTO: "kto", Task.RM: "bradley_terry"}
    for task, package in packages.items():
        module_name, _, function = AXOLOTL_DATASET_TYPES[task][0]["type"].rpartition(".")
        if package == "bradley_terry":  # `bradley_terry.<module>`: the module's `load`
            module_name, function = function, "load"
        tree = ast.parse((root / package / f"{module_name}.py").read_text())
        defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
        assert function in defined, (task, module_name, function)


# --------------------------------------------------------------------------------------------
# LLaMA-Factory

LF_CASES = [
    ("dpo", ["--method", "lora"], "dpo", "sigmoid", 0.1),
    ("orpo", ["--method", "lora", "--beta", "0.2"], "dpo", "orpo", 0.2),
    ("simpo", ["--method", "full"], "dpo", "simpo", None),
    ("kto", ["--method", "lora", "--beta", "0.3"], "kto", None, 0.3),
    ("rm", ["--method", "lora"], "rm", None, None),
    ("ppo", ["--method", "lora", "--completion-len", "256"], "ppo", None, None),
]


@pytest.mark.parametrize(("task", "args", "stage", "loss", "beta"), LF_CASES)
def test_llamafactory_post_training_get_train_args(tmp_path, monkeypatch, task, args, stage, loss, beta):
    parser = pytest.importorskip("llamafactory.hparams.parser")
    from llamafactory.hparams.parser import _TRAIN_ARGS

    cfg = emit(tmp_path, "llamafactory", "--task", task, *args)
    known = {f.name for cls in _TRAIN_ARGS for f in dataclasses.fields(cls)}
    assert not set(cfg) - known
    cfg["use_cpu"] = True
    monkeypatch.setattr(parser, "is_torch_bf16_gpu_available", lambda: True)
    _, _, _, finetuning_args, generating_args = parser.get_train_args(cfg)
    assert finetuning_args.stage == stage
    lf_default = {f.name: f.default for f in dataclasses.fields(type(finetuning_args))}
    assert finetuning_args.pref_loss == (loss or lf_default["pref_loss"])
    assert finetuning_args.pref_beta == (beta if beta is not None else lf_default["pref_beta"])
    if stage == "dpo":  # LLaMA-Factory's own rule: a reference model for sigmoid, none for ORPO/SimPO
        assert finetuning_args.use_ref_model is (loss == "sigmoid")
    if stage == "ppo":
        assert generating_args.max_new_tokens == 256
        assert finetuning_args.reward_model == "CHANGE_ME_reward_model"


# --------------------------------------------------------------------------------------------
# refusals: one line, naming a format that runs the task

REFUSED = [
    ("trl", "orpo", "axolotl"),
    ("trl", "simpo", "llamafactory"),
    ("trl", "ppo", "llamafactory"),
    ("axolotl", "rloo", "trl"),
    ("axolotl", "ppo", "llamafactory"),
    ("llamafactory", "grpo", "trl"),
    ("llamafactory", "rloo", "trl"),
    ("hf", "dpo", "trl"),
]


@pytest.mark.parametrize(("fmt", "task", "names"), REFUSED)
def test_unrunnable_task_is_one_line_naming_a_format(fmt, task, names):
    extra = ["--accum", "8"] if task in ("grpo", "rloo") else []
    result = invoke("emit", MODEL, "--gpu", "h100", "--format", fmt, "--task", task, *extra)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
    assert "--format" in result.output and names in result.output.split("use ", 1)[1]


def test_trl_has_no_ppo_or_orpo_script():
    """The refusals' reason, read from TRL 1.16: no `trl ppo`/`trl orpo` script and no PPOTrainer."""
    trl = pytest.importorskip("trl")
    for name in ("ppo", "orpo", "cpo"):
        assert importlib.util.find_spec(f"trl.scripts.{name}") is None
    assert not hasattr(trl, "PPOTrainer")
