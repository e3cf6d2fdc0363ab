"""`memdoc prescribe` end to end: symptoms, logs from the real OOM corpus, quantification."""

import json

import pytest
import yaml
from conftest import FIXTURES, SYMPTOM_IDS
from conftest import invoke as run

CORPUS = yaml.safe_load((FIXTURES / "oom-corpus.yaml").read_text())


def test_list_has_the_ten_symptoms():
    ids = {s["id"] for s in json.loads(run("prescribe", "--list", "--json").output)}
    assert set(SYMPTOM_IDS) <= ids


def test_quantified_startup_oom_on_24gb():
    out = json.loads(
        run(
            "prescribe",
            "--symptom",
            "startup-oom",
            "meta-llama/Llama-3.1-8B",
            "--gpu",
            "24",
            "--method",
            "full",
            "--json",
        ).output
    )
    assert out["bill"]["fits"] is False
    by_id = {p["id"]: p for p in out["prescriptions"]}
    lora = next(p for p in out["prescriptions"] if p["saves_bytes"] and p["fits_alone"])
    # LoRA on an 8B model removes full-size gradients and AdamW states: tens of GiB.
    assert lora["saves_bytes"] > 40 * 1024**3
    assert all(p["saves_bytes"] is None or p["saves_bytes"] >= 0 for p in by_id.values())


def test_checkpointing_saves_nothing_when_adam_dominates():
    # Full fine-tuning of an 8B model with foreach AdamW peaks at the optimizer step (weights + grads +
    # AdamW states + foreach buffer): fewer activations change nothing there, smaller optimizer states do.
    out = json.loads(
        run(
            "prescribe",
            "--symptom",
            "mid-run-oom",
            "meta-llama/Llama-3.1-8B",
            "--gpu",
            "80",
            "--optimizer",
            "adamw-foreach",
            "--json",
        ).output
    )
    saves = {p["id"]: p["saves_bytes"] for p in out["prescriptions"]}
    assert saves["midrun-checkpointing"] == 0
    # paged 8-bit AdamW: two bf16 states (4 B/param) become two uint8 states + absmax (≈ 2.03 B/param)
    assert saves["midrun-paged-8bit-adam"] > 1.9 * 8_030_261_248


def test_log_from_stdin_extracts_figures():
    # A real current-format message from the corpus (pytorch/pytorch#16417), inside a backward traceback.
    entry = next(e for e in CORPUS if e["expected"]["format"] == "current")
    text = (
        'Traceback (most recent call last):\n  File "train.py", line 9, in <module>\n    loss.backward()\n'
        '  File "/usr/lib/python3/site-packages/torch/_tensor.py", line 581, in backward\n'
        "    torch.autograd.backward(\n" + entry["text"] + "\n"
    )
    out = json.loads(run("prescribe", "--log", "-", "--json", input=text).output)
    assert out["oom"]["requested"] == 22 * 1024**2  # "Tried to allocate 22.00 MiB"
    assert out["symptom"] in {"mid-run-oom", "startup-oom", "long-sample-oom", "inference-oom"}


def test_log_without_oom_is_a_clear_error(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("epoch 1 loss 2.3\n")
    result = run("prescribe", "--log", str(log))
    assert result.exit_code == 2 and "no CUDA/HIP out-of-memory message" in result.output


def test_unknown_symptom_suggests():
    result = run("prescribe", "--symptom", "midrun-oom")
    assert result.exit_code == 2 and "mid-run-oom" in result.output


@pytest.mark.slow
def test_dataset_p99_length_becomes_the_cap(tmp_path):
    pytest.importorskip("tokenizers")
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    words = [f"w{i}" for i in range(50)]
    vocab = {"[UNK]": 0, "<s>": 1, **{w: i + 2 for i, w in enumerate(words)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", unk_token="[UNK]").save_pretrained(tmp_path / "tok")
    data = tmp_path / "train.jsonl"  # samples of 1..100 words: 2..101 tokens with the BOS
    data.write_text(
        "".join(json.dumps({"text": " ".join(words[i % 50] for i in range(n))}) + "\n" for n in range(1, 101))
    )
    args = ["--symptom", "long-sample-oom", "Qwen/Qwen2.5-0.5B", "--method", "lora", "--seq", "4096"]
    res = run("prescribe", *args, "--dataset", str(data), "--tokenizer", str(tmp_path / "tok"), "--json")
    assert res.exit_code == 0, res.output
    cap = next(p for p in json.loads(res.stdout)["prescriptions"] if p["id"] == "long-cap-length")
    # nearest-rank p99 of 2..101 tokens: the ⌈0.99 × 100⌉ = 99th smallest, 100 tokens
    assert cap["how"]["trl"] == {"max_length": 100} and cap["how"]["axolotl"] == {"sequence_len": 100}


def test_dataset_flags_without_a_dataset_are_one_line_errors():
    res = run("prescribe", "--symptom", "long-sample-oom", "--tokenizer", "x")
    assert res.exit_code != 0 and "--tokenizer and --text-field go with --dataset" in res.output
