"""The driver process's coordinator client, kept between driver steps; the decision log,
never kept: its writer is fenced anew by every step."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kafka_eos_ds.errors import ConfigError, TransactionError
from kafka_eos_ds.kafka.driver_session import ClientSessions, fingerprint
from kafka_eos_ds.kafka_sink.config import SinkConfig
from kafka_eos_ds.kafka_sink.messages import KafkaHandle
from kafka_eos_ds.twophase import Outcome, Participant
from kafka_eos_ds.twophase.identity import Kind, WriteId
from tests.sink_fakes import kafka_runtime
from tests.test_sink_units import OPTS, SCHEMA
from tests.test_twophase import FakeLog


class _Client:
    built: list["_Client"] = []

    def __init__(self, conf):
        self.conf = dict(conf)
        self.closed = 0
        _Client.built.append(self)

    def close(self):
        self.closed += 1


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


@pytest.fixture
def clients():
    _Client.built = []
    return _Client.built


def _use(sessions, conf, factory=_Client):
    with sessions.session(conf, factory) as client:
        return client


def test_a_kept_client_serves_the_next_step_with_the_same_settings_and_factory(clients):
    sessions = ClientSessions()
    a = {"bootstrap.servers": "b:9092"}
    first = _use(sessions, a)
    assert _use(sessions, dict(a)) is first and first.closed == 0
    other = _use(sessions, {"bootstrap.servers": "c:9092"})
    assert other is not first
    # Another factory (another kind of client, or a test's fake) never gets it.
    assert _use(sessions, a, factory=lambda conf: _Client(conf)) is not first
    assert len(clients) == 3


def test_a_step_that_raises_closes_its_client_and_the_next_step_builds_a_new_one(clients):
    sessions = ClientSessions()
    conf = {"bootstrap.servers": "b:9092"}
    first = _use(sessions, conf)
    with pytest.raises(RuntimeError), sessions.session(conf, _Client) as client:
        assert client is first
        raise RuntimeError("a step failed")
    assert first.closed == 1 and len(sessions) == 0
    assert _use(sessions, conf) is not first


def test_an_old_client_is_closed_instead_of_reused(clients):
    clock = _Clock()
    sessions = ClientSessions(max_age_s=600, clock=clock)
    conf = {"bootstrap.servers": "b:9092"}
    first = _use(sessions, conf)
    clock.now = 599
    assert _use(sessions, conf) is first  # age counts from the client's start, not its last use
    clock.now = 600
    second = _use(sessions, conf)
    assert second is not first and first.closed == 1 and second.closed == 0


def test_clients_beyond_capacity_are_closed_least_recently_used_first(clients):
    sessions = ClientSessions(capacity=2)
    a, b, c = ({"bootstrap.servers": f"{h}:9092"} for h in "abc")
    ca, cb = _use(sessions, a), _use(sessions, b)
    _use(sessions, a)  # a is now the most recently used
    cc = _use(sessions, c)
    assert (ca.closed, cb.closed, cc.closed) == (0, 1, 0) and len(sessions) == 2
    sessions.close()
    assert (ca.closed, cc.closed) == (1, 1) and len(sessions) == 0


def test_two_steps_at_once_get_two_clients_and_one_is_kept(clients):
    sessions = ClientSessions()
    conf = {"bootstrap.servers": "b:9092"}
    with sessions.session(conf, _Client) as one, sessions.session(conf, _Client) as two:
        assert one is not two
    assert sorted(c.closed for c in clients) == [0, 1] and len(sessions) == 1


def test_a_client_of_the_parent_process_is_neither_used_nor_closed_after_a_fork(clients, monkeypatch):
    import os

    sessions = ClientSessions()
    conf = {"bootstrap.servers": "b:9092"}
    parents = _use(sessions, conf)
    monkeypatch.setattr(os, "getpid", lambda: -1)  # as in a forked child
    assert _use(sessions, conf) is not parents and parents.closed == 0
    sessions.close()
    assert parents.closed == 0


def test_a_kept_client_whose_check_fails_is_closed_and_replaced(clients):
    sessions = ClientSessions()
    conf = {"bootstrap.servers": "b:9092"}
    checked = []

    def check(client):
        checked.append(client)
        if client is clients[0]:
            raise ConnectionError("the cluster moved")

    first = _use(sessions, conf)
    with sessions.session(conf, _Client, on_reuse=check) as second:
        assert second is not first
    assert checked == [first] and first.closed == 1
    with sessions.session(conf, _Client, on_reuse=check) as third:
        assert third is second  # checked, and kept
    assert checked == [first, second]


def test_a_building_error_is_raised_and_nothing_is_kept(clients):
    sessions = ClientSessions()

    def refuse(conf):
        raise ConfigError("no")

    with pytest.raises(ConfigError), sessions.session({"bootstrap.servers": "b:9092"}, refuse):
        pass
    assert len(sessions) == 0


def test_the_fingerprint_tells_settings_apart_and_holds_no_secret():
    conf = {"bootstrap.servers": "b:9092", "sasl.password": "hunter2"}
    assert fingerprint(conf) == fingerprint(dict(reversed(list(conf.items()))))
    assert fingerprint(conf) != fingerprint({**conf, "sasl.password": "hunter3"})
    assert "hunter2" not in fingerprint(conf)


# -- the Kafka sink's driver steps ----------------------------------------------------


class _Coordinator:
    """The coordinator as the sink's commit uses it: every transaction is Ongoing and
    commits."""

    built: list["_Coordinator"] = []
    state = "Ongoing"  # what DescribeTransactions shows for every transaction

    def __init__(self, conf, **_time):
        self.closed = self.refreshed = 0
        _Coordinator.built.append(self)

    def describe_many(self, ids):
        from kafka_eos_ds.kafka.coordinator import TxnState

        return {tid: TxnState(tid, self.state, 7, 3) for tid in ids}

    def list_transactions(self, pattern):
        return []

    def refresh(self):
        self.refreshed += 1

    def close(self):
        self.closed += 1


class _Metadata:
    """The sink's metadata client: the cluster's topics, fresh on every call."""

    built: list["_Metadata"] = []

    def __init__(self, conf):
        self.reads = self.closed = 0
        _Metadata.built.append(self)

    def topics(self, timeout_s):
        self.reads += 1
        return "topics"

    def close(self):
        self.closed += 1


@pytest.fixture
def driver(monkeypatch):
    """The sink's driver steps on fakes: each step's decision log records its own fence
    and reads; all of them share one in-memory log."""
    from kafka_eos_ds.kafka_sink import sink as kafka_sink

    shared = FakeLog()
    shared.events = []
    logs = []

    class StepLog:
        def __init__(self, *args, **kwargs):
            self.fenced = False
            self.closed = False
            logs.append(self)

        def ensure_topic(self, metadata):
            assert metadata == "topics"

        def fence_writers(self):
            self.fenced = True
            shared.events.append(("fence", len(logs)))

        def latest(self, key):
            assert self.fenced, "read before the writer was fenced"
            return shared.latest(key)

        def latest_of(self, kind):
            assert self.fenced, "read before the writer was fenced"
            return shared.latest_of(kind)

        def write(self, key, decision):
            shared.write(key, decision)

        def close(self):
            self.closed = True

    _Coordinator.built = []
    _Metadata.built = []
    monkeypatch.setattr(_Coordinator, "state", "Ongoing")
    runtime = kafka_runtime(_Coordinator, StepLog, metadata_client=_Metadata)
    monkeypatch.setattr(kafka_sink.KafkaTransactions, "commit", lambda self, p: Outcome.COMMITTED)
    sink = kafka_sink.KafkaSink(replace(SinkConfig.from_options(OPTS, SCHEMA), commit_timeout_s=1), runtime=runtime)
    yield sink, logs, shared
    runtime.sessions.close()


def _participant(partition=0):
    return Participant(f"etl-{partition}-0", partition, 0, 5, KafkaHandle(7, 3))


def test_driver_steps_of_one_process_share_their_clients_but_fence_the_decision_writer_each(driver):
    sink, logs, shared = driver
    for batch in (0, 1, 2):
        sink.commit(WriteId(Kind.STREAM, "q", batch), [_participant()])
    kept = _Coordinator.built
    # Kept, and its broker list read again by each later step, as a new client would.
    assert len(kept) == 1 and (kept[0].closed, kept[0].refreshed) == (0, 2)
    # So is the metadata client; the topics are read afresh by every step.
    assert len(_Metadata.built) == 1 and (_Metadata.built[0].reads, _Metadata.built[0].closed) == (3, 0)
    # A decision log per step, its writer fenced before the step read anything, closed after.
    assert len(logs) == 3 and all(log.fenced and log.closed for log in logs)
    assert [(d.batch_id, d.state.value) for _, d in shared.records] == [
        (0, "decided"), (0, "done"), (1, "decided"), (1, "done"), (2, "decided"), (2, "done")]


def test_a_driver_step_that_fails_closes_the_coordinator_client_and_the_next_step_starts_a_new_one(driver):
    sink, logs, shared = driver
    sink.commit(WriteId(Kind.STREAM, "q", 0), [_participant()])
    first = _Coordinator.built[0]
    # The next batch is refused: its transaction was aborted (by its timeout, say).
    _Coordinator.state = "CompleteAbort"
    with pytest.raises(TransactionError, match="was not committed"):
        sink.commit(WriteId(Kind.STREAM, "q", 1), [_participant()])
    assert first.closed == 1 and logs[1].closed
    _Coordinator.state = "Ongoing"  # the restarted query runs the batch again
    sink.commit(WriteId(Kind.STREAM, "q", 1), [_participant()])
    assert len(_Coordinator.built) == 2 and _Coordinator.built[1].closed == 0
    assert [(d.batch_id, d.state.value) for _, d in shared.records][-2:] == [(1, "decided"), (1, "done")]


def test_the_checked_options_are_kept_but_a_refusal_is_raised_every_time(monkeypatch):
    from kafka_eos_ds.kafka_sink import sink as kafka_sink

    checks = []
    real = SinkConfig.from_options.__func__

    def counting(cls, raw, schema):
        checks.append(dict(raw))
        return real(cls, raw, schema)

    monkeypatch.setattr(SinkConfig, "from_options", classmethod(counting))
    options = {**OPTS, "commitTimeoutMs": "5000", "transactionalIdPrefix": "kept-check"}
    first, second = kafka_sink.sink_of(SCHEMA, options), kafka_sink.sink_of(SCHEMA, dict(options))
    assert len(checks) == 1 and first.config is second.config and second.commit_timeout_s == 5.0
    # Other options, or the same options for another schema, are checked on their own.
    kafka_sink.sink_of(SCHEMA, {**options, "topic": "other"})
    assert len(checks) == 2
    bad = {**options, "kafka.acks": "1"}
    for _ in range(2):
        with pytest.raises(ConfigError, match="'kafka.acks' must be 'all'"):
            kafka_sink.sink_of(SCHEMA, bad)
    assert len(checks) == 4
