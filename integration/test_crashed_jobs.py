"""A ``df.write`` whose driver dies after its tasks wrote leaves their transactions open,
holding back every ``read_committed`` reader of the partitions they wrote. The next job on
the prefix aborts them once no job could decide them any more (less time left before their
timeout than any job's commit asks), with real Spark and a real Kafka
(docs/troubleshooting.md, "read_committed consumers stall")."""

from __future__ import annotations

import time

import pytest

from integration.helpers import consume_all, end_offsets
from integration.test_write_shapes import _batch_job
from kafka_eos_ds.sink import list_transactions

# 120 s: the least margin any job's commit asks is min(61 s, half the timeout) = 60 s, so
# the crashed job's transactions can be aborted from 60 s of age, well before the broker's
# timeout (the second job commits ~20 s after it starts).
TIMEOUT = [("kafka.transaction.timeout.ms", "120000")]
ROWS = 200


# Full profile: ~2 minutes (the crashed job's transactions must age past the margin); the
# sweep's steps and its interleavings with live jobs run in the gate without Spark
# (tests/test_abandoned_jobs.py, the simulation's directed crashed-job-fenced).
@pytest.mark.full
def test_the_next_job_aborts_a_crashed_jobs_open_transactions(kafka, new_topic, tmp_path):
    topic = new_topic(2, prefix="crashed")
    prefix = f"crashed-{topic}"
    crashed = _batch_job(kafka.bootstrap, topic, prefix, 0, ROWS, tmp_path, fault="driver-before-decision",
                         extra_options=TIMEOUT)
    killed = time.monotonic()
    assert crashed.returncode != 0
    left = list_transactions({"bootstrap.servers": kafka.bootstrap}, prefix, open_only=True)
    assert left, "the crashed job left no transaction open: nothing to test"
    assert end_offsets(kafka.bootstrap, topic) != end_offsets(kafka.bootstrap, topic, "read_uncommitted")

    time.sleep(max(0.0, killed + 62 - time.monotonic()))  # past the margin: no job can decide them now
    job = _batch_job(kafka.bootstrap, topic, prefix, 10_000, ROWS, tmp_path, extra_options=TIMEOUT)
    assert job.returncode == 0, job.stderr[-3000:]

    # Every reader of the output is past both jobs: the last stable offset is the high watermark.
    assert end_offsets(kafka.bootstrap, topic) == end_offsets(kafka.bootstrap, topic, "read_uncommitted")
    assert list_transactions({"bootstrap.servers": kafka.bootstrap}, prefix, open_only=True) == []
    ids = [int(r.value.decode().split("|", 1)[0]) for r in consume_all(kafka.bootstrap, topic)]
    assert sorted(ids) == list(range(10_000, 10_000 + ROWS))  # the second job's rows once, none of the first
