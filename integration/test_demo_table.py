"""The main job's Kafka-to-table variant, `python -m kafka_eos_tools demo --table`, as a
user runs it: its own embedded Kafka, HDFS and Hive metastore, the driver SIGKILLed three
times, a final drain, and the table audited through the metastore and over its path.

Marked ``full`` as well as ``storage``: it starts three servers and four Spark drivers
and runs about ten batches, 413 s on the 2-core machine under load (58 s of it server
start-up; docs/dev/guarantees.md); the start-ups alone come near the ~90 s a gate test
may take on a quiet machine. The table sink's crash points themselves run in the gate
(test_table_*.py).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kafka_eos_tools.demo import processes

pytestmark = [pytest.mark.storage, pytest.mark.full, pytest.mark.timeout(1200)]

pytest.importorskip("hmsclient", reason="the metastore client is not installed (pip install -e '.[hive]')")
pytest.importorskip("hdfs_native", reason="the HDFS client is not installed (pip install -e '.[hdfs]')")

REPO = Path(__file__).resolve().parents[1]  # the tooling runs from the checkout
CRASHES = 3


def test_demo_table_is_exactly_once_through_the_metastore_and_over_the_path_with_driver_kills(tmp_path):
    workdir = tmp_path / "demo"
    proc = subprocess.Popen([sys.executable, "-m", "kafka_eos_tools", "demo", "--table", "--records", "4000",
                             "--crashes", str(CRASHES), "--seed", "11", "--workdir", str(workdir), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(REPO))
    try:
        out, err = proc.communicate(timeout=1000)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)  # the demo stops its servers on SIGTERM
        out, err = proc.communicate(timeout=120)
        pytest.fail(f"the demo did not finish in 1000s:\n{err[-3000:]}")
    finally:
        left = processes.naming(str(workdir))
    assert left == [], f"the demo left processes running: {left}"
    assert proc.returncode == 0, f"{out[-3000:]}\n{err[-3000:]}"
    report = json.loads(out)
    print(f"demo --table: {report}")
    assert report["ok"] is True and report["crashes"] == CRASHES and report["runs"] >= CRASHES + 1
    assert report["records_in"] >= 4000
    for read in ("metastore", "dataset"):
        audit = report[read]
        assert audit["records_out"] == audit["unique_out"] == report["records_in"], read
        assert audit["duplicates"] == audit["losses"] == audit["unexpected"] == audit["misplaced"] == 0, read
    # Every partition with files registered once, at its own directory, and none empty.
    assert report["partitions_registered"] == report["partitions_on_disk"] >= 4
    assert report["partitions_unregistered"] == report["partitions_registered_empty"] == []
    assert report["partitions_registered_twice"] == report["partitions_wrong_location"] == []
    assert report["staged_files_left"] == 0
