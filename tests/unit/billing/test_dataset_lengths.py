"""`memdoc bill --dataset`: token lengths of local files against the plan.

The tokenizer is built here (a `tokenizers` WordLevel model over whitespace-separated words, a
BOS post-processor and a chat template), so every count is known by construction: a text of n
words is n + 1 tokens (BOS); a chat message is its words + 3 (<s>, the role, </s>).
"""

from __future__ import annotations

import csv
import json
import sys

import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("transformers")

from typer.testing import CliRunner  # noqa: E402

from memdoc.cli import app  # noqa: E402
from memdoc.core.model.gpu import resolve_gpu  # noqa: E402
from memdoc.core.model.plan import TrainingPlan  # noqa: E402
from memdoc.core.remedies.dataset_fit import dataset_fit, length_stats, percentile  # noqa: E402
from memdoc.resolve.models import resolve_model  # noqa: E402

WORDS = [f"w{i}" for i in range(50)]
# text samples of 1..100 words: 2..101 tokens with the BOS
WORD_COUNTS = list(range(1, 101))
MODEL = "Qwen/Qwen2.5-0.5B"


def text(n: int) -> str:
    return " ".join(WORDS[i % len(WORDS)] for i in range(n))


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, "<s>": 1, "</s>": 2, "user": 3, "assistant": 4, "system": 5}
    vocab.update({w: i + len(vocab) for i, w in enumerate(WORDS)})
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="[UNK]")
    fast.chat_template = "{% for m in messages %}<s> {{ m['role'] }} {{ m['content'] }} </s> {% endfor %}"
    path = tmp_path_factory.mktemp("tok")
    fast.save_pretrained(path)
    return path


def write(path, records, fmt):
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    elif fmt == "json":
        path.write_text(json.dumps(records))
    elif fmt == "csv":
        with open(path, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(records[0]))
            w.writeheader()
            w.writerows(records)
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(records), path)
    return path


def bill_json(*args):
    result = CliRunner().invoke(app, ["bill", MODEL, "--gpu", "8", "--json", *map(str, args)])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def run(*args):
    return CliRunner().invoke(app, ["bill", MODEL, "--gpu", "8", *map(str, args)])


@pytest.mark.parametrize("fmt", ["jsonl", "json", "parquet", "csv"])
def test_each_format_gives_the_constructed_lengths(tmp_path, tok_dir, fmt):
    if fmt == "parquet":
        pytest.importorskip("pyarrow")
    records = [{"id": i, "text": text(n)} for i, n in enumerate(WORD_COUNTS)]
    path = write(tmp_path / f"data.{fmt}", records, fmt)
    data = bill_json("--dataset", path, "--tokenizer", tok_dir, "--seq", 64)["dataset"]
    # 100 samples of 2..101 tokens; nearest rank: p50 = 50th smallest = 51, p99 = 99th = 100
    assert data["samples"] == 100 and data["skipped"] == 0 and data["text_field"] == "text"
    assert (data["max_tokens"], data["p99_tokens"], data["p50_tokens"]) == (101, 100, 51)
    # the 0.5B model fits far more than 64 tokens on 8 GiB at batch 1: --seq 64 caps it
    assert data["max_seq_that_fits"] == 64
    assert data["over"] == 101 - 64  # the samples of 65..101 tokens
    cap = next(p for p in data["prescriptions"] if p["id"] == "long-cap-length")
    assert cap["how"]["llamafactory"] == {"cutoff_len": 64} and "37 of 100 samples" in cap["action"]


def test_chat_messages_go_through_the_chat_template(tmp_path, tok_dir):
    records = [
        {"messages": [{"role": "user", "content": text(n)}, {"role": "assistant", "content": text(2 * n)}]}
        for n in (1, 5, 10)
    ]
    path = write(tmp_path / "chat.jsonl", records, "jsonl")
    data = bill_json("--dataset", path, "--tokenizer", tok_dir)["dataset"]
    # per message: <s> role words </s>; no BOS added on top of the template
    expected = sorted((n + 3) + (2 * n + 3) for n in (1, 5, 10))
    assert data["text_field"] == "messages (chat template)"
    assert (data["samples"], data["max_tokens"], data["p50_tokens"]) == (3, expected[-1], expected[1])
    assert data["over"] == 0
    # the same conversations in a CSV column (JSON strings) count the same
    rows = [{"messages": json.dumps(r["messages"])} for r in records]
    assert (
        bill_json("--dataset", write(tmp_path / "chat.csv", rows, "csv"), "--tokenizer", tok_dir)["dataset"][
            "max_tokens"
        ]
        == expected[-1]
    )


def test_sharegpt_and_prompt_completion_fields(tmp_path, tok_dir):
    share = [{"conversations": [{"from": "human", "value": text(4)}, {"from": "gpt", "value": text(6)}]}]
    data = bill_json("--dataset", write(tmp_path / "s.jsonl", share, "jsonl"), "--tokenizer", tok_dir)["dataset"]
    assert data["max_tokens"] == (4 + 3) + (6 + 3)
    pairs = [{"prompt": text(3) + " ", "completion": text(7)}, {"prompt": text(1) + " ", "completion": None}]
    data = bill_json("--dataset", write(tmp_path / "p.jsonl", pairs, "jsonl"), "--tokenizer", tok_dir)["dataset"]
    assert data["text_field"] == "prompt+completion"
    assert data["max_tokens"] == 3 + 7 + 1 and data["samples"] == 2


def test_longest_that_fits_is_where_the_bill_stops_fitting(tmp_path, tok_dir):
    """Without --seq the fit is the GPU's: the bill at that length fits, 128 tokens more does not."""
    records = [{"text": text(n)} for n in (100, 400, 30000)]
    data = bill_json("--dataset", write(tmp_path / "d.jsonl", records, "jsonl"), "--tokenizer", tok_dir, "--batch", 2)[
        "dataset"
    ]
    fits = data["max_seq_that_fits"]
    assert fits is not None and fits % 128 == 0
    # issue 25: the dataset fit is the one fit rule's: comfortable at max_seq_that_fits, at all at max_seq_fits_at_all
    assert bill_json("--batch", 2, "--seq", fits)["verdict"]["fit"] == "comfortable"
    assert bill_json("--batch", 2, "--seq", fits + 128)["verdict"]["fit"] != "comfortable"
    at_all = data["max_seq_fits_at_all"]
    assert at_all >= fits and bill_json("--batch", 2, "--seq", at_all)["fits"] is True
    assert bill_json("--batch", 2, "--seq", at_all + 128)["fits"] is False
    assert data["over"] == sum(1 for n in (100, 400, 30000) if n + 1 > fits)
    alone = data["max_seq_alone"]
    assert alone > fits and bill_json("--seq", alone)["verdict"]["fit"] == "comfortable"
    ids = [p["id"] for p in data["prescriptions"]]
    assert ids[:2] == ["long-cap-length", "per-length-micro-batch"]
    assert "long-group-by-length" in ids  # median 401 tokens < half of 30,001


def test_terminal_output_and_progress(tmp_path, tok_dir):
    path = write(tmp_path / "d.jsonl", [{"text": text(n)} for n in WORD_COUNTS], "jsonl")
    result = run("--dataset", path, "--tokenizer", tok_dir, "--seq", 64)
    assert result.exit_code == 0
    assert (
        "longest that fits comfortably (micro-batch 1)" in result.stdout
    )  # issue 25: the rule's word and "37 samples" in result.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--tokenizer", "x"], "--tokenizer and --text-field go with --dataset"),
        (["--dataset", "nope.jsonl", "--tokenizer", "x"], "does not exist"),
        (["--dataset", "data.txt", "--tokenizer", "x"], "unknown format '.txt'"),
    ],
)
def test_bad_input_is_one_line(tmp_path, args, message):
    (tmp_path / "data.txt").write_text("hi")
    args = [str(tmp_path / a) if a.endswith((".jsonl", ".txt")) else a for a in args]
    result = run(*args)
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output


def test_dataset_errors_name_the_problem(tmp_path, tok_dir):
    path = write(tmp_path / "d.jsonl", [{"body": "w1 w2"}], "jsonl")
    result = run("--dataset", path, "--tokenizer", tok_dir)
    assert result.exit_code == 2 and "no text field found (fields: body)" in result.output
    result = run("--dataset", path, "--tokenizer", tok_dir, "--text-field", "txt")
    assert result.exit_code == 2 and "--text-field 'txt' is not in the dataset" in result.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "w1"}\n{"text": \n')
    assert "bad.jsonl:2: not a JSON object" in run("--dataset", bad, "--tokenizer", tok_dir).output
    result = run("--dataset", write(tmp_path / "t.jsonl", [{"text": "w1"}], "jsonl"), "--tokenizer", tmp_path / "none")
    assert result.exit_code == 2 and "cannot load the tokenizer" in result.output


def test_chat_needs_a_chat_template(tmp_path, tok_dir):
    from transformers import AutoTokenizer

    plain = AutoTokenizer.from_pretrained(tok_dir)
    plain.chat_template = None
    plain.save_pretrained(tmp_path / "plain")
    path = write(tmp_path / "c.jsonl", [{"messages": [{"role": "user", "content": "w1"}]}], "jsonl")
    result = run("--dataset", path, "--tokenizer", tmp_path / "plain")
    assert result.exit_code == 2 and "has no chat template" in result.output


def test_parquet_without_pyarrow_names_the_package(tmp_path, monkeypatch):
    from memdoc.errors import DatasetError
    from memdoc.resolve.dataset import read_records

    path = tmp_path / "d.parquet"
    path.write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # import fails as if not installed
    with pytest.raises(DatasetError, match="needs the pyarrow package"):
        read_records(path)


# ------------------------------------------------------------------ the pure part
def test_nearest_rank_percentiles():
    counts = list(range(1, 11))  # 1..10
    assert percentile(counts, 50) == 5 and percentile(counts, 99) == 10 and percentile(counts, 10) == 1
    s = length_stats([7, 3, 3, 100])
    assert (s.samples, s.max_tokens, s.p99_tokens, s.p50_tokens) == (4, 100, 100, 3)


def test_packing_applies_when_samples_are_short():
    model = resolve_model(MODEL)
    fit = dataset_fit(
        [50] * 99 + [60], model, TrainingPlan(micro_batch=1, seq_len=4096), resolve_gpu("24"), seq_cap=4096
    )
    assert fit.over == 0 and fit.max_seq_that_fits == 4096
    assert [p["id"] for p in fit.prescriptions] == ["packing"]
    assert fit.prescriptions[0]["how"]["trl"] == {"packing": True, "max_length": 4096}


def test_vlm_dataset_fits_text_plus_image_tokens_and_bills_the_peak_sample(tmp_path, tok_dir):
    # Qwen2.5-VL's processor: a 1024×1024 image is 37 × 37 = 1,369 tokens (74 × 74 patches); 640×480 is 391
    records = [
        {"text": text(10), "width": 1024, "height": 1024},
        {"text": text(60), "width": 640, "height": 480},
        {"text": text(5)},
    ]
    path = write(tmp_path / "vlm.jsonl", records, "jsonl")
    args = ["bill", "Qwen/Qwen2.5-VL-7B-Instruct", "--gpu", "80", "--json", "--method", "lora"]
    result = CliRunner().invoke(app, [*args, "--dataset", str(path), "--tokenizer", str(tok_dir)])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)["dataset"]
    assert data["max_tokens"] == 11 + 1369  # the fit counts each sample's text + image tokens
    peak = data["images"]["peak"]
    assert (peak["record"], peak["encoder_tokens"]) == (1, 74 * 74)
    bill = peak["bill"]
    assert bill["encoder_tokens"] == 74 * 74 and bill["vision_saved"] == 0  # LoRA: q_proj/v_proj miss Qwen's tower
    single = CliRunner().invoke(
        app, [*args, "--seq", "11", "--images-per-sample", "1", "--image-size", "1024x1024"]
    )  # the same row as plan values: the same bill
    assert json.loads(single.stdout)["per_gpu"]["peak_allocated"] == bill["peak_allocated"]
