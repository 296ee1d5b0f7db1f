"""Run-wide test policy.

* Profiles are pytest markers (registered in pyproject.toml). Every test not marked
  ``full`` gets ``gate`` here, so ``pytest -m gate`` selects what CI runs on the newest
  pyspark; the unit tests (``tests/``) also get ``matrix``, as every older line runs them.
* Under CI (``CI=true``) a skipped integration test fails the run: CI must prove the
  behaviour against a real Kafka, and a skip there would hide that it did not.
"""

from __future__ import annotations

import os

import pytest

_SKIPPED: list[str] = []


def _strict() -> bool:
    return os.environ.get("CI", "").lower() == "true"


@pytest.hookimpl(tryfirst=True)  # before ``-m`` selects by these markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    unit_tests = config.rootpath / "tests"
    for item in items:
        if item.get_closest_marker("full") is None:
            item.add_marker(pytest.mark.gate)
        if item.path.is_relative_to(unit_tests):
            item.add_marker(pytest.mark.matrix)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and report.nodeid.startswith("integration/"):
        reason = report.longrepr[-1] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        _SKIPPED.append(f"{report.nodeid}: {reason}")


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _strict() and _SKIPPED and session.exitstatus == 0:
        session.exitstatus = 1


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if _strict() and _SKIPPED:
        terminalreporter.write_line(f"CI: {len(_SKIPPED)} integration test(s) skipped; the run fails:", red=True)
        for line in _SKIPPED:
            terminalreporter.write_line("  " + line)
