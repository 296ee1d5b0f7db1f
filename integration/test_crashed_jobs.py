"""A ``df.write`` whose driver dies after its tasks wrote leaves their transactions open,
holding back every ``read_committed`` reader of the partitions they wrote. The next job on
the prefix aborts them once no job could decide them any more (less time left before their
timeout than any job's commit asks), with real Spark and a real Kafka
(docs/troubleshooting.md, "read_committed consumers stall")."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from integration.test_write_shapes import _batch_job
from kafka_eos_ds.kafka_sink import list_transactions
from kafka_eos_tools.topics import consume_all, end_offsets

# 120 s: the least margin any job's commit asks is min(61 s, half the timeout) = 60 s, so
# the crashed job's transactions can be aborted from 60 s of age, well before the broker's
# timeout aborts them (which would make this test pass without the sweep).
TIMEOUT = [("kafka.transaction.timeout.ms", "120000")]
ROWS = 200


# Full profile: ~2-4 minutes (the crashed job's transactions must age past the margin); the
# sweep's steps and its interleavings with live jobs run in the gate without Spark
# (tests/test_abandoned_jobs.py, the simulation's directed crashed-job-fenced).
@pytest.mark.full
def test_the_next_job_aborts_a_crashed_jobs_open_transactions(kafka, new_topic, tmp_path):
    topic = new_topic(2, prefix="crashed")
    prefix = f"crashed-{topic}"
    conf = {"bootstrap.servers": kafka.bootstrap}
    crashed = _batch_job(kafka.bootstrap, topic, prefix, 0, ROWS, tmp_path, fault="driver-before-decision",
                         extra_options=TIMEOUT)
    assert crashed.returncode != 0
    left = list_transactions(conf, prefix, open_only=True)
    assert left, "the crashed job left no transaction open: nothing to test"
    assert end_offsets(kafka.bootstrap, topic) != end_offsets(kafka.bootstrap, topic, "read_uncommitted")

    # The second job waits at the start of its commit until the crashed job's transactions
    # are past the margin (62 s old), and must sweep them before the broker's timeout would.
    gate = tmp_path / "commit-gate"
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(_batch_job, kafka.bootstrap, topic, prefix, 10_000, ROWS, tmp_path,
                              fault="driver-before-decision:gate", extra_options=TIMEOUT, gate=gate)
        deadline = time.monotonic() + 180
        while not gate.exists() and time.monotonic() < deadline and not running.done():
            time.sleep(0.2)
        assert gate.exists(), "the second job never reached its commit"
        youngest, oldest = max(t.start_time_ms for t in left), min(t.start_time_ms for t in left)
        time.sleep(max(0.0, (youngest + 62_000) / 1000 - time.time()))
        assert time.time() * 1000 < oldest + 100_000, "too late: the broker's timeout would end them anyway"
        assert list_transactions(conf, prefix, open_only=True), "the crashed job's transactions ended by themselves"
        gate.unlink()
        job = running.result(timeout=240)
    assert job.returncode == 0, job.stderr[-3000:]

    # Every reader of the output is past both jobs: the last stable offset is the high watermark.
    assert end_offsets(kafka.bootstrap, topic) == end_offsets(kafka.bootstrap, topic, "read_uncommitted")
    assert list_transactions(conf, prefix, open_only=True) == []
    ids = [int(r.value.decode().split("|", 1)[0]) for r in consume_all(kafka.bootstrap, topic)]
    assert sorted(ids) == list(range(10_000, 10_000 + ROWS))  # the second job's rows once, none of the first
