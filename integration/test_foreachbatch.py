"""df.write inside foreachBatch, to both sinks at once, with real Spark and a real Kafka.

The pipeline of :mod:`kafka_eos_tools.demo.job` with ``--foreach-batch``: each micro-batch
is written twice with ``df.write`` — to topic OUT with ``format("kafka_eos")``, then to a
directory with ``format("kafka_eos_file")`` — the usual way to fan a stream out to
several sinks. Every write must commit (not only the first of the query), and when Spark
re-runs a micro-batch after a driver crash, its writes must add nothing: both outputs
are audited for every input record exactly once.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from integration.helpers import consume_all
from integration.sink_runs import assert_crashed, audit_files, run_pipeline, seed
from kafka_eos_tools.audit import audit
from kafka_eos_ds.sink import list_transactions

RECORDS = 600        # 2 input partitions, 150 offsets per micro-batch -> micro-batches 0..3
BATCH = 150


@pytest.fixture
def fanout(kafka, new_topic, tmp_path):
    """Topics IN (seeded) and OUT, an output directory, a checkpoint; helpers bound to them."""
    input_topic, output_topic = new_topic(2, prefix="in"), new_topic(2, prefix="out")
    seed(kafka.bootstrap, input_topic, RECORDS)

    class F:
        conf = {"bootstrap.servers": kafka.bootstrap}
        input = input_topic
        prefix = f"fb-{output_topic}"
        out_dir = tmp_path / "files"
        checkpoint = str(tmp_path / "checkpoint")
        output = output_topic

        @staticmethod
        def run(fault=None, extra=()):
            return run_pipeline(kafka.bootstrap, input_topic, output_topic, F.checkpoint, F.prefix, fault=fault,
                                max_offsets=BATCH, log_dir=tmp_path / "logs",
                                job_args=["--foreach-batch", "--file-path", str(F.out_dir), *extra])

        @staticmethod
        def seed_more(records):
            seed(kafka.bootstrap, input_topic, records, start=RECORDS)

        @staticmethod
        def visible():
            return len(consume_all(kafka.bootstrap, output_topic))

        @staticmethod
        def open_ids():
            return [t.transactional_id for t in list_transactions(F.conf, F.prefix) if t.open]

        @staticmethod
        def assert_exactly_once(records=RECORDS):
            report = audit(F.conf, input_topic, output_topic)
            assert report.ok, report.table()
            assert report.records_in == records and report.unique_out == records == report.records_out
            files = audit_files(str(F.out_dir), records)
            assert files.ok and files.leftovers == [], files
            deadline = time.monotonic() + 30   # the last write's commit markers land
            while F.open_ids() and time.monotonic() < deadline:
                time.sleep(0.5)
            assert F.open_ids() == []          # nothing holds back read_committed readers

    return F


def test_every_micro_batch_written_inside_foreachbatch_commits_in_both_sinks(fanout):
    run = fanout.run()
    assert run.returncode == 0, run.log[-3000:]
    fanout.assert_exactly_once()
    # Spark runs the last micro-batch again when its commit-log entry is missing (a crash
    # after the writes, before that entry): its function runs again and adds nothing.
    commits = Path(fanout.checkpoint) / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    (commits / str(last)).unlink()
    run = fanout.run()
    assert run.returncode == 0, run.log[-3000:]
    fanout.assert_exactly_once()


# Each point hits one write of micro-batch 1 (``*2``: its second write, the file sink; the
# first is the Kafka write), then the pipeline restarts from its checkpoint: Spark runs
# micro-batch 1 again, whose writes that were already committed must add nothing.
@pytest.mark.parametrize("point, kafka_visible", [
    ("driver-before-decision@1", BATCH),                 # Kafka write undecided: aborted, re-run rewrites it
    ("driver-after-first-commit@1", None),               # Kafka write partly committed: recovery finishes it
    ("driver-after-done@1", 2 * BATCH),                  # Kafka write done, the file write never started
    ("driver-after-first-commit@1*2", 2 * BATCH),        # Kafka write done, the file write partly committed
    ("driver-after-all-commits@1*2", 2 * BATCH),         # both committed, Spark's commit log not written
    pytest.param("commit-raise@1", None, marks=pytest.mark.full),  # commit() raises: abort keeps the decision
])
def test_a_driver_crash_in_a_foreachbatch_write_leaves_both_outputs_exactly_once(fanout, point, kafka_visible):
    run = fanout.run(point)
    if point.startswith("commit-raise"):
        assert run.returncode != 0 and "injected fault at commit-raise" in run.log, run.log[-3000:]
    else:
        assert_crashed(run)
    time.sleep(2)  # commit markers of what was committed land
    visible = fanout.visible()
    if kafka_visible is None:
        assert BATCH < visible < 2 * BATCH, visible
    else:
        assert visible == kafka_visible
    run = fanout.run()
    assert run.returncode == 0, run.log[-3000:]
    fanout.assert_exactly_once()


def test_a_pipeline_killed_again_and_again_keeps_both_outputs_exactly_once(fanout):
    """A run killed at a different point of a different write each time, then drained:
    2,400 records in 16 micro-batches, two writes each."""
    more = 4 * RECORDS
    fanout.seed_more(more - RECORDS)
    for point in ("driver-before-decision@1", "driver-after-first-commit@3*2", "driver-after-done@5",
                  "driver-after-first-commit@7", "driver-after-all-commits@9*2", "driver-before-decision@11*2",
                  "commit-raise@13"):
        run = fanout.run(point)
        assert run.killed or "injected fault at commit-raise" in run.log, run.log[-3000:]
    # A task killed after its pre-commit is retried; the run then drains the input.
    run = fanout.run("task-after-precommit@14#1!0")
    assert run.returncode == 0, run.log[-3000:]
    fanout.assert_exactly_once(more)
