"""A batch without output stores its progress (``sourceGroupId``'s offsets) with its
``done`` record, in the decision writer's transaction: a plain OffsetCommit let a driver
whose writer was fenced since (a zombie) move the group back. A new query taking over
requires the group at or past the output's end on every partition."""

from __future__ import annotations

import pytest

from kafka_eos_ds.errors import KafkaClientError
from kafka_eos_ds.kafka_sink.decision_log import KafkaDecisionLog
from kafka_eos_ds.kafka_sink.messages import KafkaHandle
from kafka_eos_ds.kafka_sink.participants import KafkaTransactions
from kafka_eos_ds.twophase import DONE, Decision, Kind, Participant, TwoPhaseCommitter, WriteId

PROGRESS = {"group": "orders", "offsets": {"in": {"0": 5, "1": 7}}}


class Producer:
    def __init__(self, calls, fenced=False):
        self.calls, self.fenced = calls, fenced

    def list_topics(self, *a, **kw):
        pass

    def init_transactions(self, timeout):
        self.calls.append("init")

    def begin_transaction(self):
        self.calls.append("begin")

    def produce(self, topic, value=None, key=None, partition=None):
        self.calls.append(("produce", key))

    def send_offsets_to_transaction(self, positions, group_metadata, timeout=-1):
        self.calls.append(("offsets", group_metadata, [(tp.topic, tp.partition, tp.offset) for tp in positions]))

    def commit_transaction(self, timeout):
        if self.fenced:
            from confluent_kafka import KafkaError, KafkaException

            raise KafkaException(KafkaError(KafkaError._FENCED, "fenced", fatal=True))
        self.calls.append("commit")

    def abort_transaction(self, timeout):
        self.calls.append("abort")


class Member:
    def __init__(self, group):
        self.group = group

    def consumer_group_metadata(self):
        return f"metadata of {self.group}"

    def close(self):
        pass


class Clients:
    def __init__(self, fenced=False):
        self.calls: list = []
        self.fenced = fenced

    def producer(self, conf):
        return Producer(self.calls, self.fenced)

    def consumer(self, conf):
        return Member(conf["group.id"])


def decision_log(clients):
    log = KafkaDecisionLog({"bootstrap.servers": "b:9092"}, "_log", "p", "", clients=clients)
    log._partitions, log._partition = 1, 0  # the topic and the prefix's partition, known
    return log


def test_an_empty_batchs_progress_commits_in_the_done_records_transaction():
    clients = Clients()
    decision_log(clients).write("q:q", Decision("q", 3, DONE, (), PROGRESS))
    assert clients.calls == ["init", "begin", ("produce", b"p|q:q"),
                             ("offsets", "metadata of orders", [("in", 0, 5), ("in", 1, 7)]), "commit"]


def test_only_a_done_record_without_participants_carries_offsets():
    clients = Clients()
    part = Participant("p-0-0", 0, 0, 5, KafkaHandle(7, 3))
    decision_log(clients).write("q:q", Decision("q", 3, DONE, (part,), PROGRESS))  # carried by its first transaction
    assert not [c for c in clients.calls if c[0] == "offsets"]


def test_a_fenced_writer_cannot_move_the_group():
    """The zombie's done record and its offsets are one transaction: fenced, neither lands."""
    clients = Clients(fenced=True)
    with pytest.raises(KafkaClientError):
        decision_log(clients).write("q:q", Decision("q", 3, DONE, (), PROGRESS))
    assert "commit" not in clients.calls


class Coordinator:
    def __init__(self, held=None):
        self.held = held or {}
        self.plain_commits: list = []

    def commit_offsets(self, group, offsets):
        self.plain_commits.append((group, offsets))

    def group_offsets(self, group, partitions):
        return self.held


class Log:
    def __init__(self):
        self.records: list = []

    def latest(self, key):
        return self.records[-1][1] if self.records else None

    def latest_of(self, kind):
        return self.latest(None)

    def write(self, key, decision):
        self.records.append((key, decision))


def test_the_committer_stores_an_empty_batchs_progress_with_its_done_record_only():
    """No plain OffsetCommit, which a driver fenced since could still send."""
    coordinator, log = Coordinator(), Log()
    txns = KafkaTransactions(coordinator, "p", 60_000)
    TwoPhaseCommitter(log, txns, progress_store=txns, commit_timeout_s=1).commit(
        WriteId(Kind.STREAM, "q", 3), [Participant("", 0, 0, 0, KafkaHandle(-1, -1))], PROGRESS)
    assert coordinator.plain_commits == []
    assert log.records == [("q:q", Decision("q", 3, DONE, (), PROGRESS))]


@pytest.mark.parametrize(("held", "says"), [
    ({}, "holds no offsets for the input"),
    ({"in": {"0": 5}}, "holds offsets before them (in-1: none)"),
    ({"in": {"0": 5, "1": 6}}, "holds offsets before them (in-1: 6)"),   # moved back by one batch
    ({"in": {"0": 2, "1": 7}}, "holds offsets before them (in-0: 2)"),
])
def test_a_new_query_needs_the_group_at_or_past_the_outputs_end_on_every_partition(held, says):
    problem = KafkaTransactions(Coordinator(held), "p", 60_000).resumes_before(PROGRESS)
    assert problem is not None and says in problem and "'sourceGroupId'" in problem
    assert "A new query cannot start where the output ends" in problem


@pytest.mark.parametrize("held", [{"in": {"0": 5, "1": 7}}, {"in": {"0": 9, "1": 7}, "other": {"0": 1}}])
def test_a_group_at_or_past_the_outputs_end_resumes(held):
    assert KafkaTransactions(Coordinator(held), "p", 60_000).resumes_before(PROGRESS) is None
