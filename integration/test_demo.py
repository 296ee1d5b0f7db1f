"""The README's main job, `python -m kafka_eos_tools demo`, as a user runs it: its own embedded Kafka,
driver crashes, a final drain and the audit, on whichever pyspark this venv has (the
test script runs it on the oldest and the newest line)."""

from __future__ import annotations

import json
import subprocess
import sys

import pyspark
import pytest

# The gate runs the main job on the oldest line (4.0: rows into the sink, no read limits),
# where Spark differs most from the newest; the newest line runs every crash point the job drives in
# integration/test_sink_crash.py, and the job itself in the full profile (in the second lane of scripts/test.sh).
pytestmark = [pytest.mark.oldest, pytest.mark.oldest_gate, pytest.mark.second_lane]
REPO = __import__("pathlib").Path(__file__).resolve().parents[1]  # the tooling runs from the checkout


def test_demo_is_exactly_once_with_driver_crashes(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "kafka_eos_tools", "demo", "--records", "3000", "--crashes", "1",
                           "--seed", "7", "--workdir", str(tmp_path / "demo"), "--json"],
                          capture_output=True, text=True, timeout=420, cwd=str(REPO))
    assert proc.returncode == 0, f"pyspark {pyspark.__version__}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    report = json.loads(proc.stdout)
    print(f"pyspark {pyspark.__version__}: demo audit {report}")
    assert report["ok"] is True
    assert report["records_in"] >= 3000
    assert report["records_out"] == report["unique_out"] == report["records_in"]
    assert report["duplicates"] == report["losses"] == report["order_violations"] == 0
