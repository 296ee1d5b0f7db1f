"""Run-wide test policy.

* Profiles are pytest markers (registered in pyproject.toml). Every test not marked
  ``full`` gets ``gate`` here, so ``pytest -m gate`` selects what CI runs on the newest
  pyspark (a test marked ``oldest_gate`` gets it on the oldest line only: elsewhere it runs
  in the full profile); the unit tests (``tests/``) also get ``matrix``, as every older line runs them,
  except the simulation (``tests/simulation``), whose gate schedules get ``oldest_full``:
  it runs the sink's protocol code under its own model of Spark, so what a pyspark line
  changes there (``TaskContext``, the types) is what the unit tests check on every line; the
  newest line runs it in the gate and, with its thousands of schedules, in the full
  profile; the oldest runs the gate's schedules in the full profile.
* Under CI (``CI=true``) a skipped integration test fails the run: CI must prove the
  behaviour against a real Kafka, and a skip there would hide that it did not.
* A test over its time limit (pytest-timeout: ``timeout`` in pyproject.toml, or a
  ``timeout`` marker) fails by SIGALRM: the exception ends the test, its fixtures are torn
  down (brokers, Spark) and the run goes on. A test stuck where that exception cannot
  reach it (native code that never returns to Python) is stopped by a backstop
  ``BACKSTOP_S`` later, which ends the run.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading

import pytest

from kafka_eos_tools.demo import processes

BACKSTOP_S = 120.0
_BACKSTOP = pytest.StashKey[threading.Timer]()

_SKIPPED: list[str] = []


# The oldest pyspark line the package claims (pyproject: pyspark>=4.0).
OLDEST_LINE = "4.0"
# The filter of pyproject.toml for kafka-python's import-time warning (a unit test's
# "error" mark would otherwise take precedence over it).
KAFKA_PYTHON_IMPORT = "ignore:.*is deprecated. Use files\\(\\) instead:DeprecationWarning"


def _pyspark_line() -> str:
    import pyspark

    return ".".join(pyspark.__version__.split(".")[:2])


def _strict() -> bool:
    return os.environ.get("CI", "").lower() == "true"


@pytest.hookimpl(tryfirst=True)  # before ``-m`` selects by these markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    unit_tests = config.rootpath / "tests"
    simulation = unit_tests / "simulation"
    oldest_line = _pyspark_line() == OLDEST_LINE
    for item in items:
        if item.get_closest_marker("full") is None and (
                oldest_line or item.get_closest_marker("oldest_gate") is None):
            item.add_marker(pytest.mark.gate)
        if item.path.is_relative_to(unit_tests):
            if not item.path.is_relative_to(simulation):
                item.add_marker(pytest.mark.matrix)
            elif item.get_closest_marker("full") is None:
                # The gate's schedules only: the full profile's thousands of schedules run the
                # same model code on every line, so the newest line's run is the whole proof.
                item.add_marker(pytest.mark.oldest_full)
            # A warning fails a unit test. Not an integration test: pyspark's and py4j's
            # own sockets are left to the garbage collector there (ResourceWarning).
            # kafka-python's own import warns (the legacy importlib.resources API): ignored
            # here too, or the first test to import it fails when run alone.
            item.add_marker(pytest.mark.filterwarnings("error", KAFKA_PYTHON_IMPORT))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # A strict xfail is not a skip: it ran, and reproduced the known defect it names
    # (it fails the run by passing once the defect is fixed).
    if report.skipped and not hasattr(report, "wasxfail") and report.nodeid.startswith("integration/"):
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


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_timeout_set_timer(item: pytest.Item, settings) -> None:
    if settings.method == "signal":
        timer = threading.Timer(settings.timeout + BACKSTOP_S, _stop_the_run, (item, settings.timeout))
        timer.daemon = True
        timer.start()
        item.stash[_BACKSTOP] = timer
    # Returns None: pytest-timeout sets its own timer next.


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_timeout_cancel_timer(item: pytest.Item) -> None:
    timer = item.stash.get(_BACKSTOP, None)
    if timer is not None:
        timer.cancel()


def _stop_the_run(item: pytest.Item, limit: float) -> None:
    """Every thread's stack, then SIGKILL for every process the run started (brokers and
    Spark drivers run in sessions of their own and would outlive pytest), then exit."""
    capture = item.config.pluginmanager.getplugin("capturemanager")
    if capture is not None:
        capture.suspend_global_capture(item)
    sys.stderr.write(f"\n{item.nodeid}: still running {BACKSTOP_S:.0f}s after its {limit:.0f}s time limit; "
                     "every thread's stack, then the run stops\n")
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    sys.stderr.flush()
    for pid in processes.descendants(os.getpid()):
        processes.signal_quietly(pid, signal.SIGKILL)
    os._exit(1)
