"""`memdoc emit -o`: all files of an emit are written as a set or not at all, with the user's umask,
side files never over the main file, unwritable places are one-line errors (exit 2)."""

import json
import os
import stat

import pytest
import yaml
from typer.testing import CliRunner

from memdoc.cli import app

runner = CliRunner()
GPT2 = ["gpt2", "--seq", "512"]


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture
def umask027():
    old = os.umask(0o027)
    yield 0o640
    os.umask(old)


@pytest.mark.parametrize(
    "shard,main,side,key",
    [
        ("zero3", "ds_config.json", "deepspeed_zero.json", "deepspeed"),
        ("fsdp", "fsdp.yaml", "accelerate_fsdp.yaml", None),
    ],
)
def test_side_file_never_over_the_main_file(tmp_path, shard, main, side, key):
    out = tmp_path / main
    result = run("emit", *GPT2, "--gpus", 2, "--shard", shard, "--format", "hf", "-o", out)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([main, side])
    config = yaml.safe_load(out.read_text())
    assert config["per_device_train_batch_size"] == 1  # the main file is the trainer config, not the side file
    if key:
        assert config[key] == str(tmp_path / side)
        assert "zero_optimization" in json.loads((tmp_path / side).read_text())
    else:
        assert f"--config_file {tmp_path / side}" in result.stdout
        assert yaml.safe_load((tmp_path / side).read_text())["distributed_type"] == "FSDP"


def test_files_get_the_umask_mode(tmp_path, umask027):
    out = tmp_path / "args.yaml"
    assert run("emit", *GPT2, "--gpus", 2, "--shard", "zero2", "--format", "hf", "-o", out).exit_code == 0
    for path in tmp_path.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == umask027, path


def test_force_replaces_with_the_umask_mode(tmp_path, umask027):
    out = tmp_path / "sft.yaml"
    out.write_text("mine\n")
    out.chmod(0o600)
    result = run("emit", *GPT2, "-o", out, "--force")
    assert result.exit_code == 0, result.output
    assert out.read_text().startswith("# Made by memdoc")
    assert stat.S_IMODE(out.stat().st_mode) == umask027


def test_failed_side_file_write_leaves_nothing_replaced(tmp_path, monkeypatch):
    """The main file is moved first; when the side file's move fails, the old main file comes back."""
    from memdoc.output import files

    out = tmp_path / "args.yaml"
    args = ["emit", *GPT2, "--gpus", 2, "--shard", "zero2", "--format", "hf", "-o", out]
    assert run(*args).exit_code == 0
    before = {p.name: p.read_text() for p in tmp_path.iterdir()}
    real_replace = os.replace
    calls = []

    def second_move_fails(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real_replace(src, dst)

    monkeypatch.setattr(files.os, "replace", second_move_fails)
    result = run(*args, "--force", "--dataset", "other/data")
    monkeypatch.undo()
    assert result.exit_code == 2 and "No space left on device" in result.output
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == before  # no temp, no backup, old contents


def test_failed_write_of_new_files_leaves_none(tmp_path, monkeypatch):
    from memdoc.output import files

    real_replace = os.replace
    calls = []

    def second_move_fails(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise OSError(5, "Input/output error")
        return real_replace(src, dst)

    monkeypatch.setattr(files.os, "replace", second_move_fails)
    out = tmp_path / "new" / "args.yaml"
    result = run("emit", *GPT2, "--gpus", 2, "--shard", "zero2", "--format", "hf", "-o", out)
    assert result.exit_code == 2
    assert list(tmp_path.iterdir()) == []  # the directory it made is gone too


def _unwritable(tmp_path):
    a_file = tmp_path / "plain"
    a_file.write_text("x")
    return [
        a_file / "sft.yaml",
        a_file / "deeper" / "sft.yaml",
        "/proc/memdoc-test/sft.yaml",
        "/proc/sft.yaml",
        "/sys/sft.yaml",
    ]


@pytest.mark.parametrize("index", range(5))
def test_unwritable_places_are_one_line_errors(tmp_path, index):
    target = _unwritable(tmp_path)[index]
    result = run("emit", *GPT2, "-o", target)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert lines[-1].startswith("Error: cannot write") and "Traceback" not in result.output
    assert (tmp_path / "plain").read_text() == "x"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_read_only_directory(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        result = run("emit", *GPT2, "-o", ro / "sft.yaml")
        assert result.exit_code == 2 and "Permission denied" in result.output
        assert list(ro.iterdir()) == []
    finally:
        ro.chmod(0o755)


def test_permission_denied_is_one_line(tmp_path, monkeypatch):
    """The read-only-directory case where the suite runs as root: mkstemp refused as the kernel refuses it."""
    from memdoc.output import files

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(files.tempfile, "mkstemp", refuse)
    result = run("emit", *GPT2, "-o", tmp_path / "sft.yaml")
    assert (
        result.exit_code == 2
        and result.output.strip().splitlines()[-1] == f"Error: cannot write {tmp_path / 'sft.yaml'}: Permission denied"
    )
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------ issue 27: -o as a directory, long paths
@pytest.mark.parametrize("fmt,name", [("trl", "sft.yaml"), ("axolotl", "axolotl.yaml")])
def test_output_ending_in_a_separator_is_a_directory(tmp_path, fmt, name):
    """`-o newdir/` writes newdir/<the format's default name> (before the fix: a file named newdir), side files
    next to it, and the launch line names that path."""
    result = run("emit", *GPT2, "--gpus", 2, "--shard", "zero2", "--format", fmt, "-o", f"{tmp_path}/newdir/")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "newdir").iterdir()) == sorted([name, "ds_config.json"])
    assert f"Wrote {tmp_path / 'newdir' / name}" in result.stdout
    assert str(tmp_path / "newdir" / name) in result.stdout.splitlines()[-1]


def test_existing_directory_gets_the_default_name(tmp_path):
    result = run("emit", *GPT2, "-o", tmp_path)
    assert result.exit_code == 0, result.output
    assert [p.name for p in tmp_path.iterdir()] == ["sft.yaml"]
    assert yaml.safe_load((tmp_path / "sft.yaml").read_text())["max_length"] == 512


NAME_MAX = os.pathconf("/", "PC_NAME_MAX")
"""The kernel's limit on one name (255 bytes on Linux, limits.h NAME_MAX), read from the file system."""


@pytest.mark.parametrize(
    "make",
    [
        lambda tmp: f"{tmp}/{'a' * (NAME_MAX + 1)}.yaml",  # one name over NAME_MAX
        lambda tmp: f"{tmp}/{'é' * 130}/sft.yaml",  # 260 bytes in UTF-8, 130 characters
        lambda tmp: f"{tmp}/" + "/".join(["d" * 200] * 21) + "/sft.yaml",  # the path over PATH_MAX (4096)
    ],
)
def test_over_long_paths_are_one_line_errors(tmp_path, make):
    """Before the fix: `Error: internal error OSError: [Errno 36] File name too long`."""
    result = run("emit", *GPT2, "-o", make(tmp_path))
    assert result.exit_code == 2, result.output
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert line.startswith("Error: cannot write ") and "internal error" not in line and len(line) < 300
    assert list(tmp_path.iterdir()) == []


def test_a_name_of_exactly_name_max_bytes_is_written(tmp_path):
    """The temporary file written first fits next to a NAME_MAX-byte name (before the fix its name was the target's
    plus 14 bytes, and the write failed with 'File name too long')."""
    target = tmp_path / ("a" * (NAME_MAX - 5) + ".yaml")
    result = run("emit", *GPT2, "-o", target)
    assert result.exit_code == 0, result.output
    assert [p.name for p in tmp_path.iterdir()] == [target.name]
