"""Crash injection against the exactly-once sink (the crash points of docs/guarantees.md: 1-5, 7, 8, 9).

Each scenario runs the pipeline (kafka_eos source -> upper(value) -> kafka_eos sink)
as a driver subprocess, injects a fault at one exact point of batch 1, restarts it from
the same checkpoint without the fault, lets it drain the input, and audits OUT with a
read_committed consumer: no duplicate, no loss, per-key order kept. Where the point
leaves a state worth checking (open transactions, partial output), it is checked
between the runs too.
"""

from __future__ import annotations

import shutil
import time

import pytest
from confluent_kafka import Producer

from integration.helpers import consume_all
from integration.sink_runs import assert_crashed, run_pipeline, seed
from kafka_eos_tools.audit import audit
from kafka_eos_tools.demo.chaos import TailingReader
from kafka_eos_ds.sink import list_transactions

RECORDS = 600        # 2 input partitions, 150 offsets per batch -> batches 0..3
BATCH = 150


@pytest.fixture
def pipeline(kafka, new_topic, tmp_path):
    """Topics IN (seeded) and OUT, a checkpoint, a prefix, and helpers bound to them."""
    input_topic, output_topic = new_topic(2, prefix="in"), new_topic(2, prefix="out")
    seed(kafka.bootstrap, input_topic, RECORDS)
    # A read_committed consumer reading OUT across every crash and restart.
    tail = TailingReader(kafka.bootstrap, output_topic)
    tail.start()

    class P:
        bootstrap = kafka.bootstrap
        conf = {"bootstrap.servers": kafka.bootstrap}
        prefix = f"crash-{output_topic}"
        checkpoint = str(tmp_path / "checkpoint")

        @staticmethod
        def run(fault=None, **kw):
            return run_pipeline(kafka.bootstrap, input_topic, output_topic, P.checkpoint, P.prefix, fault=fault,
                                max_offsets=BATCH, log_dir=tmp_path / "logs", **kw)

        @staticmethod
        def visible():
            return consume_all(kafka.bootstrap, output_topic)

        @staticmethod
        def open_ids():
            return [t.transactional_id for t in list_transactions(P.conf, P.prefix) if t.open]

        @staticmethod
        def audit():
            return audit(P.conf, input_topic, output_topic)

    P.input, P.output, P.tail = input_topic, output_topic, tail
    try:
        yield P
    finally:
        tail.stopping.set()
        tail.join(10)


def _visible_once_markers_land(p, at_least):
    """Records visible to read_committed once the commit markers of what the coordinator
    has committed reach the partitions: EndTxn returns when the commit is durable in the
    transaction log, and the markers follow asynchronously, so visibility lags a moment."""
    deadline = time.monotonic() + 30
    visible = len(p.visible())
    while visible < at_least and time.monotonic() < deadline:
        time.sleep(0.5)
        visible = len(p.visible())
    return visible


def _finishes_exactly_once(p):
    run = p.run()
    assert run.returncode == 0, run.log[-3000:]
    report = p.audit()
    assert report.ok, report.table()
    assert report.records_in == RECORDS and report.unique_out == RECORDS
    assert p.open_ids() == []  # nothing left to hold back read_committed readers
    deadline = time.monotonic() + 30
    while len(p.tail.ids) < RECORDS and time.monotonic() < deadline:
        time.sleep(0.2)
    # The consumer that read while the query ran and crashed never saw a duplicate.
    assert len(p.tail.ids) == RECORDS and p.tail.duplicates == 0


def test_1_task_dies_before_precommit_is_retried_and_its_transaction_aborted(pipeline):
    # In the last batch (3): no later batch re-uses the dead attempt's id (which would
    # fence it too), so only the batch's commit can have aborted its transaction.
    run = pipeline.run("task-before-precommit@3#0!0")
    assert run.returncode == 0, run.log[-3000:]
    ids = {t.transactional_id: t for t in list_transactions(pipeline.conf, pipeline.prefix)}
    # Attempt 0 of partition 0 died in batch 3; attempt 1 wrote under its own id ...
    assert f"{pipeline.prefix}-0-1" in ids
    # ... and the driver fenced attempt 0's id at commit, aborting its open transaction.
    # The dead attempt may not have sent its records yet (then nothing is open anyway),
    # so its epoch tells: one init per batch, like partition 1's id, plus the fence.
    dead, peer = ids[f"{pipeline.prefix}-0-0"], ids[f"{pipeline.prefix}-1-0"]
    assert not dead.open and dead.producer_epoch == peer.producer_epoch + 1, (dead, peer)
    report = pipeline.audit()
    assert report.ok and report.unique_out == RECORDS, report.table()


def test_2_driver_dies_before_the_decision_aborts_the_batch(pipeline):
    assert_crashed(pipeline.run("driver-before-decision@1"))
    assert len(pipeline.visible()) == BATCH          # batch 0 only
    assert len(pipeline.open_ids()) == 2             # batch 1's pre-committed transactions
    _finishes_exactly_once(pipeline)


def test_3_driver_dies_after_committing_some_transactions(pipeline):
    assert_crashed(pipeline.run("driver-after-first-commit@1"))
    visible = _visible_once_markers_land(pipeline, BATCH + 1)
    assert BATCH < visible < 2 * BATCH               # batch 0 and part of batch 1
    assert len(pipeline.open_ids()) == 1             # the decided one not yet committed
    _finishes_exactly_once(pipeline)


@pytest.mark.parametrize("point", ["driver-after-all-commits@1", "driver-after-done@1"])
def test_4_driver_dies_after_all_kafka_commits(pipeline, point):
    assert_crashed(pipeline.run(point))
    assert _visible_once_markers_land(pipeline, 2 * BATCH) == 2 * BATCH  # batches 0 and 1 committed
    _finishes_exactly_once(pipeline)                 # the re-run of batch 1 writes nothing


def test_5_commit_raises_and_abort_leaves_the_decided_batch_alone(pipeline):
    run = pipeline.run("commit-raise@1")
    assert run.returncode != 0 and "injected fault at commit-raise" in run.log, run.log[-3000:]
    visible = _visible_once_markers_land(pipeline, BATCH + 1)
    assert BATCH < visible < 2 * BATCH
    # abort() ran with the same messages and did not abort the decided, uncommitted one.
    assert len(pipeline.open_ids()) == 1
    _finishes_exactly_once(pipeline)


# Point 7: the checkpoint is lost. The pipeline commits each batch's source offsets to the
# source's consumer group inside the batch's first transaction (sink option
# 'sourceGroupId'), and starts from that group when it has no checkpoint. Each case
# crashes the driver at one point of batch 1's commit, deletes the checkpoint, and lets a
# new query (new query id) drain the input.
@pytest.mark.parametrize("point, visible_before, timeout_ms", [
    ("driver-after-done@1", 2 * BATCH, None),        # batch 1 complete; the group says so
    ("driver-after-decision@1", BATCH, None),        # decided, nothing of it visible: abandoned
    # The offsets sit in the open transaction: the group's offsets are unreadable until it
    # ends, and the new query's source asks before recovery runs. A short timeout lets the
    # broker's abort free them (docs/fault-tolerance.md, "Checkpoint loss").
    ("driver-after-progress@1", BATCH, 15000),
    ("driver-after-first-commit@1", None, None),     # partly visible: the new query finishes it
])
def test_7_checkpoint_lost_a_new_query_resumes_from_the_group(pipeline, point, visible_before, timeout_ms):
    options = [f"kafka.transaction.timeout.ms={timeout_ms}"] if timeout_ms else []
    assert_crashed(pipeline.run(point, sink_options=options))
    if visible_before is None:
        assert BATCH < _visible_once_markers_land(pipeline, BATCH + 1) < 2 * BATCH
    else:
        assert _visible_once_markers_land(pipeline, visible_before) == visible_before
    shutil.rmtree(pipeline.checkpoint)
    run = pipeline.run(sink_options=options)
    assert run.returncode == 0, run.log[-3000:]
    report = pipeline.audit()
    assert report.ok, report.table()
    assert report.records_in == RECORDS and report.unique_out == RECORDS
    assert pipeline.open_ids() == []


def test_8_decided_transaction_lost_to_the_timeout_fails_the_query_loudly(pipeline):
    options = ["kafka.transaction.timeout.ms=6000"]
    assert_crashed(pipeline.run("driver-after-decision@1", sink_options=options))
    deadline = time.monotonic() + 60
    while pipeline.open_ids() and time.monotonic() < deadline:
        time.sleep(1)  # the broker aborts transactions older than their timeout
    assert pipeline.open_ids() == []
    run = pipeline.run(sink_options=options)
    assert run.returncode != 0
    assert "TransactionLostError" in run.log and "kafka.transaction.timeout.ms" in run.log
    assert "transaction.max.timeout.ms" in run.log
    # The query stopped there: only batch 0 is in the output, nothing after the lost batch.
    assert len(pipeline.visible()) == BATCH


def test_9_zombie_writers_are_fenced_and_never_visible(pipeline):
    # Two zombies: an old attempt of task 0, and task 5 of a run that had more tasks.
    zombies = []
    for tid in (f"{pipeline.prefix}-0-0", f"{pipeline.prefix}-5-0"):
        producer = Producer({"bootstrap.servers": pipeline.bootstrap, "transactional.id": tid})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(pipeline.output, b"zombie|" + tid.encode())
        producer.flush(30)
        zombies.append(producer)
    assert len(pipeline.open_ids()) == 2
    _finishes_exactly_once(pipeline)
    assert not any(r.value.startswith(b"zombie") for r in pipeline.visible())
    for producer in zombies:  # a zombie that keeps going is refused
        with pytest.raises(Exception, match="(?i)fenc|epoch"):
            producer.produce(pipeline.output, b"zombie|late")
            producer.commit_transaction(30)
