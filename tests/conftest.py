"""Shared test helpers: running the memdoc CLI in-process."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from memdoc.cli import app

_RUNNER = CliRunner()


def invoke(*args, **kwargs):
    """`memdoc ARGS…` in-process (Typer's CliRunner); arguments are turned into strings.

    Keyword arguments go to `CliRunner.invoke` (e.g. `catch_exceptions=False`, `input=`).
    The result has `.exit_code`, `.stdout`, `.stderr` and `.output`.
    """
    return _RUNNER.invoke(app, [str(a) for a in args], **kwargs)


def invoke_diagnose(*args):
    """`memdoc diagnose ARGS…`, letting exceptions through (a traceback is a test failure)."""
    return invoke("diagnose", *args, catch_exceptions=False)


@pytest.fixture
def cli():
    """The `invoke` helper as a fixture."""
    return invoke
