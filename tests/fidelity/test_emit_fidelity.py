"""`memdoc emit` configs a trainer runs as is (issue 14): the model id as given, each trainer's precision
and chat template, the card's dtype, LoRA targets that exist, the defaults a trainer's user expects.

Every expectation is read back through the trainer's own parser (TRL's SFT parser, LLaMA-Factory's
get_train_args, Axolotl's validate_config, transformers' HfArgumentParser / Trainer) or taken from the
trainer's own registry (LLaMA-Factory's DEFAULT_TEMPLATE, Axolotl's ChatTemplate enum).
"""

import os
import re

import pytest
import yaml
from typer.testing import CliRunner

from memdoc.cli import app

os.environ.setdefault("DISABLE_VERSION_CHECK", "1")  # LLaMA-Factory pins transformers; its parser is what we test
runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def emit_config(tmp_path, *args, fmt="trl") -> dict:
    path = tmp_path / f"{fmt}.yaml"
    result = run("emit", *args, "--format", fmt, "-o", path)
    assert result.exit_code == 0, result.output
    return yaml.safe_load(path.read_text())


def trl_args(tmp_path, *args):
    make_parser = pytest.importorskip("trl.scripts.sft").make_parser
    cfg = emit_config(tmp_path, *args, fmt="trl")
    cfg["use_cpu"] = True
    path = tmp_path / "cpu-trl.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return make_parser().parse_args_and_config(["--config", str(path)])


def llamafactory_args(tmp_path, monkeypatch, *args, bf16_gpu=True):
    parser = pytest.importorskip("llamafactory.hparams.parser")
    cfg = emit_config(tmp_path, *args, fmt="llamafactory")
    cfg["use_cpu"] = True
    monkeypatch.setattr(parser, "is_torch_bf16_gpu_available", lambda: bf16_gpu)
    return cfg, parser.get_train_args(cfg)


# --------------------------------------------------------------------------------------------
# 1. the id the user asked for is the id the trainer loads


VARIANTS = [
    ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B"),
    ("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B"),
    ("mistralai/Mistral-7B-Instruct-v0.3", "mistralai/Mistral-7B-v0.3"),
    ("google/gemma-2-9b-it", "google/gemma-2-9b"),
    ("meta-llama/Llama-2-7b-chat-hf", "meta-llama/Llama-2-7b-hf"),
    ("EleutherAI/pythia-1b-deduped", "EleutherAI/pythia-1b"),
]


@pytest.mark.parametrize("variant,base", VARIANTS)
def test_variant_id_is_loaded_as_given(tmp_path, monkeypatch, variant, base):
    script_args, training_args, model_args, _ = trl_args(tmp_path, variant, "--method", "lora")
    assert model_args.model_name_or_path == variant
    assert emit_config(tmp_path, variant, "--method", "lora", fmt="axolotl")["base_model"] == variant
    _, (lf_model_args, *_rest) = llamafactory_args(tmp_path, monkeypatch, variant, "--method", "lora")
    assert lf_model_args.model_name_or_path == variant


@pytest.mark.parametrize("variant,base", VARIANTS)
def test_variant_billed_with_base_shapes_and_says_so(variant, base):
    import json

    def bill(model):
        result = run("bill", model, "--gpu", "80", "--method", "lora", "--json", "--no-ladder")
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    mine, theirs = bill(variant), bill(base)
    assert (
        mine["per_gpu"] == theirs["per_gpu"] and mine["model"]["params"] == theirs["model"]["params"]
    )  # same shapes, same bytes
    assert mine["model"]["id"] == variant and any(base in note for note in mine["notes"])
    result = run("emit", variant, "--method", "lora")
    assert result.exit_code == 0 and f"config of {base}" in result.stderr
    assert f"config of {base}" in result.stdout  # the note is in the file's header too


def test_alias_to_another_repository_is_said():
    """Meta's original Llama-2 repository has no transformers checkpoint: the config loads the -hf twin and says so."""
    result = run("emit", "meta-llama/Llama-2-7b")
    assert result.exit_code == 0
    assert yaml.safe_load(result.stdout)["model_name_or_path"] == "meta-llama/Llama-2-7b-hf"
    assert "meta-llama/Llama-2-7b is catalogued as meta-llama/Llama-2-7b-hf" in result.stderr


def test_qwen25_instruct_context_is_its_own():
    """Qwen2.5-7B-Instruct's config.json says 32768 positions (the base says 131072): --seq beyond it is refused."""
    assert run("bill", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "141", "--seq", "65536").exit_code == 2
    assert run("bill", "Qwen/Qwen2.5-7B", "--gpu", "141", "--seq", "65536", "--method", "qlora").exit_code in (0, 3)


def test_variant_of_unknown_base_is_still_unknown():
    """Mistral-7B-Instruct-v0.2 has no v0.2 base in the catalog (and its config differs from v0.1): not guessed."""
    result = run("emit", "mistralai/Mistral-7B-Instruct-v0.2")
    assert result.exit_code == 2 and "unknown model" in result.output


# --------------------------------------------------------------------------------------------
# 2. LLaMA-Factory LoRA precision and chat templates


@pytest.mark.parametrize("method", ["lora", "qlora"])
def test_llamafactory_lora_keeps_adapters_fp32(tmp_path, monkeypatch, method):
    """bf16: true without pure_bf16: LLaMA-Factory then upcasts the trainable adapters to fp32 (model/adapter.py)."""
    cfg, (_, _, training_args, finetuning_args, _) = llamafactory_args(
        tmp_path, monkeypatch, "meta-llama/Llama-3.1-8B", "--method", method
    )
    assert "pure_bf16" not in cfg
    assert training_args.bf16 is True and finetuning_args.pure_bf16 is False


def test_llamafactory_full_bf16_is_pure(tmp_path, monkeypatch):
    _, (_, _, training_args, finetuning_args, _) = llamafactory_args(tmp_path, monkeypatch, "meta-llama/Llama-3.2-1B")
    assert finetuning_args.pure_bf16 is True


def _llamafactory_registry():
    constants = pytest.importorskip("llamafactory.extras.constants")
    out = {}
    for name, sources in constants.SUPPORTED_MODELS.items():
        hf_id = sources.get(constants.DownloadSource.DEFAULT)
        if hf_id and constants.DEFAULT_TEMPLATE.get(name):
            out[hf_id] = constants.DEFAULT_TEMPLATE[name]
    return out


def test_chat_templates_agree_with_llamafactory_registry():
    """For every model LLaMA-Factory registers with a template, memdoc picks the same one (or none)."""
    from memdoc.core.trainers.templates import chat_template

    registry = _llamafactory_registry()
    checked = 0
    for hf_id, expected in registry.items():
        template = chat_template(hf_id)
        if template is not None:
            assert template.llamafactory == expected, hf_id
            checked += 1
    assert checked >= 40  # Llama 2/3, Qwen2/2.5/3, Mistral/Mixtral, Gemma 1/2, Phi-3, Falcon, DeepSeek-V2


def test_chat_template_names_exist_in_both_registries():
    """LLaMA-Factory's registry is read from its source (importing llamafactory.data needs torchaudio)."""
    import importlib.util
    from pathlib import Path

    from axolotl.utils.schemas.enums import ChatTemplate

    from memdoc.core.trainers import templates

    source = Path(importlib.util.find_spec("llamafactory").origin).parent / "data" / "template.py"
    registered = set(re.findall(r'register_template\(\s*name="([^"]+)"', source.read_text()))
    assert {"llama3", "qwen", "mistral", "gemma"} <= registered
    for _, template in templates.TABLE:
        assert template.llamafactory in registered
        assert template.axolotl in {c.value for c in ChatTemplate}


@pytest.mark.parametrize(
    "model,lf,axolotl",
    [
        ("meta-llama/Llama-3.1-8B-Instruct", "llama3", "llama3"),
        ("Qwen/Qwen2.5-7B-Instruct", "qwen", "qwen_25"),
        ("mistralai/Mistral-7B-Instruct-v0.3", "mistral", "mistral_v2v3"),
        ("google/gemma-2-9b-it", "gemma2", "gemma"),
        ("microsoft/Phi-3-mini-4k-instruct", "phi", "phi_3"),
    ],
)
def test_emitted_template_reaches_the_trainers(tmp_path, monkeypatch, model, lf, axolotl):
    _, (_, data_args, *_rest) = llamafactory_args(tmp_path, monkeypatch, model, "--method", "lora")
    assert data_args.template == lf
    config_mod = pytest.importorskip("axolotl.utils.config")
    from axolotl.utils.dict import DictDefault

    cfg = emit_config(tmp_path, model, "--method", "lora", fmt="axolotl")
    validated = config_mod.validate_config(DictDefault(cfg))
    assert validated.chat_template == axolotl
    assert validated.datasets[0]["type"] == "chat_template"


def test_unknown_family_template_is_a_placeholder(tmp_path):
    path = tmp_path / "lf.yaml"
    assert run("emit", "EleutherAI/pythia-1b", "--format", "llamafactory", "-o", path).exit_code == 0
    lines = path.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("template:"))
    # issue 27: comments are lines of their own, before their key (never after a value that could be folded)
    assert lines[at] == "template: default" and lines[at - 1].startswith("# PLACEHOLDER")


# --------------------------------------------------------------------------------------------
# 3. precision by card: no bf16 below compute capability 8.0


def test_bf16_flag_agrees_with_the_datasheets():
    """compute capability ≥ 8.0 ⇔ the datasheet lists a BF16 tensor rate (bf16_tflops, an independent column)."""
    from memdoc.core.model.gpu import load_gpu_table, resolve_gpu

    for gpu in load_gpu_table():
        if gpu.vendor == "nvidia":
            assert gpu.compute_capability is not None, gpu.id
            assert gpu.supports_bf16 is (gpu.bf16_tflops is not None), gpu.id
    assert [g.id for g in load_gpu_table() if not g.supports_bf16] == ["t4", "v100-16", "v100-32"]
    assert resolve_gpu("24").supports_bf16  # a size-only card is taken to be a current one


@pytest.mark.parametrize("gpu", ["t4", "v100-32"])
@pytest.mark.parametrize("method,precision", [("full", "amp-fp16"), ("lora", "fp16"), ("qlora", "fp16")])
def test_card_without_bf16_bills_and_emits_fp16(tmp_path, gpu, method, precision):
    import json

    from transformers import HfArgumentParser, TrainingArguments

    model = "meta-llama/Llama-3.2-1B"
    result = run("bill", model, "--gpu", gpu, "--method", method, "--json", "--no-ladder")
    assert result.exit_code in (0, 3), result.output
    billed = json.loads(result.stdout)
    assert billed["plan"]["precision"] == precision
    explicit = json.loads(
        run("bill", model, "--gpu", gpu, "--method", method, "--precision", precision, "--json", "--no-ladder").stdout
    )
    assert billed["per_gpu"] == explicit["per_gpu"]
    assert any("has no bf16 (compute capability" in note for note in billed["notes"])
    cfg = emit_config(tmp_path, model, "--gpu", gpu, "--method", method, fmt="hf")
    cfg["use_cpu"] = True
    (tmp_path / "cpu.yaml").write_text(yaml.safe_dump(cfg))
    (args,) = HfArgumentParser(TrainingArguments).parse_yaml_file(str(tmp_path / "cpu.yaml"))
    assert args.fp16 is True and args.bf16 is False


def test_card_without_bf16_llamafactory_and_axolotl(tmp_path, monkeypatch):
    cfg, (model_args, _, training_args, finetuning_args, _) = llamafactory_args(
        tmp_path, monkeypatch, "meta-llama/Llama-3.2-1B", "--gpu", "t4", "--method", "lora", bf16_gpu=False
    )
    assert training_args.fp16 is True and training_args.bf16 is False and finetuning_args.pure_bf16 is False
    ax = emit_config(tmp_path, "meta-llama/Llama-3.2-1B", "--gpu", "t4", "--method", "qlora", fmt="axolotl")
    assert ax["fp16"] is True and ax["bf16"] is False


@pytest.mark.parametrize("precision", ["bf16", "amp-bf16"])
def test_explicit_bf16_on_a_t4_is_refused(precision):
    result = run("emit", "meta-llama/Llama-3.2-1B", "--gpu", "t4", "--precision", precision)
    assert result.exit_code == 2
    assert "NVIDIA Tesla T4 has no bf16" in result.output and "amp-fp16" in result.output


def test_ladder_never_proposes_bf16_on_a_t4():
    import json

    result = run("emit", "meta-llama/Llama-3.1-8B", "--gpu", "t4", "--fit", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["fits"] and "bf16" not in data["plan"]["precision"]


def test_plan_search_never_proposes_bf16_on_a_v100():
    import json

    result = run("plan", "meta-llama/Llama-3.2-1B", "--gpu", "v100-16", "--json")
    assert result.exit_code == 0, result.output
    plans = json.loads(result.stdout)["plans"]
    assert plans and all("bf16" not in p["plan"]["precision"] for p in plans)


# --------------------------------------------------------------------------------------------
# 4. every LoRA target names a module


@pytest.mark.parametrize(
    "targets,bad,suggestion",
    [("q_prj,v_proj", "q_prj", "q_proj"), ("q_proj,vproj", "vproj", "v_proj"), ("q_proj,lm_heads", "lm_heads", None)],
)
def test_every_lora_target_must_match(targets, bad, suggestion):
    result = run("emit", "meta-llama/Llama-2-7b-hf", "--method", "lora", "--lora-targets", targets)
    assert result.exit_code == 2
    line = result.output.strip().splitlines()[-1]
    assert line.startswith(f"Error: --lora-targets {bad} matches no linear module of meta-llama/Llama-2-7b-hf")
    assert (f"did you mean {suggestion}?" in line) if suggestion else "did you mean" not in line


def test_lora_targets_that_all_match_reach_peft(tmp_path):
    """The targets accepted are the ones peft wraps in a real (tiny) Llama: nothing silently dropped."""
    pytest.importorskip("peft")
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    _, _, model_args, _ = trl_args(
        tmp_path, "meta-llama/Llama-2-7b-hf", "--method", "lora", "--lora-targets", "q_proj,self_attn.k_proj,down_proj"
    )
    targets = model_args.lora_target_modules
    tiny = LlamaForCausalLM(
        LlamaConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
            vocab_size=64,
        )
    )
    peft_model = get_peft_model(tiny, LoraConfig(r=4, target_modules=targets))
    wrapped = {name.rsplit(".", 1)[-1] for name, module in peft_model.named_modules() if hasattr(module, "lora_A")}
    assert wrapped == {"q_proj", "k_proj", "down_proj"}


# --------------------------------------------------------------------------------------------
# 5. what a trainer's user expects


def _hf_args(tmp_path, *args):
    from transformers import HfArgumentParser, TrainingArguments

    cfg = emit_config(tmp_path, *args, fmt="hf")
    cfg["use_cpu"] = True
    (tmp_path / "cpu.yaml").write_text(yaml.safe_dump(cfg))
    (parsed,) = HfArgumentParser(TrainingArguments).parse_yaml_file(str(tmp_path / "cpu.yaml"))
    return parsed


def test_warmup_and_cosine_schedule(tmp_path, monkeypatch):
    """10 % linear warmup then cosine decay, as the trainers compute it from the emitted keys."""
    hf = _hf_args(tmp_path, "meta-llama/Llama-3.2-1B", "--method", "lora")
    assert hf.lr_scheduler_type.value == "cosine" and hf.get_warmup_steps(1000) == 100
    _, training_args, _, _ = trl_args(tmp_path, "meta-llama/Llama-3.2-1B", "--method", "lora")
    assert training_args.lr_scheduler_type.value == "cosine" and training_args.get_warmup_steps(1000) == 100
    _, (_, _, lf_args, _, _) = llamafactory_args(tmp_path, monkeypatch, "meta-llama/Llama-3.2-1B", "--method", "lora")
    assert lf_args.lr_scheduler_type.value == "cosine" and lf_args.get_warmup_steps(1000) == 100
    config_mod = pytest.importorskip("axolotl.utils.config")
    from axolotl.utils.dict import DictDefault

    ax = config_mod.validate_config(
        DictDefault(emit_config(tmp_path, "meta-llama/Llama-3.2-1B", "--method", "lora", fmt="axolotl"))
    )
    assert ax.lr_scheduler == "cosine" and ax.warmup_ratio == 0.1


def test_checkpointing_is_non_reentrant_everywhere(tmp_path, monkeypatch):
    hf = _hf_args(tmp_path, "meta-llama/Llama-3.2-1B", "--checkpointing", "full")
    assert hf.activation_checkpointing is True
    assert hf.activation_checkpointing_kwargs == {"use_reentrant": False}
    _, trl, _, _ = trl_args(tmp_path, "meta-llama/Llama-3.2-1B", "--checkpointing", "full")
    assert trl.activation_checkpointing is True and trl.activation_checkpointing_kwargs == {"use_reentrant": False}
    _, (model_args, _, _, _, _) = llamafactory_args(
        tmp_path, monkeypatch, "meta-llama/Llama-3.2-1B", "--checkpointing", "full"
    )
    assert model_args.disable_gradient_checkpointing is False and model_args.use_reentrant_gc is False
    ax = emit_config(tmp_path, "meta-llama/Llama-3.2-1B", "--checkpointing", "full", fmt="axolotl")
    assert ax["gradient_checkpointing"] is True and ax["gradient_checkpointing_kwargs"] == {"use_reentrant": False}


@pytest.mark.parametrize(
    "optimizer,cls,kwargs",
    [
        ("adamw", "AdamW", {"fused": None}),
        ("adamw-fused", "AdamW", {"fused": True}),
        ("sgd", "SGD", {"momentum": 0.9}),
        ("adafactor", "Adafactor", {"relative_step": False}),
    ],
)
def test_optimizer_is_the_planned_one(tmp_path, optimizer, cls, kwargs):
    """The optimizer class and options transformers' Trainer builds from the emitted `optim` keys."""
    from transformers import Trainer

    args = _hf_args(tmp_path, "meta-llama/Llama-3.2-1B", "--optimizer", optimizer, "--precision", "amp-bf16")
    optimizer_cls, optimizer_kwargs = Trainer.get_optimizer_cls_and_kwargs(args)
    assert optimizer_cls.__name__ == cls
    for key, value in kwargs.items():
        assert optimizer_kwargs.get(key) == value, (key, optimizer_kwargs)


def test_given_dataset_keeps_its_format_comment(tmp_path):
    for fmt, key in [("trl", "dataset_name"), ("llamafactory", "dataset"), ("axolotl", "datasets")]:
        path = tmp_path / f"{fmt}.yaml"
        assert (
            run("emit", "meta-llama/Llama-3.2-1B", "--format", fmt, "--dataset", "me/data", "-o", path).exit_code == 0
        )
        lines = path.read_text().splitlines()
        at = next(i for i, line in enumerate(lines) if line.startswith(f"{key}:"))
        line = lines[at - 1]  # issue 27: the comment is the line before its key, never after the value
        assert line.startswith("# ") and "PLACEHOLDER" not in line and "#" not in lines[at]
        assert ("messages" in line) or ("alpaca" in line and "sharegpt" in line), line


# --------------------------------------------------------------------------------------------
# 6. end to end: the HF Trainer format trains


@pytest.mark.parametrize("method", ["full", "lora"])
def test_hf_trainer_trains_two_steps_on_cpu(tmp_path, method):
    """A tiny Llama saved in the test, the emitted TrainingArguments YAML (plus use_cpu, as on a CPU box),
    the model loaded and wrapped the way the emitted notes say, and 2 optimizer steps of transformers' Trainer."""
    import json

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, HfArgumentParser, LlamaConfig, Trainer, TrainingArguments

    model_dir = tmp_path / "tiny-llama"
    LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=128,
        max_position_embeddings=64,
    ).save_pretrained(model_dir)
    out = tmp_path / "args.yaml"
    result = run(
        "emit",
        model_dir,
        "--format",
        "hf",
        "--method",
        method,
        "--checkpointing",
        "full",
        "--optimizer",
        "adamw-fused",
        "--seq",
        32,
        "--batch",
        2,
        "--accum",
        2,
        "--output-dir",
        tmp_path / "run",
        "-o",
        out,
        "--json",
    )
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)["plan"]
    cfg = yaml.safe_load(out.read_text())
    cfg["use_cpu"] = True
    (tmp_path / "cpu.yaml").write_text(yaml.safe_dump(cfg))
    (args,) = HfArgumentParser(TrainingArguments).parse_yaml_file(str(tmp_path / "cpu.yaml"))

    torch.manual_seed(0)
    dtype = {"bf16": torch.bfloat16, "amp-bf16": torch.float32}[plan["precision"]]
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir), dtype=dtype)  # random weights
    if method == "lora":
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(
            model,
            LoraConfig(
                r=plan["lora_rank"],
                lora_alpha=2 * plan["lora_rank"],
                lora_dropout=0.05,
                target_modules=plan["lora_targets"],
                task_type="CAUSAL_LM",
            ),
        )
    rows = 2 * 2 * 2  # micro-batch 2 × accumulation 2 × 2 steps, one epoch
    data = [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, 128, (rows, plan["seq_len"]))]
    trainer = Trainer(model=model, args=args, train_dataset=data)
    before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    trainer.train()
    assert trainer.state.global_step == 2
    losses = [log["loss"] for log in trainer.state.log_history if "loss" in log] or [
        trainer.state.log_history[-1]["train_loss"]
    ]
    assert all(torch.isfinite(torch.tensor(losses)))
    changed = [n for n, p in model.named_parameters() if p.requires_grad and not torch.equal(p.detach(), before[n])]
    assert changed  # the optimizer stepped
    assert (
        type(trainer.optimizer.optimizer if hasattr(trainer.optimizer, "optimizer") else trainer.optimizer).__name__
        == "AdamW"
    )
    assert trainer.args.activation_checkpointing and trainer.args.activation_checkpointing_kwargs == {
        "use_reentrant": False
    }


@pytest.mark.slow
def test_trl_sft_script_trains_the_emitted_config(tmp_path):
    """TRL's own `trl sft` entry point (trl.scripts.sft.main) on the emitted YAML, a tiny Llama and word-level
    tokenizer saved in the test and a local text dataset: 2 LoRA steps, the adapter saved."""
    import json
    import random

    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    sft = pytest.importorskip("trl.scripts.sft")
    words = ["<pad>", "<eos>", "<unk>", *(f"w{i}" for i in range(100))]
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    model_dir = tmp_path / "tiny-llama"
    PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    ).save_pretrained(model_dir)
    LlamaForCausalLM(
        LlamaConfig(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            vocab_size=128,
            max_position_embeddings=64,
            pad_token_id=0,
            eos_token_id=1,
            bos_token_id=1,
        )
    ).save_pretrained(model_dir)
    data = tmp_path / "data"
    data.mkdir()
    rng = random.Random(0)
    (data / "train.jsonl").write_text(
        "".join(json.dumps({"text": " ".join(f"w{rng.randrange(100)}" for _ in range(40))}) + "\n" for _ in range(8))
    )
    cfg = emit_config(
        tmp_path,
        model_dir,
        "--method",
        "lora",
        "--seq",
        32,
        "--batch",
        2,
        "--accum",
        2,
        "--checkpointing",
        "full",
        "--dataset",
        data,
        "--output-dir",
        tmp_path / "run",
        fmt="trl",
    )
    cfg["use_cpu"] = True
    (tmp_path / "cpu.yaml").write_text(yaml.safe_dump(cfg))
    sft.main(*sft.make_parser().parse_args_and_config(["--config", str(tmp_path / "cpu.yaml")]))
    state = json.loads((tmp_path / "run" / "checkpoint-2" / "trainer_state.json").read_text())
    assert state["global_step"] == 2  # 8 rows / (micro-batch 2 × accumulation 2)
    assert (tmp_path / "run" / "adapter_model.safetensors").exists()
