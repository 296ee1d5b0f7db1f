"""Under CI=true a skipped integration test fails the run (conftest.py); an expected
failure of a known defect (a strict xfail) ran, and does not."""

from __future__ import annotations

import pytest

import conftest as root


def _report(nodeid: str, xfail: str | None = None) -> pytest.TestReport:
    report = pytest.TestReport(nodeid, ("f.py", 1, "t"), {}, "skipped", ("f.py", 1, "Skipped: no broker"), "call")
    if xfail is not None:
        report.wasxfail = xfail
    return report


def test_a_skipped_integration_test_is_counted_and_an_xfail_is_not(monkeypatch):
    monkeypatch.setattr(root, "_SKIPPED", [])
    root.pytest_runtest_logreport(_report("integration/test_a.py::test_skipped"))
    root.pytest_runtest_logreport(_report("integration/test_a.py::test_known_defect", xfail="open defect"))
    root.pytest_runtest_logreport(_report("tests/test_b.py::test_unit_skip"))
    assert root._SKIPPED == ["integration/test_a.py::test_skipped: Skipped: no broker"]
