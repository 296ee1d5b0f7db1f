"""A zombie driver's whole step between a batch's planner and its commit, on a real broker
(the simulation's directed ``zombie-step-before-commit``; docs/dev/decisions.md, "Every
Kafka-sink write's decision is pinned"). The sink's driver and task code run directly
against the broker, as in :mod:`.test_decisions`."""

from __future__ import annotations

import json
import pickle
from dataclasses import replace

from integration.test_decisions import _sink
from integration.two_drivers import TwoDrivers
from kafka_eos_ds.errors import TransactionError
from kafka_eos_ds.kafka_sink.sink import KafkaSink
from kafka_eos_ds.twophase import Kind, WriteId, WriteSpec
from kafka_eos_ds.twophase.writers import Task
from kafka_eos_tools.topics import consume_all

_BATCH0 = sorted(f"b0-{i}" for i in range(20))
_BATCH1 = sorted(f"b1-{p}-{i}" for p in (0, 1) for i in range(20))
STREAM = WriteSpec(streaming=True)


def test_a_zombie_drivers_recovery_between_a_planner_and_its_commit_never_aborts_a_decided_batch(
        kafka, new_topic, tmp_path):
    # Batch 1's planner recovers and reads the commit log's position; its two tasks
    # pre-commit. A driver presumed dead (stalled at batch 1's planner) comes back now: its
    # recovery fences the decision writer, reads batch 0 done, observes batch 1's open
    # transactions, claims the writer and stalls before aborting them. The batch's commit
    # runs then. Before: it decided the batch, the zombie aborted both transactions, and
    # the commit failed (TransactionLostError), 0 of batch 1's 40 rows visible. Now it
    # refuses the batch undecided; Spark aborts it and the restarted query writes it again.
    (tmp_path / "metadata").write_text(json.dumps({"id": "q"}) + "\n")
    (tmp_path / "commits").mkdir()
    (tmp_path / "commits" / "0").write_text("v1\n{}\n")
    sink = _sink(kafka, new_topic(2, prefix="out"), checkpointLocation=str(tmp_path))

    def planned(rows_of):
        """Batch 1 as Spark runs it: the planner's step, then two tasks on the sink it
        pickled for them, each writing and pre-committing its transaction."""
        planner = KafkaSink(replace(sink.config, commit_timeout_s=30))
        mark = planner.prepare(STREAM)
        tasks = pickle.loads(pickle.dumps(planner))
        return [tasks.write(Task(WriteId(Kind.STREAM, "q", 1), p, 0), mark, iter([(r,) for r in rows_of(p)]))
                for p in (0, 1)]

    batch0 = sink.precommitted(0, _BATCH0, "q", 0)
    KafkaSink(replace(sink.config, commit_timeout_s=30)).commit(batch0.write, [batch0.participant()])
    batch1 = planned(lambda p: [f"b1-{p}-{i}" for i in range(20)])
    participants = [m.participant() for m in batch1]
    errors = TwoDrivers("driver-after-claim").play(
        lambda: KafkaSink(replace(sink.config, commit_timeout_s=30)).prepare(STREAM),
        lambda: lambda: KafkaSink(replace(sink.config, commit_timeout_s=30)).commit(batch1[0].write, participants))
    refused = errors.get("new")
    assert isinstance(refused, TransactionError) and refused.retriable, repr(refused)
    assert "claimed its commit-log writer since the batch was planned" in str(refused)
    # Spark aborts the refused batch: nothing of it is visible.
    KafkaSink(replace(sink.config, commit_timeout_s=30)).abort(batch1[0].write, participants, STREAM)
    values = sorted(r.value.decode() for r in consume_all(sink.conf["bootstrap.servers"], sink.output))
    assert values == _BATCH0
    # The restarted query plans batch 1 again and commits it: every row once.
    again = planned(lambda p: [f"b1-{p}-{i}" for i in range(20)])
    KafkaSink(replace(sink.config, commit_timeout_s=30)).commit(again[0].write, [m.participant() for m in again])
    values = sorted(r.value.decode() for r in consume_all(sink.conf["bootstrap.servers"], sink.output))
    assert values == sorted(_BATCH0 + _BATCH1)
