"""Issue 27: `diagnose SCRIPT --snapshot FILE` writes like `emit -o`: checked before the script runs, never over an
existing file without --force, the pickle and the page all or none, and the page names a pickle only when one was
written. Before the fix (main at 0929787) FILE.html was overwritten after the run, `--snapshot ''` was an internal
error after the run, `--snapshot x.html` wrote the pickle and then the page over it, and every page said "Drop the
snapshot pickle" on memory_viz, also when the script never used CUDA and no pickle existed."""

import json
import pickle

import pytest
from conftest import FIXTURES, invoke

from memdoc.commands.diagnose_script import write_snapshot_files
from memdoc.probe.script import ScriptResult


def _script(tmp_path):
    """A script that leaves a mark when it runs (it must not, when --snapshot is refused)."""
    mark = tmp_path / "ran"
    script = tmp_path / "train.py"
    script.write_text(f"open({str(mark)!r}, 'w').close()\n")
    return script, mark


def test_existing_page_is_not_overwritten_and_the_script_does_not_run(tmp_path):
    script, mark = _script(tmp_path)
    page = tmp_path / "mem.pickle.html"
    page.write_text("mine\n")
    result = invoke("diagnose", script, "--snapshot", tmp_path / "mem.pickle")
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"Error: {page} already exists (pass --force to overwrite)")
    assert page.read_text() == "mine\n" and not mark.exists()


@pytest.mark.parametrize("value", ["", " ", "a\nb"])
def test_unusable_snapshot_name_is_a_one_line_error_before_the_run(tmp_path, value):
    script, mark = _script(tmp_path)
    result = invoke("diagnose", script, "--snapshot", value)
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("Error: --snapshot ") and not mark.exists()


def test_snapshot_in_a_directory_path_is_refused(tmp_path):
    script, mark = _script(tmp_path)
    for value in (str(tmp_path), f"{tmp_path}/sub/"):
        result = invoke("diagnose", script, "--snapshot", value)
        assert result.exit_code == 2 and "directory" in result.stderr, result.output
    assert not mark.exists()


def _result(snapshot):
    return ScriptResult(
        script="train.py",
        stop_reason="steps",
        steps=2,
        measured={},
        peak_phase="backward",
        phases={},
        states={},
        snapshot=snapshot,
        categories={},
        cpu_timeline=[
            {"op": "aten::mm", "phase": "forward", "total": 1 << 20},
            {"op": "aten::mm", "phase": "backward", "total": 3 << 20},
        ],
    )


def test_cpu_page_names_no_pickle(tmp_path):
    written = write_snapshot_files(_result(None), str(tmp_path / "mem.pickle"), force=False)
    assert written == [str(tmp_path / "mem.pickle.html")] and [p.name for p in tmp_path.iterdir()] == [
        "mem.pickle.html"
    ]
    page = (tmp_path / "mem.pickle.html").read_text()
    assert "pickle" not in page.replace("mem.pickle.html", "") and "memory_viz" not in page


def test_html_name_keeps_the_pickle_apart(tmp_path):
    snap = json.loads((FIXTURES / "diagnose" / "snapshot.json").read_text())
    written = write_snapshot_files(_result(snap), str(tmp_path / "mem.html"), force=False)
    assert written == [str(tmp_path / "mem.pickle"), str(tmp_path / "mem.html")]
    assert pickle.loads((tmp_path / "mem.pickle").read_bytes()) == snap
    assert "mem.pickle (next to this page)" in (tmp_path / "mem.html").read_text()


def test_all_or_nothing_and_force(tmp_path):
    """An existing pickle stops the page too (nothing written); --force replaces both."""
    snap = json.loads((FIXTURES / "diagnose" / "snapshot.json").read_text())
    (tmp_path / "mem.pickle").write_bytes(b"old")
    from memdoc.errors import OutputExistsError

    with pytest.raises(OutputExistsError):
        write_snapshot_files(_result(snap), str(tmp_path / "mem.pickle"), force=False)
    assert [p.name for p in tmp_path.iterdir()] == ["mem.pickle"] and (tmp_path / "mem.pickle").read_bytes() == b"old"
    write_snapshot_files(_result(snap), str(tmp_path / "mem.pickle"), force=True)
    assert pickle.loads((tmp_path / "mem.pickle").read_bytes()) == snap
    assert (tmp_path / "mem.pickle.html").read_text().startswith("<!DOCTYPE html>")
