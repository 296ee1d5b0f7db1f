"""Every Kafka-sink write's decision is pinned to where the commit log stood when it was
planned (docs/dev/decisions.md, "Every Kafka-sink write's decision is pinned"): the
planner reads the log's position after its step, the tasks carry it to the commit, and
the commit step, once it has fenced its decision writer, refuses the write undecided when
a claim of that writer was committed at or after the position (a zombie driver's whole
step ran in between and may have aborted the write's transactions). The interleaving
itself is the simulation's directed ``zombie-step-before-commit``."""

from __future__ import annotations

import json
import pickle
from dataclasses import replace

import pytest

from kafka_eos_ds.errors import TransactionError
from kafka_eos_ds.kafka_sink import sink as kafka_sink
from kafka_eos_ds.kafka_sink.config import SinkConfig
from kafka_eos_ds.kafka_sink.messages import KafkaCommitMessage, KafkaHandle
from kafka_eos_ds.twophase import Kind, Outcome, WriteId, WriteSpec
from kafka_eos_ds.twophase.protocol import DECIDED, DONE, Decision, DoneMark, Participant
from kafka_eos_ds.twophase.runtime import register, unregister
from kafka_eos_ds.twophase.writers import Task
from tests.sink_fakes import kafka_runtime
from tests.test_driver_steps import _log, _record
from tests.test_driver_steps import world as world  # noqa: F401  (the fixture, used by name)
from tests.test_sink_units import OPTS, SCHEMA
from tests.test_twophase import FakeLog

STREAM = WriteId(Kind.STREAM, "q1", 4)


# -- the commit log: its position, and the claims after it ---------------------------

def _claim(world, writer=""):
    topic, _, _ = world
    topic.records.append((f"p|fence:{writer}".encode(), None))


def test_the_position_is_where_the_prefixs_records_end(world):
    topic, _, _ = world
    _record(topic, 0)
    _claim(world)
    log = _log(world)
    assert log.position() == 2
    log.close()


def test_a_claim_of_the_writer_at_or_after_the_position_is_seen(world):
    topic, _, _ = world
    _record(topic, 0)
    _claim(world)  # at offset 1: the planner's own recovery claimed, then read the position (2)
    _record(topic, 1)
    log = _log(world)
    assert not log.claimed_since(2)
    _claim(world, "a1234abcd")  # another writer's claim (a txnAppId write on the prefix)
    assert not log.claimed_since(2)
    _claim(world)  # at offset 4: a step of this writer claimed after the planner (a zombie driver)
    assert log.claimed_since(2) and log.claimed_since(4)
    assert not log.claimed_since(5)  # a position after it (the next batch's planner read it later)
    log.close()


# -- the planner reads it, the tasks carry it --------------------------------------

class _Metadata:
    topics = {"out": None}


class _Coordinator:
    def list_transactions(self, id_regex=None, open_only=True):
        return []

    def refresh(self):
        pass

    def close(self):
        pass


class _Log(FakeLog):
    """The in-memory decision log, with the commit log's offsets: one per record."""

    def __init__(self):
        super().__init__()
        self.events = []
        self.claims_at: list[int] = []
        self.runtime = None  # the sink's runtime, on this log (the fixture's)

    def ensure_topic(self, metadata=None):
        return 1

    def fence_writers(self):
        self.events.append(("fence",))

    def close(self):
        pass

    def position(self):
        self.events.append(("position", len(self.records)))
        return len(self.records)

    def claimed_since(self, position):
        self.events.append(("claimed_since", position))
        return any(at >= position for at in self.claims_at)


@pytest.fixture
def driver(monkeypatch):
    log = _Log()
    # Registered: the planner pickles its writer for the tasks, runtime and all.
    log.runtime = register(kafka_runtime(lambda conf, **_: _Coordinator(), lambda *a, **k: log, _Metadata()))
    monkeypatch.setattr(kafka_sink.KafkaTransactions, "commit", lambda self, p: Outcome.COMMITTED)
    monkeypatch.setattr(kafka_sink.KafkaTransactions, "unfit", lambda self, parts, needed: None)
    monkeypatch.setattr(kafka_sink.KafkaTransactions, "open_ids", lambda self, *a: [])
    yield log
    unregister(log.runtime)


def _sink(driver, tmp_path, **options):
    (tmp_path / "metadata").write_text(json.dumps({"id": "q1"}) + "\n")
    config = SinkConfig.from_options({**OPTS, "checkpointLocation": str(tmp_path), **options}, SCHEMA)
    return kafka_sink.KafkaSink(replace(config, commit_timeout_s=5), runtime=driver.runtime)


def test_a_streams_planner_reads_the_position_after_its_step_and_its_tasks_get_it(driver, tmp_path):
    # A step that writes: the planner adopts the checkpoint of another sink (its batch 0).
    (tmp_path / "commits").mkdir()
    (tmp_path / "commits" / "0").write_text("v1\n{}\n")
    writer = kafka_sink.TwoPhaseStreamWriter(_sink(driver, tmp_path, adoptCheckpoint="true"))
    tasks = pickle.loads(pickle.dumps(writer))  # the planner pickles the writer for the tasks
    assert driver.records == [("q:q1", Decision("q1", 0, DONE))]
    assert driver.events[-1] == ("position", 1)  # after the step's record: the last thing it did
    assert tasks.sink.read == 1


@pytest.mark.parametrize("options", [{}, {"txnAppId": "etl", "txnVersion": "2"}],
                         ids=["job or foreachBatch write", "txnAppId write"])
def test_a_batch_writes_planner_reads_the_position_whatever_its_writer(driver, options):
    """The position is the prefix's, not a writer's: the planner of a df.write, which cannot
    name its writer when it is a job or a write inside foreachBatch, reads it all the same."""
    driver.records.append(("q:other", Decision("other", 0, DONE)))
    config = replace(SinkConfig.from_options(OPTS, SCHEMA), commit_timeout_s=5)
    sink = kafka_sink.KafkaSink(config, runtime=driver.runtime)
    assert sink.prepare(WriteSpec.for_batch({**options}.get, "job-1")) == DoneMark()
    assert sink.read == 1


def test_every_task_carries_the_planners_position_to_the_commit(driver, tmp_path):
    sink = _sink(driver, tmp_path)
    sink.read = 7
    decided = sink.write(Task(STREAM, 0, 0), DoneMark("q1", 4), iter(["a row"]))  # a re-run: writes nothing
    empty = sink.write(Task(STREAM, 1, 0), DoneMark(), iter([]))
    for message in (decided, empty):
        assert isinstance(message, KafkaCommitMessage)
        stored = Participant.from_json(json.loads(json.dumps(message.participant().to_json())), KafkaHandle.from_json)
        assert stored.handle.read == 7
    assert KafkaHandle.from_json({"producer_id": 1, "epoch": 0}).read is None  # an older task's


# -- the commit refuses a write whose writer was claimed since ----------------------

def _participant(read=None):
    return Participant("etl-0-0", 0, 0, 5, KafkaHandle(7, 1, read=read))


def test_a_commit_refuses_undecided_a_write_whose_writer_was_claimed_since_it_was_planned(driver, tmp_path):
    driver.records.append(("q:q1", Decision("q1", 3, DONE)))
    driver.claims_at = [2]  # a zombie's recovery claimed the stream's writer after the planner read 2
    with pytest.raises(TransactionError, match=r"Batch 4 of q1 was not committed: .*claimed.* since the batch "
                                               r"was planned.*Nothing of the batch is visible") as refused:
        _sink(driver, tmp_path).commit(STREAM, [_participant(2), _participant(3)])
    assert refused.value.retriable  # restarting the query runs the batch again
    assert driver.events == [("fence",), ("claimed_since", 2)]  # asked once the writer was fenced; nothing written
    assert driver.records == [("q:q1", Decision("q1", 3, DONE))]


def test_a_commit_whose_writer_was_not_claimed_since_decides_as_before(driver, tmp_path):
    driver.claims_at = [1]  # the planner's own recovery claimed, before it read the position
    _sink(driver, tmp_path).commit(STREAM, [_participant(2)])
    assert ("claimed_since", 2) in driver.events
    assert [(d.batch_id, d.state) for _, d in driver.records] == [(4, DECIDED), (4, DONE)]


def test_tasks_of_an_older_version_carry_no_position_and_are_committed_unchecked(driver, tmp_path):
    driver.claims_at = [0]
    _sink(driver, tmp_path).commit(STREAM, [_participant()])
    assert not [e for e in driver.events if e[0] == "claimed_since"]
    assert [(d.batch_id, d.state) for _, d in driver.records] == [(4, DECIDED), (4, DONE)]
