"""A task's pre-committed transaction survives every way the task ends, on a broker.

confluent-kafka 2.16 made ``Producer.close()`` and leaving ``with Producer(...)`` abort an
open transaction; the task writer only drops its producer (tests/test_producer_endings.py
checks that no path closes it). Here the endings run against a real broker with the
installed confluent-kafka: the task returns and its producer is garbage-collected, the
task fails after its pre-commit, or the worker process exits (normally, or at once as
Spark's daemon ends a worker). Each time the transaction is still Ongoing under the
task's producer id and epoch, and the driver commits it: its records are visible once.
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import time
from pathlib import Path

import confluent_kafka
import pytest

from integration.test_decisions import _sink
from kafka_eos_ds.kafka_sink.messages import KafkaCommitMessage
from kafka_eos_ds.kafka_sink.task_writer import write_partition
from kafka_eos_ds.twophase import Kind, WriteId, faults
from kafka_eos_ds.twophase.protocol import DoneMark, Participant
from kafka_eos_ds.twophase.writers import Task
from kafka_eos_tools.topics import consume_all

ROWS = [f"r{i}" for i in range(20)]
WRITE = WriteId(Kind.STREAM, "q", 0)

# The worker: one task's write in a process of its own, which then exits.
_WORKER = """
import json, os, sys
from kafka_eos_ds.kafka_sink.config import SinkConfig
from kafka_eos_ds.kafka_sink.task_writer import write_partition
from kafka_eos_ds.twophase import Kind, WriteId
from kafka_eos_ds.twophase.protocol import DoneMark
from kafka_eos_ds.twophase.writers import Task
from pyspark.sql.types import StringType, StructField, StructType

options, rows, how = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
config = SinkConfig.from_options(options, StructType([StructField("value", StringType())]))
message = write_partition(config, Task(WriteId(Kind.STREAM, "q", 0), 0, 0), DoneMark(), iter([(r,) for r in rows]))
print(json.dumps([message.transactional_id, message.producer_id, message.epoch]), flush=True)
if how == "at-once":
    os._exit(0)
sys.exit(0)
"""


def _in_process(sink, fail_after_precommit):
    def fail(point, **_):
        if point == "task-after-precommit":
            raise RuntimeError("the task dies after its pre-commit")

    faults.install(fail if fail_after_precommit else None)
    try:
        message = write_partition(sink.config, Task(WRITE, 0, 0), DoneMark(), iter([(r,) for r in ROWS]))
    except RuntimeError:
        assert fail_after_precommit
        return None
    finally:
        faults.install(None)
    gc.collect()
    return message.transactional_id, message.producer_id, message.epoch


def _in_worker(sink, how):
    options = {"kafka.bootstrap.servers": sink.conf["bootstrap.servers"], "topic": sink.output,
               "transactionalIdPrefix": sink.prefix}
    done = subprocess.run([sys.executable, "-c", _WORKER, json.dumps(options), json.dumps(ROWS), how],
                          capture_output=True, text=True, timeout=120, cwd=str(Path(__file__).resolve().parents[1]))
    assert done.returncode == 0, done.stderr[-3000:]
    tid, pid, epoch = json.loads(done.stdout.strip().splitlines()[-1])
    return tid, pid, epoch


@pytest.mark.parametrize("ending", ["returned", "failed-after-pre-commit", "worker-exit", "worker-exit-at-once"])
def test_a_pre_committed_transaction_outlives_its_task(kafka, new_topic, ending):
    sink = _sink(kafka, new_topic(1, prefix="out"))
    if ending.startswith("worker"):
        found = _in_worker(sink, "at-once" if ending.endswith("at-once") else "normally")
    else:
        found = _in_process(sink, ending == "failed-after-pre-commit")
    with sink.driver._committer(WRITE) as committer:
        coordinator = committer.participants.coordinator
        tid = f"{sink.prefix}-0-0"
        time.sleep(2)  # an abort the client sent on its way out would have ended it by now
        state = coordinator.describe(tid)
        assert state is not None and state.state == "Ongoing", (confluent_kafka.version(), state)
        if found is not None:
            assert found == (tid, state.producer_id, state.producer_epoch)
        assert consume_all(kafka.bootstrap, sink.output) == []  # pre-committed: invisible
    message = KafkaCommitMessage(WRITE, 0, 0, len(ROWS), "", tid, state.producer_id, state.producer_epoch)
    participant: Participant = message.participant()
    sink.driver.commit(WRITE, [participant])
    values = sorted(r.value.decode() for r in consume_all(kafka.bootstrap, sink.output))
    assert values == sorted(ROWS), (confluent_kafka.version(), values)
