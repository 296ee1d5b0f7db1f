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
