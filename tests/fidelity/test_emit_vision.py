"""`memdoc emit` for vision-language fine-tuning (issue 26 item 6): every emitted VLM config read back through the
trainer's own parser (TRL's `trl/scripts/sft.py` `make_parser`, LLaMA-Factory's `get_train_args`, Axolotl's
`validate_config`), its keys held to the trainers' registries and defaults, and the TRL config driving 2 optimizer
steps of TRL's SFTTrainer on a tiny random LLaVA with images on the CPU.

Image-token truth comes from transformers' own Qwen2-VL `smart_resize` at the Qwen2.5-VL-7B-Instruct checkpoint's
published `preprocessor_config.json` bounds (min_pixels 3136, max_pixels 12845056, 14-px patches merged 2×2).
"""

import os

import pytest
import yaml
from conftest import invoke

os.environ.setdefault("DISABLE_VERSION_CHECK", "1")  # LLaMA-Factory pins transformers; its parser is what we test

QWEN = "Qwen/Qwen2.5-VL-7B-Instruct"
QWEN_MIN_PIXELS, QWEN_MAX_PIXELS = 3136, 12_845_056  # the checkpoint's preprocessor_config.json


def _emit(tmp_path, model, fmt, *args):
    path = tmp_path / f"{fmt}.yaml"
    result = invoke("emit", model, "--gpu", "h100", "--format", fmt, "-o", path, *args)
    assert result.exit_code == 0, result.output
    return yaml.safe_load(path.read_text())


def _qwen_image_tokens(width: int, height: int) -> int:
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize  # (no torchvision here)

    h, w = smart_resize(height, width, factor=28, min_pixels=QWEN_MIN_PIXELS, max_pixels=QWEN_MAX_PIXELS)
    return (h // 28) * (w // 28)  # one <|image_pad|> per merged 2×2 group of 14-px patches


def _trl_parse(tmp_path, cfg):
    make_parser = pytest.importorskip("trl.scripts.sft").make_parser
    cfg = {**cfg, "use_cpu": True}
    path = tmp_path / "cpu-trl.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return make_parser().parse_args_and_config(["--config", str(path)])


@pytest.mark.parametrize("size", ["1024x1024", "1280x720"])
def test_trl_max_length_holds_text_and_image_tokens(tmp_path, size):
    """TRL's vision collator truncates the processed row (image tokens included) to max_length."""
    cfg = _emit(
        tmp_path, QWEN, "trl", "--method", "lora", "--seq", "512", "--images-per-sample", "2", "--image-size", size
    )
    _, training_args, model_args, _ = _trl_parse(tmp_path, cfg)
    width, height = (int(v) for v in size.split("x"))
    assert training_args.max_length == 512 + 2 * _qwen_image_tokens(width, height)
    assert training_args.packing is False and training_args.padding_free is False  # TRL refuses both with images
    assert model_args.use_peft is True


def test_llamafactory_vlm_keys_parse(tmp_path, monkeypatch):
    parser = pytest.importorskip("llamafactory.hparams.parser")
    cfg = _emit(tmp_path, QWEN, "llamafactory", "--method", "lora", "--seq", "512", "--images-per-sample", "1")
    cfg["use_cpu"] = True
    monkeypatch.setattr(parser, "is_torch_bf16_gpu_available", lambda: True)
    model_args, data_args, _, finetuning_args, _ = parser.get_train_args(cfg)
    assert data_args.template == "qwen2_vl"
    assert data_args.cutoff_len == 512 + _qwen_image_tokens(1024, 1024)
    assert model_args.image_max_pixels == 1024 * 1024  # not LLaMA-Factory's 768×768 default, which would shrink it
    assert model_args.image_min_pixels <= model_args.image_max_pixels
    assert (finetuning_args.freeze_vision_tower, finetuning_args.freeze_multi_modal_projector) == (True, True)
    assert finetuning_args.freeze_language_model is False


def test_llamafactory_full_vlm_trains_every_part(tmp_path, monkeypatch):
    """The VLM bill trains the tower and projector in a full fine-tune; LLaMA-Factory freezes both unless told not
    to (`hparams/finetuning_args.py` defaults, read here from the dataclass)."""
    parser = pytest.importorskip("llamafactory.hparams.parser")
    from llamafactory.hparams import FinetuningArguments

    defaults = FinetuningArguments()
    assert (defaults.freeze_vision_tower, defaults.freeze_multi_modal_projector) == (True, True)
    cfg = _emit(
        tmp_path, QWEN, "llamafactory", "--method", "full", "--precision", "amp-bf16", "--images-per-sample", "1"
    )
    cfg["use_cpu"] = True
    monkeypatch.setattr(parser, "is_torch_bf16_gpu_available", lambda: True)
    _, _, _, finetuning_args, _ = parser.get_train_args(cfg)
    assert (finetuning_args.freeze_vision_tower, finetuning_args.freeze_multi_modal_projector) == (False, False)


@pytest.mark.parametrize(
    ("args", "frozen"),
    [
        (["--method", "full", "--precision", "amp-bf16", "--vision-tower", "frozen"], (True, False)),
        (["--method", "lora", "--vision-tower", "trained", "--projector", "trained"], (False, False)),
        (["--method", "lora"], (True, True)),
    ],
)
def test_llamafactory_freezes_the_parts_the_plan_freezes(tmp_path, monkeypatch, args, frozen):
    """`--vision-tower`/`--projector` frozen|trained reach LLaMA-Factory's freeze flags as its parser reads them;
    under `auto` a LoRA run keeps LLaMA-Factory's default (both frozen)."""
    parser = pytest.importorskip("llamafactory.hparams.parser")
    cfg = _emit(tmp_path, QWEN, "llamafactory", *args, "--images-per-sample", "1")
    cfg["use_cpu"] = True
    monkeypatch.setattr(parser, "is_torch_bf16_gpu_available", lambda: True)
    _, _, _, finetuning_args, _ = parser.get_train_args(cfg)
    assert (finetuning_args.freeze_vision_tower, finetuning_args.freeze_multi_modal_projector) == frozen


def test_llamafactory_vlm_types_are_its_composite_models():
    """LF_VLM_TYPES: the catalogued VLM types that LLaMA-Factory registers as composite models (read from its source,
    since importing its model package needs a GPU stack)."""
    import importlib.util
    import re
    from pathlib import Path

    from memdoc.core.model.vision.registry import VLMS
    from memdoc.core.trainers.vision import LF_VLM_TYPES

    source = Path(importlib.util.find_spec("llamafactory").origin).parent / "model" / "model_utils" / "visual.py"
    registered = set(re.findall(r'register_composite_model\(\s*model_type="([^"]+)"', source.read_text()))
    assert {"qwen2_5_vl", "gemma3"} <= registered
    assert set(LF_VLM_TYPES) == set(VLMS) & registered


def test_axolotl_multimodal_keys_validate(tmp_path):
    config_mod = pytest.importorskip("axolotl.utils.config")
    from axolotl.utils.dict import DictDefault
    from axolotl.utils.schemas.config import AxolotlInputConfig

    cfg = _emit(
        tmp_path, QWEN, "axolotl", "--method", "lora", "--seq", "512", "--images-per-sample", "1", "--image-size",
        "800x600", "--max-pixels", "401408",
    )  # fmt: skip
    assert not set(cfg) - set(AxolotlInputConfig.model_fields)
    validated = config_mod.validate_config(DictDefault(cfg))
    assert validated.processor_type == "AutoProcessor"
    assert validated.skip_prepare_dataset is True and validated.remove_unused_columns is False
    assert validated.sample_packing is False and validated.chat_template == "qwen2_vl"
    assert tuple(validated.image_size) == (800, 600)
    assert validated.processor_kwargs == {"max_pixels": 401408}


@pytest.mark.parametrize(
    "model,lf,axolotl",
    [
        (QWEN, "qwen2_vl", "qwen2_vl"),
        ("Qwen/Qwen3-VL-8B-Instruct", "qwen3_vl_nothink", "tokenizer_default"),
        ("google/gemma-3-4b-it", "gemma3", "gemma3"),
        ("meta-llama/Llama-3.2-11B-Vision-Instruct", "mllama", "llama3_2_vision"),
        ("llava-hf/llava-1.5-7b-hf", "llava", "llava"),
        ("mistral-community/pixtral-12b", "pixtral", "pixtral"),
        ("mistralai/Mistral-Small-3.1-24B-Instruct-2503", "mistral_small", "mistral_v7_tekken"),
    ],
)
def test_vlm_templates(model, lf, axolotl):
    """The registry test (test_emit_fidelity.py) holds every LLaMA-Factory name to DEFAULT_TEMPLATE; the Axolotl
    names pick its processing strategy (`axolotl/processing_strategies.py` `get_processing_strategy`)."""
    from axolotl.utils.schemas.enums import ChatTemplate

    from memdoc.core.trainers.templates import chat_template

    template = chat_template(model)
    assert (template.llamafactory, template.axolotl) == (lf, axolotl)
    assert axolotl in {c.value for c in ChatTemplate}


@pytest.mark.parametrize(
    "model,fmt,args,says",
    [
        ("HuggingFaceTB/SmolVLM-Instruct", "llamafactory", [], "no multimodal template"),
        ("llava-hf/llava-onevision-qwen2-7b-ov-hf", "llamafactory", [], "no multimodal template"),
        (QWEN, "axolotl", ["--task", "dpo"], "SFT only"),
        (QWEN, "axolotl", ["--video-frames", "8"], "images only"),
        (QWEN, "trl", ["--task", "rm"], "takes no images"),
        (QWEN, "trl", ["--packing"], "does not pack"),
    ],
)
def test_unexpressible_vlm_runs_are_one_line_errors(tmp_path, model, fmt, args, says):
    result = invoke(
        "emit", model, "--format", fmt, "--images-per-sample", "1", *args, "-o", tmp_path / "x.yaml"
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert says in result.output and "Traceback" not in result.output
    assert not (tmp_path / "x.yaml").exists()


def test_hf_keeps_the_image_columns(tmp_path):
    """The HF Trainer drops the columns its model's forward does not name (raw images) unless told not to."""
    from transformers import HfArgumentParser, TrainingArguments

    cfg = _emit(tmp_path, QWEN, "hf", "--images-per-sample", "1")
    path = tmp_path / "cpu-hf.yaml"
    path.write_text(yaml.safe_dump({**cfg, "use_cpu": True}))
    (args,) = HfArgumentParser(TrainingArguments).parse_yaml_file(str(path))
    assert args.remove_unused_columns is False
    assert "AutoModelForImageTextToText" in (tmp_path / "hf.yaml").read_text()


def test_text_model_configs_unchanged_by_vision_keys(tmp_path):
    """A text model gets none of the multimodal keys."""
    for fmt, keys in (("axolotl", {"processor_type", "image_size"}), ("llamafactory", {"freeze_vision_tower"})):
        cfg = _emit(tmp_path, "Qwen/Qwen2.5-7B", fmt)
        assert not keys & set(cfg)


# --------------------------------------------------------------------------------------------
# the emitted TRL config trains a tiny random VLM with images


def _tiny_llava():
    """A 2-layer LLaVA (CLIP tower 28 px, 14-px patches: 4 image tokens) and its processor, built without the Hub.
    LLaVA's processor needs no video processor (Qwen2.5-VL's needs torchvision, absent here)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import (
        CLIPImageProcessor,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
        PreTrainedTokenizerFast,
    )

    words = [f"w{i}" for i in range(40)]
    vocab = {"[PAD]": 0, "<s>": 1, "</s>": 2, **{w: i + 3 for i, w in enumerate(words)}, "<image>": 43}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[PAD]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="[PAD]",
        extra_special_tokens={"image_token": "<image>"},
    )  # fmt: skip
    processor = LlavaProcessor(
        image_processor=CLIPImageProcessor(size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28}),
        tokenizer=tokenizer, patch_size=14, vision_feature_select_strategy="default", image_token="<image>",
        num_additional_image_tokens=1,
        chat_template="{% for m in messages %}{% for c in m['content'] %}{% if c['type'] == 'image' %}<image> "
        "{% else %}{{ c['text'] }} {% endif %}{% endfor %}{% endfor %}",
    )  # fmt: skip
    config = LlavaConfig(
        vision_config={"model_type": "clip_vision_model", "hidden_size": 32, "intermediate_size": 64,
                       "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": 28, "patch_size": 14},
        text_config={"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                     "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": len(vocab),
                     "max_position_embeddings": 256, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2},
        image_token_index=vocab["<image>"], vision_feature_select_strategy="default",
    )  # fmt: skip
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    return LlavaForConditionalGeneration(config), processor, words


@pytest.mark.slow
def test_emitted_trl_vlm_config_trains_two_steps(tmp_path):
    """The emitted Qwen2.5-VL LoRA SFT file, parsed by `trl sft`'s parser, with only the CPU additions and the tiny
    model swapped in: TRL picks its vision collator, the emitted max_length reaches it, 2 steps change the adapters."""
    torch = pytest.importorskip("torch")
    trl = pytest.importorskip("trl")
    datasets = pytest.importorskip("datasets")
    import numpy as np
    from PIL import Image
    from trl.trainer.sft_trainer import DataCollatorForVisionLanguageModeling

    cfg = _emit(
        tmp_path, QWEN, "trl", "--method", "lora", "--precision", "fp32", "--seq", "32", "--batch", "2",
        "--images-per-sample", "1", "--image-size", "56x56", "--lora-targets", "q_proj,v_proj",
        "--output-dir", tmp_path / "run",
    )  # fmt: skip
    cfg.update(max_steps=2, save_strategy="no", logging_steps=1, disable_tqdm=True)
    _, training_args, model_args, _ = _trl_parse(tmp_path, cfg)
    model, processor, words = _tiny_llava()
    rng = np.random.RandomState(0)
    rows = [
        {
            "images": [Image.fromarray((rng.rand(40 + i, 50, 3) * 255).astype("uint8"))],
            "messages": [
                {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": " ".join(words[i : i + 4])}]},
                {"role": "assistant", "content": [{"type": "text", "text": " ".join(words[i + 4 : i + 7])}]},
            ],
        }
        for i in range(8)
    ]
    trainer = trl.SFTTrainer(
        model=model,
        args=training_args,
        train_dataset=datasets.Dataset.from_list(rows),
        processing_class=processor,
        peft_config=trl.get_peft_config(model_args),
    )
    assert isinstance(trainer.data_collator, DataCollatorForVisionLanguageModeling)
    assert trainer.data_collator.max_length == 32 + _qwen_image_tokens(56, 56)
    batch = trainer.data_collator([dict(r) for r in rows[:2]])
    assert batch["pixel_values"].shape[0] == 2 and (batch["input_ids"] == 43).sum() == 2 * 4
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    trainer.train()
    assert trainer.state.global_step == 2
    losses = [log["loss"] for log in trainer.state.log_history if "loss" in log]
    assert len(losses) == 2 and all(torch.isfinite(torch.tensor(losses)))
    named = dict(trainer.model.named_parameters())
    assert any(not torch.equal(named[n].detach(), before[n]) for n in before)
