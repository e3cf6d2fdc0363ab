"""`memdoc emit` and recipes/: every recipe, in every format, accepted by the trainer's own parser.

Validators (installed by `make test` from requirements/validators*.txt):
  hf            transformers.HfArgumentParser(TrainingArguments).parse_yaml_file
  trl           trl.scripts.sft.make_parser().parse_args_and_config(["--config", p])
  axolotl       axolotl.utils.config.validate_config(DictDefault(cfg))
  llamafactory  llamafactory.hparams.parser.get_train_args(cfg)
  ds_config     deepspeed DeepSpeedZeroConfig(**cfg["zero_optimization"]) (+ HF's own DeepSpeed config load)
  fsdp.yaml     accelerate load_config_from_file
The copies handed to the parsers only add `use_cpu: true` (bf16 raises on a CPU box); some parsers
drop unknown keys silently, so the keys are also checked against each format's known key set.
"""

import json
import os
from pathlib import Path

import pytest
import yaml
from conftest import ROOT
from conftest import invoke as run

from memdoc.core.billing.bill import compute_bill
from memdoc.core.model.gpu import resolve_gpu
from memdoc.core.model.plan import parse_plan
from memdoc.core.model.plan_checks import check_plan_against_model
from memdoc.core.trainers.emit import EmitContext, emit
from memdoc.resolve.models import resolve_model
from memdoc.resolve.recipes import load_recipe

RECIPES = sorted((ROOT / "recipes").glob("*.yaml"))
FORMATS = ("trl", "hf", "axolotl", "llamafactory")

os.environ.setdefault("DISABLE_VERSION_CHECK", "1")  # LLaMA-Factory pins transformers<=5.6; its parser is what we test


@pytest.fixture(scope="module")
def emitted(tmp_path_factory):
    """Emit every recipe in every format once: {(recipe, fmt): config path}."""
    out = {}
    base = tmp_path_factory.mktemp("emit")
    for recipe in RECIPES:
        for fmt in FORMATS:
            path = base / recipe.stem / fmt / "config.yaml"
            result = run("emit", "--recipe", recipe, "--format", fmt, "-o", path)
            assert result.exit_code == 0, (recipe.name, fmt, result.output)
            out[(recipe.stem, fmt)] = path
    return out


CASES = [(r.stem, f) for r in RECIPES for f in FORMATS]


def _cpu_copy(path: Path) -> tuple[Path, dict]:
    cfg = yaml.safe_load(path.read_text())
    cfg["use_cpu"] = True
    copy = path.with_name("cpu-" + path.name)
    copy.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return copy, cfg


# --------------------------------------------------------------------------------------------
# recipes


def test_at_least_ten_recipes():
    assert len(RECIPES) >= 10


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.stem)
def test_recipe_fits_with_five_percent_headroom(recipe):
    data = load_recipe(recipe)
    model = resolve_model(data.model)
    plan = parse_plan(**data.plan)
    check_plan_against_model(plan, hidden_size=model.hidden_size, max_positions=model.max_positions, model_id=model.id)
    gpu = resolve_gpu(data.gpu)
    bill = compute_bill(model, plan, gpu)
    assert bill.fits
    assert bill.headroom_bytes / gpu.memory_bytes >= 0.05, (
        f"{recipe.name}: {bill.headroom_bytes / gpu.memory_bytes:.1%} headroom"
    )


def test_recipe_bill_cli_agrees():
    recipe = ROOT / "recipes" / "llama2-7b-lora-24gb.yaml"
    result = run("bill", "--recipe", recipe, "--json", "--no-ladder", "--check")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["fits"] is True


def test_recipes_readme_lists_every_recipe():
    """The table is generated (scripts/recipes_table.py); its numbers follow the bill, so only coverage is checked."""
    readme = (ROOT / "recipes" / "README.md").read_text()
    for recipe in RECIPES:
        assert f"[{recipe.stem}]({recipe.name})" in readme, (
            f"run python scripts/recipes_table.py ({recipe.name} missing)"
        )


# --------------------------------------------------------------------------------------------
# every file starts with the command and the peak; placeholders are marked


@pytest.mark.parametrize("recipe,fmt", CASES)
def test_header_and_placeholders(emitted, recipe, fmt):
    text = emitted[(recipe, fmt)].read_text()
    first, second = text.splitlines()[:2]
    assert first.startswith("# Made by memdoc: memdoc emit ")
    assert f"--format {fmt}" in first
    assert second.startswith("# Billed peak per GPU: ") and "GiB" in second
    assert "# PLACEHOLDER" in text and "CHANGE_ME_output_dir" in text
    yaml.safe_load(text)  # the comments keep it valid YAML


# --------------------------------------------------------------------------------------------
# the trainers' own parsers


@pytest.mark.parametrize("recipe", [r.stem for r in RECIPES])
def test_hf_training_arguments_parse(emitted, recipe):
    from transformers import HfArgumentParser, TrainingArguments

    path = emitted[(recipe, "hf")]
    copy, cfg = _cpu_copy(path)
    (args,) = HfArgumentParser(TrainingArguments).parse_yaml_file(str(copy))
    plan = parse_plan(**load_recipe(ROOT / "recipes" / f"{recipe}.yaml").plan)
    assert args.per_device_train_batch_size == plan.micro_batch
    assert args.gradient_accumulation_steps == plan.grad_accum
    assert isinstance(args.learning_rate, float)
    if cfg.get("deepspeed"):
        assert getattr(args, "hf_deepspeed_config", None) is not None  # HF loaded and processed the DeepSpeed JSON


@pytest.mark.parametrize("recipe", [r.stem for r in RECIPES])
def test_trl_sft_parser(emitted, recipe):
    make_parser = pytest.importorskip("trl.scripts.sft").make_parser
    copy, _ = _cpu_copy(emitted[(recipe, "trl")])
    script_args, training_args, model_args, dataset_args = make_parser().parse_args_and_config(["--config", str(copy)])
    plan = parse_plan(**load_recipe(ROOT / "recipes" / f"{recipe}.yaml").plan)
    assert training_args.max_length == plan.seq_len
    assert model_args.use_peft is plan.is_peft
    assert model_args.load_in_4bit is (plan.method.value == "qlora")
    if plan.is_peft:
        assert model_args.lora_r == plan.lora_rank


@pytest.mark.parametrize("recipe", [r.stem for r in RECIPES])
def test_axolotl_validate_config(emitted, recipe):
    config_mod = pytest.importorskip("axolotl.utils.config")
    from axolotl.utils.dict import DictDefault
    from axolotl.utils.schemas.config import AxolotlInputConfig
    from axolotl.utils.schemas.fsdp import FSDPConfig

    cfg = yaml.safe_load(emitted[(recipe, "axolotl")].read_text())
    known = set(AxolotlInputConfig.model_fields)
    if cfg.get("plugins"):  # plugin keys (Liger) live in the plugin's own schema, merged by prepare_plugins
        from axolotl.integrations.liger.args import LigerArgs

        config_mod.prepare_plugins(DictDefault(cfg))
        known |= set(LigerArgs.model_fields)
    unknown = set(cfg) - known
    assert not unknown, f"Axolotl would silently drop {unknown}"
    if "fsdp_config" in cfg:
        assert not set(cfg["fsdp_config"]) - set(FSDPConfig.model_fields)
    validated = config_mod.validate_config(DictDefault(cfg))
    plan = parse_plan(**load_recipe(ROOT / "recipes" / f"{recipe}.yaml").plan)
    assert validated.sequence_len == plan.seq_len
    assert validated.micro_batch_size == plan.micro_batch
    for key in cfg:  # nothing was dropped on the way through the schema
        assert key in validated, key


@pytest.mark.parametrize("recipe", [r.stem for r in RECIPES])
def test_llamafactory_get_train_args(emitted, recipe, monkeypatch):
    parser = pytest.importorskip("llamafactory.hparams.parser")
    from llamafactory.hparams import TrainingArguments as LFTrainingArguments
    from transformers.training_args import ParallelMode

    cfg = yaml.safe_load(emitted[(recipe, "llamafactory")].read_text())
    cfg["use_cpu"] = True
    # Device checks, not config checks: this CPU box has no bf16 GPU, and DeepSpeed configs are only
    # accepted under a distributed launch (the printed FORCE_TORCHRUN=1 command provides it).
    monkeypatch.setattr(parser, "is_torch_bf16_gpu_available", lambda: True)
    if cfg.get("deepspeed"):
        monkeypatch.setattr(LFTrainingArguments, "parallel_mode", property(lambda self: ParallelMode.DISTRIBUTED))
    model_args, data_args, training_args, finetuning_args, _ = parser.get_train_args(cfg)
    plan = parse_plan(**load_recipe(ROOT / "recipes" / f"{recipe}.yaml").plan)
    assert data_args.cutoff_len == plan.seq_len
    assert finetuning_args.finetuning_type == ("full" if plan.method.value == "full" else "lora")
    assert (model_args.quantization_bit == 4) is (plan.method.value == "qlora")
    assert model_args.disable_gradient_checkpointing is (plan.checkpointing.value == "none")


def _side_files(emitted, name):
    return sorted({p.parent / name for p in emitted.values() if (p.parent / name).exists()})


def test_deepspeed_zero_config(emitted):
    pytest.importorskip("deepspeed")
    from deepspeed.runtime import constants
    from deepspeed.runtime.zero.config import ZERO_OPTIMIZATION, DeepSpeedZeroConfig

    known = {v for k, v in vars(constants).items() if k.isupper() and isinstance(v, str)} | {
        ZERO_OPTIMIZATION,
        "_comment",
    }
    files = _side_files(emitted, "ds_config.json")
    assert files, "no recipe uses DeepSpeed"
    for path in files:
        cfg = json.loads(path.read_text())
        assert not set(cfg) - known, (path, set(cfg) - known)
        zero = DeepSpeedZeroConfig(**cfg["zero_optimization"])
        assert zero.stage in (1, 2, 3)
        _deepspeed_full_config(cfg)


def _deepspeed_full_config(cfg):
    """The whole JSON through DeepSpeedConfig, with the 'auto' values filled as the HF Trainer does (1 GPU)."""
    from deepspeed.runtime.config import DeepSpeedConfig

    filled = json.loads(json.dumps(cfg))
    filled.update(
        train_batch_size=2, train_micro_batch_size_per_gpu=1, gradient_accumulation_steps=2, gradient_clipping=1.0
    )
    filled["bf16"]["enabled"], filled["fp16"]["enabled"] = True, False
    if "optimizer" in filled:
        filled["optimizer"]["params"] = {"lr": 1e-5, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0}
    config = DeepSpeedConfig(filled)
    assert config.zero_optimization_stage == cfg["zero_optimization"]["stage"]


def test_accelerate_fsdp_config(emitted):
    import inspect

    from accelerate.commands.config import cluster
    from accelerate.commands.config.config_args import load_config_from_file

    known = set(__import__("re").findall(r'fsdp_config\["(\w+)"\]', inspect.getsource(cluster)))
    files = _side_files(emitted, "fsdp.yaml")
    assert files, "no recipe uses FSDP"
    for path in files:
        config = load_config_from_file(str(path))
        assert config.distributed_type.value == "FSDP"
        assert not set(config.fsdp_config) - known, set(config.fsdp_config) - known
        assert config.num_processes >= 2


# --------------------------------------------------------------------------------------------
# mapping details


def _ctx(**plan):
    model = resolve_model(plan.pop("model", "meta-llama/Llama-2-7b-hf"))
    p = parse_plan(**plan)
    bill = compute_bill(model, p, None)
    return EmitContext(model_id=model.id, plan=p, peak_allocated=bill.peak_allocated, process_total=bill.process_total)


def test_optimizer_names_exist_in_transformers():
    from transformers.training_args import OptimizerNames

    from memdoc.core.model.plan import Optimizer
    from memdoc.core.trainers.hf.keys import KEYS

    names = {o.value for o in OptimizerNames}
    row = KEYS.row("optimizer")
    assert {row.write(o.value) for o in Optimizer} | set(row.aliases) <= names


@pytest.mark.parametrize(
    "precision,dtype,bf16", [("bf16", "bfloat16", True), ("amp-bf16", "float32", True), ("fp32", "float32", False)]
)
def test_pure_vs_amp_precision(precision, dtype, bf16):
    emitted = emit("trl", _ctx(precision=precision))
    assert emitted.config["dtype"] == dtype and emitted.config["bf16"] is bf16
    lf = emit("llamafactory", _ctx(precision=precision))
    assert lf.config.get("pure_bf16", False) is (precision == "bf16")


def test_qlora_and_all_linear_mapping():
    ctx = _ctx(method="qlora", lora_targets="all-linear", lora_rank=32, optimizer="paged-adamw-8bit")
    trl = emit("trl", ctx).config
    assert trl["lora_target_modules"] == "all-linear" and trl["load_in_4bit"] and trl["bnb_4bit_quant_type"] == "nf4"
    assert (
        trl["use_bnb_nested_quant"]
        and trl["lora_r"] == 32
        and trl["lora_alpha"] == 64
        and trl["optim"] == "paged_adamw_8bit"
    )
    ax = emit("axolotl", ctx).config
    assert ax["adapter"] == "qlora" and ax["lora_target_linear"] is True and ax["load_in_4bit"]
    assert emit("llamafactory", ctx).config["lora_target"] == "all"


def test_offload_nvme_zero3_side_file():
    ctx = _ctx(gpus=4, shard="zero3", offload="optimizer+params", offload_to="nvme")
    out = emit("hf", ctx)
    zero = out.side_files[0].data["zero_optimization"]
    assert (
        zero["stage"] == 3
        and zero["offload_optimizer"]["device"] == "nvme"
        and zero["offload_param"]["device"] == "nvme"
    )
    assert any("nvme_path" in n for n in out.notes)
    assert out.launch.startswith("deepspeed --num_gpus 4 ")


@pytest.mark.parametrize("fmt", FORMATS)
def test_unmappable_knobs_become_notes(fmt):
    ctx = _ctx(checkpointing="selective", precision="fp16")
    out = emit(fmt, ctx)
    assert any("selective" in n for n in out.notes)
    from memdoc.core.trainers.emit import render_main

    header = [line for line in render_main(ctx, out).splitlines() if line.startswith("#")]
    assert any("selective" in line for line in header)


def test_notes_printed_on_stderr():
    result = run("emit", "meta-llama/Llama-2-7b-hf", "--checkpointing", "selective", "--format", "hf")
    assert result.exit_code == 0
    assert "selective" in result.stderr and "TrainingArguments has no LoRA" not in result.stderr
    assert result.stdout.startswith("# Made by memdoc")


def test_floats_written_as_yaml_floats():
    from memdoc.core.trainers.text import dump_yaml  # the serializer of emitted files (moved from base.py, issue 27)

    text = dump_yaml({"learning_rate": 1e-5, "x": 1e-4})
    assert "e-" in text and isinstance(yaml.safe_load(text)["learning_rate"], float)
    assert yaml.safe_load(text) == {"learning_rate": 1e-5, "x": 1e-4}


def test_dataset_and_output_dir_fill_placeholders(tmp_path):
    path = tmp_path / "sft.yaml"
    result = run(
        "emit", "--recipe", RECIPES[0], "--format", "trl", "-o", path, "--dataset", "me/data", "--output-dir", "runs/x"
    )
    assert result.exit_code == 0, result.output
    cfg = yaml.safe_load(path.read_text())
    assert cfg["dataset_name"] == "me/data" and cfg["output_dir"] == "runs/x"
    assert "CHANGE_ME_dataset" not in path.read_text()


# --------------------------------------------------------------------------------------------
# files: --force, atomic writes, side files, --fit, --json, errors


def test_never_overwrites_without_force(tmp_path):
    path = tmp_path / "sft.yaml"
    path.write_text("mine\n")
    result = run("emit", "--recipe", RECIPES[0], "--format", "trl", "-o", path)
    assert result.exit_code == 2 and "already exist" in result.output and "--force" in result.output
    assert path.read_text() == "mine\n"
    result = run("emit", "--recipe", RECIPES[0], "--format", "trl", "-o", path, "--force")
    assert result.exit_code == 0 and path.read_text().startswith("# Made by memdoc")


def test_existing_side_file_also_protected(tmp_path):
    recipe = ROOT / "recipes" / "llama3.1-8b-full-zero3-8x80gb.yaml"
    (tmp_path / "ds_config.json").write_text("{}")
    result = run("emit", "--recipe", recipe, "--format", "hf", "-o", tmp_path / "args.yaml")
    assert result.exit_code == 2 and "ds_config.json" in result.output
    assert not (tmp_path / "args.yaml").exists()


def test_atomic_write_leaves_no_temp_and_old_file_on_failure(tmp_path, monkeypatch):
    from memdoc.output import files as emit_cmd

    path = tmp_path / "sft.yaml"
    assert run("emit", "--recipe", RECIPES[0], "--format", "trl", "-o", path).exit_code == 0
    assert [p.name for p in tmp_path.iterdir()] == ["sft.yaml"]
    before = path.read_text()

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(emit_cmd.os, "replace", boom)
    result = run("emit", "--recipe", RECIPES[0], "--format", "trl", "-o", path, "--force", "--dataset", "x")
    assert result.exit_code != 0
    assert path.read_text() == before  # the old file is intact, no half-written file
    assert [p.name for p in tmp_path.iterdir()] == ["sft.yaml"]


def test_side_file_next_to_output_and_launch(tmp_path):
    recipe = ROOT / "recipes" / "llama3.1-70b-qlora-fsdp-2x24gb.yaml"
    out = tmp_path / "cfg" / "sft.yaml"
    result = run("emit", "--recipe", recipe, "--format", "trl", "-o", out)
    assert result.exit_code == 0, result.output
    assert (out.parent / "fsdp.yaml").exists()
    assert (
        f"accelerate launch --config_file {out.parent / 'fsdp.yaml'} -m trl.scripts.sft --config {out}" in result.stdout
    )


@pytest.mark.parametrize(
    "fmt,launch",
    [
        ("trl", "trl sft --config"),
        ("llamafactory", "llamafactory-cli train"),
        ("axolotl", "axolotl train"),
        ("hf", "python YOUR_TRAIN_SCRIPT.py"),
    ],
)
def test_launch_commands(fmt, launch):
    result = run("emit", "--recipe", RECIPES[0], "--format", fmt, "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["launch"].startswith(launch)


def test_fit_uses_the_ladder():
    result = run("emit", "meta-llama/Llama-2-7b-hf", "--gpu", "24", "--fit", "--format", "trl", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["fits"] is True and data["plan"] != parse_plan().to_dict()
    cfg = yaml.safe_load(data["files"][0]["content"])
    assert cfg.get("use_peft") or cfg.get("gradient_checkpointing")


@pytest.mark.parametrize(
    "args",
    [
        ["emit", "meta-llama/Llama-2-7x", "--format", "trl"],
        ["emit", "meta-llama/Llama-2-7b-hf", "--format", "nope"],
        ["emit", "meta-llama/Llama-2-7b-hf", "--batch", "0"],
        ["emit", "--recipe", "/nonexistent/recipe.yaml"],
        ["emit", "meta-llama/Llama-2-7b-hf", "--gpu", "nope-gpu", "--fit"],
    ],
)
def test_bad_input_exits_2(args):
    result = run(*args)
    assert result.exit_code == 2, result.output


def test_output_is_a_directory(tmp_path):
    """Issue 27 changed this answer: `-o DIR` (an existing directory) writes the format's default file inside it,
    where it used to be refused."""
    result = run("emit", "--recipe", RECIPES[0], "-o", tmp_path)
    assert result.exit_code == 0, result.output
    assert [p.name for p in tmp_path.iterdir()] == ["sft.yaml"] and f"Wrote {tmp_path / 'sft.yaml'}" in result.stdout


def test_lora_under_amp_loads_the_frozen_base_in_the_compute_dtype():
    # the bill (and the tracer) hold a LoRA base in bf16 under amp-bf16: no fp32 copy of frozen weights
    trl = emit("trl", _ctx(method="lora", precision="amp-bf16"))
    assert trl.config["dtype"] == "bfloat16" and trl.config["bf16"] is True
    hf = emit("hf", _ctx(method="lora", precision="amp-bf16"))
    assert "torch.bfloat16" in " ".join(hf.notes) + str(hf.config)


def test_pure_bf16_lora_says_the_trainer_autocasts():
    notes = " ".join(emit("trl", _ctx(method="lora", precision="bf16")).notes)
    assert "autocast" in notes and "--precision amp-bf16" in notes


def test_every_format_has_one_emitter_and_bill_starts_without_them():
    """The registry's formats are the trainers that emit, each with its own `emit`; importing the CLI for `bill`
    loads no reader or writer (the formats' names and key tables are all the --format choice needs)."""
    import subprocess
    import sys

    from memdoc.core.trainers.registry import FORMATS, TRAINERS

    assert FORMATS == ("trl", "hf", "axolotl", "llamafactory")
    assert all(callable(t.emit) for t in TRAINERS if t.name in FORMATS)
    code = (
        "import sys, memdoc.cli; print(sorted(m for m in sys.modules if m.startswith('memdoc.core.trainers.') "
        "and m.rsplit('.', 1)[-1] in ('read', 'write', 'post', 'post_read', 'base', 'emit')))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"


# --------------------------------------------------------------------------------------------
# issue 29: --checkpoint-every and --activation-offload as trainers' keys

LONG = ("emit", "meta-llama/Llama-3.1-8B", "--gpu", "h100", "--method", "lora", "--seq", "32768")
LONG_FLAGS = ("--checkpointing", "full", "--checkpoint-every", "2", "--activation-offload")


def _emit_long(tmp_path, fmt: str) -> dict:
    path = tmp_path / fmt / "config.yaml"
    result = run(*LONG, *LONG_FLAGS, "--format", fmt, "-o", path)
    assert result.exit_code == 0, result.output
    return path


@pytest.mark.parametrize("fmt", ["hf", "trl"])
def test_every_n_layers_and_offload_reach_transformers(tmp_path, fmt):
    """transformers 5.24 reads both from `activation_checkpointing_kwargs` (the emitted `gradient_checkpointing_
    kwargs` is its alias) and `Trainer.__init__` pops them before `checkpoint` sees the rest."""
    copy, _ = _cpu_copy(_emit_long(tmp_path, fmt))
    if fmt == "hf":
        from transformers import HfArgumentParser, TrainingArguments

        (args,) = HfArgumentParser(TrainingArguments).parse_yaml_file(str(copy))
    else:
        make_parser = pytest.importorskip("trl.scripts.sft").make_parser
        _, args, _, _ = make_parser().parse_args_and_config(["--config", str(copy)])
    assert args.activation_checkpointing is True
    assert args.activation_checkpointing_kwargs == {"use_reentrant": False, "every_n_layers": 2, "offload": True}


def test_axolotl_writes_its_own_offload_key(tmp_path):
    config_mod = pytest.importorskip("axolotl.utils.config")
    from axolotl.utils.dict import DictDefault

    cfg = yaml.safe_load(_emit_long(tmp_path, "axolotl").read_text())
    validated = config_mod.validate_config(DictDefault(cfg))
    assert validated.activation_offloading == "hidden_states"  # checkpoint-input offload (schemas/config.py)
    assert validated.gradient_checkpointing_kwargs == {"use_reentrant": False, "every_n_layers": 2}


def test_llamafactory_refuses_activation_offload_naming_the_formats_that_have_it(tmp_path):
    result = run(*LONG, *LONG_FLAGS, "--format", "llamafactory", "-o", tmp_path / "c.yaml")
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert "LLaMA-Factory has no key" in result.output and "--format trl or hf" in result.output
    assert not (tmp_path / "c.yaml").exists()
