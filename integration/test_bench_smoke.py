"""The benchmark harness runs end to end (a tiny profile). Timings are not asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.full  # the harness, not the product: checked before benchmarks are run
def test_benchmark_harness_runs_and_writes_its_reports(kafka, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "bench.run", "--profile", "smoke", "--bootstrap", kafka.bootstrap,
         "--out", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads((tmp_path / "results.json").read_text())
    seen = {(r["workload"], r["variant"]) for r in data["results"]}
    assert {("source", "kafka_eos"), ("source", "builtin"), ("sink", "kafka_eos exactly_once"),
            ("sink", "builtin"), ("pipeline", "kafka_eos exactly_once"), ("pipeline", "builtin"),
            ("table partitioned", "kafka_eos_file"), ("table partitioned", "builtin")} <= seen
    assert all(r["records_per_s"] > 0 for r in data["results"])
    assert (tmp_path / "results.md").read_text().count("|") > 20
    assert (tmp_path / "throughput.png").stat().st_size > 1000
