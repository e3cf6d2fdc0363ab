"""The emitted TRL DPO and GRPO configs train (issue 23 item 4): each is parsed by TRL's own script parser
(`trl/scripts/{dpo,grpo}.py` `make_parser`) and drives 2 real optimizer steps of TRL's `DPOTrainer` /
`GRPOTrainer` on the CPU, with a tiny random Llama and a word-level tokenizer built here (no Hub).

The test only adds what a CPU run needs (`use_cpu`, `max_steps: 2`, no saving) and swaps the catalog model for
the tiny one; every other key is the emitted file's. The LoRA config reaches DPO through TRL's own
`get_peft_config(model_args)`, as `trl dpo` does; GRPO generates with transformers (`use_vllm: false`) and is
scored by a trivial reward function, since the emitted `reward_funcs` is a placeholder the user replaces.
"""

import pytest
import yaml
from conftest import invoke

torch = pytest.importorskip("torch")
trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")

WORDS = [f"w{i}" for i in range(60)]


def _tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[PAD]": 0, "<s>": 1, "</s>": 2, **{w: i + 3 for i, w in enumerate(WORDS)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[PAD]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="[PAD]")


def _tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=len(WORDS) + 3,
        max_position_embeddings=128,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    return LlamaForCausalLM(config)


def _sentence(i: int, n: int) -> str:
    return " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(n))


def _emitted_args(tmp_path, script: str, *args):
    """The emitted config for `script`, parsed by TRL's own parser with the CPU additions."""
    path = tmp_path / f"{script}.yaml"
    result = invoke(
        "emit", "Qwen/Qwen2.5-0.5B", "--gpu", "h100", "--format", "trl", "--task", script, "--precision", "fp32",
        "--output-dir", tmp_path / "run", "-o", path, *args,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    cfg = yaml.safe_load(path.read_text())
    cfg.update(use_cpu=True, max_steps=2, save_strategy="no", logging_steps=1, disable_tqdm=True)
    cpu = tmp_path / f"cpu-{script}.yaml"
    cpu.write_text(yaml.safe_dump(cfg))
    module = __import__(f"trl.scripts.{script}", fromlist=["make_parser"])
    return cfg, module.make_parser().parse_args_and_config(["--config", str(cpu)])


def _trained(trainer, model) -> None:
    before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    trainer.train()
    assert trainer.state.global_step == 2
    losses = [log["loss"] for log in trainer.state.log_history if "loss" in log]
    assert len(losses) == 2 and all(torch.isfinite(torch.tensor(losses)))
    changed = [n for n, p in model.named_parameters() if p.requires_grad and not torch.equal(p.detach(), before[n])]
    assert changed  # the optimizer stepped


@pytest.mark.slow
def test_emitted_trl_dpo_config_trains_two_steps(tmp_path):
    """LoRA DPO (the reference is the base with the adapter disabled), batch 2, the emitted beta and max_length."""
    cfg, (_, training_args, model_args, _) = _emitted_args(
        tmp_path, "dpo", "--method", "lora", "--batch", "2", "--seq", "32", "--beta", "0.2", "--lora-targets",
        "q_proj,v_proj",
    )  # fmt: skip
    assert (training_args.beta, training_args.max_length, model_args.use_peft) == (0.2, 32, True)
    rows = [
        {"prompt": _sentence(i, 6), "chosen": " " + _sentence(i + 1, 5), "rejected": " " + _sentence(i + 2, 7)}
        for i in range(8)
    ]
    model = _tiny_llama()
    trainer = trl.DPOTrainer(
        model=model,
        args=training_args,
        train_dataset=datasets.Dataset.from_list(rows),
        processing_class=_tokenizer(),
        peft_config=trl.get_peft_config(model_args),
    )
    assert trainer.ref_model is None  # the adapter-disabled base is the reference, as billed for LoRA
    _trained(trainer, trainer.model)


@pytest.mark.slow
def test_emitted_trl_grpo_config_trains_two_steps(tmp_path):
    """Full GRPO: 2 completions of 8 tokens per prompt, generated with transformers, micro-batch 2."""
    cfg, (script_args, training_args, _, _) = _emitted_args(
        tmp_path, "grpo", "--method", "full", "--batch", "2", "--seq", "16", "--generations", "2",
        "--completion-len", "8",
    )  # fmt: skip
    assert script_args.reward_funcs and cfg["use_vllm"] is False
    assert (training_args.num_generations, training_args.max_completion_length) == (2, 8)
    assert training_args.generation_batch_size == 2 and training_args.beta == 0.0

    def reward_len(completions, **kwargs):  # the user's reward function; any will do here
        return [float(len(c)) for c in completions]

    model = _tiny_llama()
    trainer = trl.GRPOTrainer(
        model=model,
        reward_funcs=reward_len,
        args=training_args,
        train_dataset=datasets.Dataset.from_list([{"prompt": _sentence(i, 6)} for i in range(8)]),
        processing_class=_tokenizer(),
    )
    assert trainer.ref_model is None  # GRPO's default beta 0: no reference model is loaded
    _trained(trainer, model)
