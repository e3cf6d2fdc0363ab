"""Issue 27, file inputs: every file memdoc reads is a regular file, read once with a size bound, decoded as
UTF-8 (with or without its mark) or UTF-16; anything else is one `Error: …` line, never a hang."""

from __future__ import annotations

import codecs
import os
import sys

import pytest
from conftest import FIXTURES, invoke

from memdoc.core.doctor.diagnosis import diagnose_oom
from memdoc.resolve import logs
from memdoc.resolve.inputs import text_encoding

sys.path.insert(0, str(FIXTURES.parent / "unit" / "doctor"))
from test_diagnosis import EVERY_LOG, fixture_log  # noqa: E402  (the table of what each fixture log means)

LLAMA = "meta-llama/Llama-3.2-1B"
# A line that says nothing about memory or progress (no OOM marker, no step).
NOISE = "[INFO] heartbeat: node alive\n"


def one_error_line(result) -> str:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    assert "internal error" not in lines[0]
    return lines[0]


@pytest.fixture
def fifo(tmp_path):
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs on this OS")
    path = tmp_path / "pipe.yaml"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize(
    "args",
    [
        ["prescribe", "--log", "{path}"],
        ["bill", "--recipe", "{path}", "--gpu", "24"],
        ["bill", LLAMA, "--config", "{path}", "--gpu", "24"],
        ["bill", LLAMA, "--dataset", "{path}.jsonl", "--gpu", "24"],
        ["bill", "{path}.json", "--gpu", "24"],
        ["diagnose", "{path}.py"],
    ],
)
def test_a_fifo_is_refused_at_once(tmp_path, args):
    """Opening a FIFO with no writer blocks forever; every input refuses it without reading."""
    path = tmp_path / "pipe"
    os.mkfifo(path)
    for suffix in (".jsonl", ".json", ".py"):
        os.mkfifo(str(path) + suffix)
    line = one_error_line(invoke(*[a.format(path=path) for a in args]))
    assert "is a FIFO (named pipe), not a regular file" in line


@pytest.mark.parametrize(
    "args",
    [
        ["prescribe", "--log", "/dev/zero"],
        ["bill", "--recipe", "/dev/zero", "--gpu", "24"],
        ["bill", LLAMA, "--config", "/dev/null", "--gpu", "24"],
        ["bill", LLAMA, "--config", "{tmp}", "--gpu", "24"],
    ],
)
def test_devices_and_directories_are_refused(tmp_path, args):
    line = one_error_line(invoke(*[a.format(tmp=tmp_path) for a in args]))
    assert "not a regular file" in line and ("character device" in line or "directory" in line)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads mode-000 files")
def test_a_mode_000_model_directory_is_one_line(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    model.chmod(0)
    try:
        assert "Permission denied" in one_error_line(invoke("bill", model, "--gpu", "24"))
    finally:
        model.chmod(0o755)


def test_a_script_with_a_utf8_mark_is_accepted(tmp_path):
    """Python runs a file that starts with a UTF-8 mark (PEP 263, `tokenize.detect_encoding`); so does check_script."""
    from memdoc.probe.script.sandbox import check_script

    script = tmp_path / "train.py"
    script.write_bytes(codecs.BOM_UTF8 + b"x = 1\n")
    assert check_script(script) == "x = 1\n"


@pytest.mark.parametrize("codec", ["utf-16", "utf-16-le", "utf-16-be", "utf-8-sig"])
def test_utf16_and_marked_logs_read_as_text(tmp_path, codec):
    """PowerShell's `>` writes UTF-16 LE with a mark (Windows PowerShell 5.1); each reads as the same text."""
    text = fixture_log("step-n-logits")
    path = tmp_path / "train.log"
    path.write_bytes(text.encode(codec))
    assert logs.read_log(str(path)) == text
    kind, phase, symptom, cause, first = EVERY_LOG["step-n-logits"]
    res = invoke("prescribe", "--log", path, "--json")
    assert res.exit_code == 0 and '"long-sample-oom"' in res.stdout, res.output


def test_a_utf16_mark_before_junk_stays_utf8():
    assert text_encoding(b"\xff\xfe\x00 torch.OutOfMemoryError") == "utf-8-sig"
    assert text_encoding("Traceback".encode("utf-16-le")) == "utf-16-le"


@pytest.fixture
def small_windows(monkeypatch):
    """The reader's bounds scaled down (the same code; the whole-text diagnosis to compare with stays fast)."""
    monkeypatch.setattr(logs, "WHOLE_LOG_BYTES", 48 * 1024)
    monkeypatch.setattr(logs, "CHUNK", 4 * 1024)
    monkeypatch.setattr(logs, "KEPT_BYTES", 32 * 1024)


def summary(d) -> tuple:
    return (d.kind, d.phase, d.symptom.id, d.causes[0].id, d.rows[0].prescription.id)


@pytest.mark.slow  # the whole-text diagnosis of 19 padded logs
@pytest.mark.parametrize("name", sorted(EVERY_LOG))
def test_a_long_log_is_diagnosed_as_its_oom(tmp_path, name, small_windows):
    """Each fixture log followed by 3 × WHOLE_LOG_BYTES of heartbeat lines: the streamed reader keeps the OOM
    and the diagnosis is the fixture's own (the table in tests/unit/doctor/test_diagnosis.py); buried in the middle, the
    diagnosis of what the reader keeps is that of the whole text."""
    padding = NOISE * (3 * logs.WHOLE_LOG_BYTES // len(NOISE) // 2)
    path = tmp_path / "train.log"
    for before, after in (("", 2 * padding), (padding, padding)):
        whole = before + fixture_log(name) + after
        path.write_text(whole, encoding="utf-8")
        text = logs.read_log(str(path))
        assert len(text) <= logs.KEPT_BYTES + 4 * logs.CHUNK < len(whole)
        assert summary(diagnose_oom(text)) == summary(diagnose_oom(whole))
        if not before:
            assert summary(diagnose_oom(text)) == EVERY_LOG[name]


def test_an_oom_dense_log_reads_only_its_first_megabytes(tmp_path, small_windows):
    """A loop that caught its OOM on every step: the first OOM (what the diagnosis reads) and no more."""
    path = tmp_path / "train.log"
    path.write_text(fixture_log("step-n-logits") * (3 * logs.WHOLE_LOG_BYTES // 2000), encoding="utf-8")
    text = logs.read_log(str(path))
    assert text.startswith(fixture_log("step-n-logits")) and len(text) <= logs.KEPT_BYTES + 4 * logs.CHUNK


def test_config_size_bound(tmp_path):
    path = tmp_path / "sft.yaml"
    path.write_bytes(b"#" * (4 * 1024 * 1024 + 1))
    assert "is larger than 4 MiB" in one_error_line(invoke("bill", LLAMA, "--config", path, "--gpu", "24"))


# ------------------------------------------------------------------------------------ contract
def test_a_one_count_prefix_conflicts_with_gpus():
    """`--gpu 1xNAME` states one GPU; `--gpus 2` beside it is a conflict, as `--gpu 8xh100 --gpus 4` is."""
    line = one_error_line(invoke("bill", LLAMA, "--gpu", "1x24", "--gpus", "2"))
    assert "says 1 GPUs but --gpus says 2" in line


def test_an_empty_gpu_is_an_error_not_the_local_gpu():
    assert "--gpu is empty" in one_error_line(invoke("bill", LLAMA, "--gpu", ""))


def test_an_empty_symptom_lists_the_symptoms():
    line = one_error_line(invoke("prescribe", "--symptom", ""))
    assert "known symptoms: startup-oom" in line


@pytest.mark.parametrize(
    "args",
    [
        ["bill", LLAMA, "--gpu", "24", "--accum", "9" * 5000],  # over Python's 4,300-digit int limit
        ["bill", LLAMA, "--gpu", "x" * 10_000],
        ["bill", "--recipe", "/" + "a" * 10_000, "--gpu", "24"],
    ],
)
def test_error_lines_echo_at_most_200_characters_of_an_input(args):
    line = one_error_line(invoke(*args))
    assert max(len(word) for word in line.split()) <= 200 and len(line) < 600


def test_an_unknown_model_tries_an_unreachable_hub_once_quietly(monkeypatch):
    """No HF_HUB_OFFLINE and a Hub that never answers (a non-routable address): one try of at most
    HUB_TIMEOUT_S, then the one-line unknown-model error."""
    import time

    from memdoc.resolve.models import HUB_TIMEOUT_S

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("MEMDOC_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://10.255.255.1")
    start = time.monotonic()
    line = one_error_line(invoke("bill", "nosuchorg/nosuchmodel-7b", "--gpu", "24"))
    assert time.monotonic() - start < HUB_TIMEOUT_S + 2 and "unknown model" in line
