"""The README's main job, `kafka-eos demo`, as a user runs it: its own embedded Kafka,
driver crashes, a final drain and the audit, on whichever pyspark this venv has (the
test script runs it on every supported line)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest

# The oldest pyspark line (4.0: rows into the sink, no read limits) runs the main job too.
pytestmark = pytest.mark.oldest


def test_demo_is_exactly_once_with_driver_crashes(tmp_path):
    kafka_eos = Path(sys.executable).parent / "kafka-eos"
    proc = subprocess.run([str(kafka_eos), "demo", "--records", "3000", "--crashes", "1", "--seed", "7",
                           "--workdir", str(tmp_path / "demo"), "--json"],
                          capture_output=True, text=True, timeout=420)
    assert proc.returncode == 0, f"pyspark {pyspark.__version__}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    report = json.loads(proc.stdout)
    print(f"pyspark {pyspark.__version__}: demo audit {report}")
    assert report["ok"] is True
    assert report["records_in"] >= 3000
    assert report["records_out"] == report["unique_out"] == report["records_in"]
    assert report["duplicates"] == report["losses"] == report["order_violations"] == 0
