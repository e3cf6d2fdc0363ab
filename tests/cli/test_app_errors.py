"""The error formatter every command shares (`memdoc.commands.app.report_errors`)."""

from __future__ import annotations

import pytest
import typer

from memdoc.commands.app import report_errors
from memdoc.errors import MemdocError, OutputExistsError, PlanError


def _raising(exc):
    @report_errors
    def command():
        raise exc

    return command


def test_user_error_is_one_line_with_its_hint_and_exit_2(capsys, monkeypatch):
    monkeypatch.delenv("MEMDOC_DEBUG", raising=False)
    with pytest.raises(typer.Exit) as info:
        _raising(OutputExistsError("sft.yaml already exists", hint="pass --force to overwrite"))()
    assert info.value.exit_code == 2
    assert capsys.readouterr().err == "Error: sft.yaml already exists (pass --force to overwrite)\n"


def test_error_subclass_keeps_its_own_exit_code(capsys, monkeypatch):
    monkeypatch.delenv("MEMDOC_DEBUG", raising=False)

    class Busy(MemdocError):
        exit_code = 5

    with pytest.raises(typer.Exit) as info:
        _raising(Busy("GPU busy"))()
    assert info.value.exit_code == 5
    assert capsys.readouterr().err == "Error: GPU busy\n"


def test_a_bug_is_one_line_and_exit_1_without_debug(capsys, monkeypatch):
    monkeypatch.delenv("MEMDOC_DEBUG", raising=False)
    with pytest.raises(typer.Exit) as info:
        _raising(KeyError("micro_batch"))()
    assert info.value.exit_code == 1
    err = capsys.readouterr().err
    assert err == "Error: internal error KeyError: 'micro_batch' (rerun with MEMDOC_DEBUG=1 for the traceback)\n"


def test_debug_shows_the_traceback(capsys, monkeypatch):
    monkeypatch.setenv("MEMDOC_DEBUG", "1")
    with pytest.raises(KeyError):
        _raising(KeyError("micro_batch"))()
    with pytest.raises(typer.Exit):
        _raising(PlanError("--batch 0 must be a positive integer"))()
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and err.endswith("Error: --batch 0 must be a positive integer\n")


def test_exit_passes_through(monkeypatch):
    monkeypatch.delenv("MEMDOC_DEBUG", raising=False)
    with pytest.raises(typer.Exit) as info:
        _raising(typer.Exit(3))()
    assert info.value.exit_code == 3
