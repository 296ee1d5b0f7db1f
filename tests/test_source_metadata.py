"""Partition discovery on the driver, over a fake cluster listing."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kafka_eos_ds.errors import ConfigError
from kafka_eos_ds.source.metadata import KafkaMetadata
from kafka_eos_ds.source.options import SourceOptions


def metadata(topics: dict[str, int], **options) -> KafkaMetadata:
    listing = SimpleNamespace(topics={name: SimpleNamespace(error=None, partitions=dict.fromkeys(range(n)))
                                      for name, n in topics.items()})
    admin = SimpleNamespace(list_topics=lambda timeout: listing)
    return KafkaMetadata(SourceOptions.from_spark({"kafka.bootstrap.servers": "h:1", **options}, streaming=True),
                         admin_factory=lambda conf: admin)


def test_pattern_excludes_only_internal_topics():
    topics = {"__consumer_offsets": 50, "__transaction_state": 50, "_audit": 1, "__orders_v2": 2, "orders": 1}
    found = metadata(topics, subscribePattern=".*orders.*|_.*").partitions()
    assert {t for t, _ in found} == {"_audit", "__orders_v2", "orders"}


def test_assign_of_a_missing_partition_fails():
    assert metadata({"a": 2}, assign='{"a": [0, 1]}').partitions() == {("a", 0), ("a", 1)}
    with pytest.raises(ConfigError, match="'assign' names partitions that do not exist: a-2, b-0"):
        metadata({"a": 2}, assign='{"a": [0, 2], "b": [0]}').partitions()


def test_committed_offsets_are_asked_again_while_the_groups_coordinator_moves(monkeypatch):
    """A fresh broker answered the first lookup with NOT_COORDINATOR, which failed the query."""
    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    answers = [KafkaException(KafkaError(KafkaError.NOT_COORDINATOR)),
               KafkaException(KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS)),
               [TopicPartition("a", 0, 42), TopicPartition("a", 1, -1001)]]

    class Consumer:
        def committed(self, partitions, timeout):
            answer = answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer

    meta = KafkaMetadata(SourceOptions.from_spark({"kafka.bootstrap.servers": "h:1", "subscribe": "a"},
                                                  streaming=True), consumer_factory=lambda conf: Consumer())
    monkeypatch.setattr("time.sleep", lambda s: None)
    assert meta.committed([("a", 0), ("a", 1)]) == {("a", 0): 42, ("a", 1): None}
    assert answers == []


def _answering(answers):
    """An admin whose list_offsets answers each partition from ``answers[(topic, partition)]``
    in turn (the last answer repeats); the calls are recorded."""
    from concurrent.futures import Future

    calls = []

    class Admin:
        def list_offsets(self, request, isolation_level, request_timeout):
            calls.append(sorted((tp.topic, tp.partition) for tp in request))
            futures = {}
            for tp in request:
                queue = answers[(tp.topic, tp.partition)]
                future: Future = Future()
                future.set_result(SimpleNamespace(offset=queue.pop(0) if len(queue) > 1 else queue[0]))
                futures[tp] = future
            return futures

    meta = KafkaMetadata(SourceOptions.from_spark({"kafka.bootstrap.servers": "h:1", "subscribe": "a"},
                                                  streaming=True), admin_factory=lambda conf: Admin())
    return meta, calls


def test_a_partition_answered_without_an_offset_is_asked_again_not_taken_for_one(monkeypatch):
    """Found by the full chaos run: while a killed broker's partitions changed leaders,
    ListOffsets answered a partition's latest offset as -1001 without an error; the source
    took it for the batch's end, offsets 'went backwards', and the query stopped on a false
    data loss."""
    monkeypatch.setattr("time.sleep", lambda s: None)
    meta, calls = _answering({("a", 0): [-1001, -1001, 17930], ("a", 1): [512]})
    assert meta.latest([("a", 0), ("a", 1)]) == {("a", 0): 17930, ("a", 1): 512}
    assert calls == [[("a", 0), ("a", 1)], [("a", 0)], [("a", 0)]]  # only the unanswered one again
    meta, _ = _answering({("a", 0): [-1001, 0]})
    assert meta.earliest([("a", 0)]) == {("a", 0): 0}


def test_a_partition_that_never_gets_an_offset_fails_retriably_naming_it(monkeypatch):
    from kafka_eos_ds.errors import KafkaClientError

    clock = iter(range(0, 10_000, 5))
    monkeypatch.setattr("time.monotonic", lambda: float(next(clock)))
    monkeypatch.setattr("time.sleep", lambda s: None)
    meta, _ = _answering({("a", 0): [5], ("a", 1): [-1001]})
    with pytest.raises(KafkaClientError,
                       match=r"no latest offset for a-1 within 30s \(last answer: no offset \(-1001\)\)") as info:
        meta.latest([("a", 0), ("a", 1)])
    assert info.value.retriable


def test_a_moving_leaders_transient_error_is_asked_again(monkeypatch):
    from confluent_kafka import KafkaError, KafkaException

    monkeypatch.setattr("time.sleep", lambda s: None)
    meta, calls = _answering({("a", 0): [7]})
    errors = [KafkaException(KafkaError(KafkaError.FENCED_LEADER_EPOCH))]
    answer = type(meta.admin()).list_offsets

    def flaky(self, request, **kwargs):
        if errors:
            raise errors.pop()
        return answer(self, request, **kwargs)

    monkeypatch.setattr(type(meta.admin()), "list_offsets", flaky)
    assert meta.latest([("a", 0)]) == {("a", 0): 7} and errors == []


def test_a_request_stuck_on_a_dead_leader_leaves_time_to_ask_the_new_one(monkeypatch):
    """Found by a gate run under load: one ListOffsets request stuck on a killed broker's
    partitions took the look-up's whole 30 s (27 s measured, then FENCED_LEADER_EPOCH),
    so no new client ever asked the new leaders and the look-up failed. Each attempt
    gets a third of the budget."""
    from confluent_kafka import KafkaError, KafkaException

    now = [0.0]
    monkeypatch.setattr("time.monotonic", lambda: now[0])
    monkeypatch.setattr("time.sleep", lambda s: now.__setitem__(0, now[0] + s))
    meta, _ = _answering({("a", 0): [7]})
    answer = type(meta.admin()).list_offsets
    timeouts = []

    def stuck_once(self, request, isolation_level, request_timeout):
        timeouts.append(request_timeout)
        if len(timeouts) == 1:  # the request waits out its timeout on the dead leader
            now[0] += request_timeout
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
        return answer(self, request, isolation_level, request_timeout)

    monkeypatch.setattr(type(meta.admin()), "list_offsets", stuck_once)
    assert meta.latest([("a", 0)]) == {("a", 0): 7}
    assert timeouts[0] <= 10 and len(timeouts) == 2
