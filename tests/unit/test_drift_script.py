"""`make drift` runs test files that exist (a renamed test would be silently left out of the drift check)."""

import importlib.util

from conftest import ROOT


def test_every_drift_test_file_exists():
    spec = importlib.util.spec_from_file_location("drift", ROOT / "scripts" / "drift.py")
    drift = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(drift)
    assert drift.TESTS and [path for path in drift.TESTS if not (ROOT / path).is_file()] == []
