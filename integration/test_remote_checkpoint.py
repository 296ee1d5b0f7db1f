"""Checkpoints where production keeps them: on HDFS (a real MiniDFSCluster on 127.0.0.1).

Spark writes the checkpoint with its own Hadoop client; the sink's driver-side Python
reads it through hdfs-native (kafka_eos_ds/storage.py). What depends on reading it must
work there as on a local disk: the query's own decisions (its id, from ``metadata``), the
guard against a lost commit log (``commits/``), and ``sourceGroupId`` (the batch's end
offsets from ``offsets/N``).
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
from confluent_kafka.admin import AdminClient

from integration.helpers import consume_all
from integration.sink_runs import assert_crashed, run_pipeline, seed
from kafka_eos_tools.audit import audit

pytestmark = pytest.mark.storage  # starts HDFS: the gate's second lane

RECORDS, BATCH = 600, 150


@pytest.fixture
def remote(kafka, hdfs, new_topic, tmp_path):
    input_topic, output_topic = new_topic(2, prefix="in"), new_topic(2, prefix="out")
    seed(kafka.bootstrap, input_topic, RECORDS)

    class R:
        conf = {"bootstrap.servers": kafka.bootstrap}
        prefix = f"remote-{output_topic}"
        directory = f"/checkpoints/{uuid.uuid4().hex[:8]}"
        checkpoint = f"{hdfs.url}{directory}"
        output = output_topic
        log_topic = f"log-{output_topic}"

        @staticmethod
        def run(fault=None):
            return run_pipeline(kafka.bootstrap, input_topic, output_topic, R.checkpoint, R.prefix, fault=fault,
                                max_offsets=BATCH, log_dir=tmp_path / "logs",
                                sink_options=[f"commitLogTopic={R.log_topic}"])

        @staticmethod
        def query_id():
            import hdfs_native

            with hdfs_native.Client(hdfs.url).read(f"{R.directory}/metadata") as reader:
                return json.loads(bytes(reader.read()).decode().splitlines()[0])["id"]

        @staticmethod
        def audit():
            return audit(R.conf, input_topic, output_topic)

    return R


def test_a_driver_killed_mid_commit_with_its_checkpoint_on_hdfs_finishes_exactly_once(remote):
    from kafka_eos_ds.sink.decision_log import KafkaDecisionLog

    assert_crashed(remote.run("driver-after-first-commit@1"))
    run = remote.run()
    assert run.returncode == 0, run.log[-3000:]
    report = remote.audit()
    assert report.ok and report.records_in == RECORDS == report.unique_out == report.records_out, report.table()
    # The sink read the query's id from the checkpoint on HDFS: its decisions are its own.
    latest = KafkaDecisionLog(remote.conf, remote.log_topic, remote.prefix).latest(f"q:{remote.query_id()}")
    assert latest is not None and latest.state.value == "done" and latest.progress is not None
    # ... and the batch's end offsets from the offset log there (sourceGroupId).
    assert sum(latest.progress["offsets"][next(iter(latest.progress["offsets"]))].values()) == RECORDS


@pytest.mark.full  # the gate reads the HDFS checkpoint in the crash case above; the guard runs locally there
def test_a_lost_commit_log_fails_the_restart_loudly_with_the_checkpoint_on_hdfs(remote):
    assert_crashed(remote.run("driver-after-first-commit@1"))
    deadline = time.monotonic() + 30
    while len(consume_all(remote.conf["bootstrap.servers"], remote.output)) <= BATCH and time.monotonic() < deadline:
        time.sleep(0.5)  # the first transaction's commit markers land
    visible = len(consume_all(remote.conf["bootstrap.servers"], remote.output))
    admin = AdminClient(remote.conf)
    admin.delete_topics([remote.log_topic], operation_timeout=30)[remote.log_topic].result(60)
    deadline = time.monotonic() + 60
    while remote.log_topic in admin.list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.5)
    run = remote.run()
    assert run.returncode != 0
    assert f"The commit-log topic '{remote.log_topic}' (option 'commitLogTopic') holds no decision" in run.log, \
        run.log[-3000:]
    assert len(consume_all(remote.conf["bootstrap.servers"], remote.output)) == visible  # nothing written
