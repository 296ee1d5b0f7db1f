"""Planning by work on a real broker: grouped reads, and plan changes between driver runs.

A grouped plan reads several partitions with one consumer: the rows equal the built-in
plan's (``partitionPlan=perKafkaPartition``), also over committed and aborted
transactions that end in markers, each partition in offset order.

The source's plan changes between driver runs: exactly once across the change.

The pipeline (kafka_eos source -> upper(value) -> kafka_eos sink) reads an 8-partition
topic. The first run plans one task per Kafka partition for its batches (7 tasks: the
64 keys land in 7 of the 8 partitions); its driver dies (SIGKILL) in batch 1's commit,
after committing the first transaction (crash point 3), leaving the others decided and
open under the ids of tasks 1..6. The restart plans the
same batch again with 2 tasks (another 'targetPartitions'): its recovery must still find
and commit the ids of tasks the new plan no longer has, and the audit of OUT
(read_committed) must show every record once, in order per key and input partition.
"""

from __future__ import annotations

import time

import pytest

from integration.builtin_rows import normalized
from integration.sink_runs import assert_crashed, run_pipeline, seed
from integration.test_source import kafka_eos_reader, plain_records, produce_transactions
from kafka_eos_ds.kafka_sink import list_transactions, transactional_ids
from kafka_eos_tools.audit import audit
from kafka_eos_tools.topics import consume_all, produce

# Pipelines of their own (about 1-2 minutes each): the gate runs them in its second lane,
# which has the time (docs/dev/testing.md, "Profiles").
pytestmark = pytest.mark.second_lane

PARTITIONS = 8
RECORDS = 800   # 100 offsets per batch -> batches 0..7
BATCH = 100


@pytest.fixture
def pipeline(kafka, new_topic, tmp_path, warm_driver):
    input_topic, output_topic = new_topic(PARTITIONS, prefix="in"), new_topic(PARTITIONS, prefix="out")
    seed(kafka.bootstrap, input_topic, RECORDS, keys=64)  # 64 keys: every input partition gets records

    class P:
        conf = {"bootstrap.servers": kafka.bootstrap}
        prefix = f"plan-{output_topic}"
        checkpoint = str(tmp_path / "checkpoint")

        @staticmethod
        def run(plan, fault=None, timeout=240.0):
            return run_pipeline(kafka.bootstrap, input_topic, output_topic, P.checkpoint, P.prefix, fault=fault,
                                max_offsets=BATCH, log_dir=tmp_path / "logs", warm=warm_driver, timeout=timeout,
                                job_args=[arg for key, value in plan.items()
                                          for arg in ("--source-option", f"{key}={value}")])

        @staticmethod
        def open_tasks():
            """The task numbers of the sink's open transactions."""
            ids = [t.transactional_id for t in list_transactions(P.conf, P.prefix) if t.open]
            return sorted(transactional_ids.parse(P.prefix, i).partition for i in ids)  # type: ignore[union-attr]

    P.input, P.output = input_topic, output_topic
    return P


@pytest.mark.parametrize("first, second", [
    ({"partitionPlan": "perKafkaPartition"}, {"targetPartitions": "2"}),
    pytest.param({"targetPartitions": "2"}, {"partitionPlan": "perKafkaPartition"}, marks=pytest.mark.full),
], ids=["8-tasks-then-2", "2-tasks-then-8"])
def test_a_restart_with_another_plan_finishes_the_crashed_batch_exactly_once(pipeline, first, second):
    assert_crashed(pipeline.run(first, "driver-after-first-commit@1"))
    open_before = pipeline.open_tasks()
    # Batch 1 decided, its first transaction committed, the rest open under the first plan's
    # ids (a task whose input partition had no record in the batch opens none).
    first_tasks = PARTITIONS if "partitionPlan" in first else 2
    assert 1 <= len(open_before) < first_tasks, open_before
    if first_tasks > 2:
        assert max(open_before) >= 2, open_before  # ids a plan of 2 tasks never opens
    run = pipeline.run(second)
    assert run.returncode == 0, run.log[-3000:]
    assert "finishing the commit of batch 1" in run.log, run.log[-3000:]
    report = audit(pipeline.conf, pipeline.input, pipeline.output)
    assert report.ok, report.table()
    assert report.records_in == RECORDS and report.unique_out == RECORDS and report.keys_checked == 64
    assert pipeline.open_tasks() == []  # nothing left to hold back read_committed readers
    deadline = time.monotonic() + 30
    while len(consume_all(pipeline.conf["bootstrap.servers"], pipeline.output)) < RECORDS:
        assert time.monotonic() < deadline
        time.sleep(0.5)


@pytest.mark.full  # the gate reads grouped in the crash case above, audited record by record
def test_a_grouped_read_equals_the_one_task_per_partition_read(spark, kafka, new_topic):
    txn, plain = new_topic(2), new_topic(3, {"retention.ms": "-1"})  # plain records are an hour old
    committed = produce_transactions(kafka.bootstrap, txn, 2)  # ends with an aborted transaction
    produce(kafka.bootstrap, plain, plain_records(300, 3))
    for topic, rows in ((txn, committed), (plain, 300)):
        builtin_plan = kafka_eos_reader(spark, kafka.bootstrap, topic, includeHeaders="true",
                                        partitionPlan="perKafkaPartition").load()
        grouped = kafka_eos_reader(spark, kafka.bootstrap, topic, includeHeaders="true", targetPartitions=1).load()
        assert builtin_plan.rdd.getNumPartitions() == len({r.partition for r in builtin_plan.collect()})
        assert grouped.rdd.getNumPartitions() == 1
        ours = grouped.select("partition", "offset").collect()
        assert len(ours) == rows
        for p in {r.partition for r in ours}:  # one consumer, each partition in offset order
            offsets = [r.offset for r in ours if r.partition == p]
            assert offsets == sorted(offsets)
        assert normalized(grouped) == normalized(builtin_plan)
