"""scripts/times.py: the per-module time table from pytest's JUnit XML."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "times.py"

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites name="pytest tests"><testsuite name="pytest" errors="0" failures="1" skipped="1" tests="5" time="70.5">
<testcase classname="integration.test_sink_crash" name="test_3" time="40.0" />
<testcase classname="integration.test_sink_crash" name="test_8" time="20.0"><failure message="x">x</failure></testcase>
<testcase classname="tests.test_audit" name="test_copy" time="0.5" />
<testcase classname="tests.test_audit.TestIds" name="test_key" time="0.5"><skipped message="y">y</skipped></testcase>
<testcase classname="tests.test_audit" name="test_teardown" time="4.0"><error message="z">z</error></testcase>
</testsuite></testsuites>
"""


def _table(tmp_path: Path) -> list[str]:
    xml = tmp_path / "junit-pyspark-4.3.0-gate.xml"
    xml.write_text(JUNIT)
    proc = subprocess.run([sys.executable, str(SCRIPT), str(xml)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def test_one_row_per_module_slowest_first_with_outcomes_and_share(tmp_path):
    lines = _table(tmp_path)
    assert lines[0] == "pyspark-4.3.0-gate: 5 tests, 65 s in tests, 70 s of pytest"
    rows = [line for line in lines if line.startswith("| ") and not line.startswith("| module")]
    assert rows == [
        "| integration/test_sink_crash.py | 2 | 1 | 1 | 0 | 60.0 | 92.3% |",
        # A class's tests count for its module; an error (in setup or teardown) is a failure.
        "| tests/test_audit.py | 3 | 1 | 1 | 1 | 5.0 | 7.7% |",
    ]


def test_a_missing_file_is_named(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "nope.xml")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "nope.xml" in proc.stderr
