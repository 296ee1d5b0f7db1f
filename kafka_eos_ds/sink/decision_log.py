"""The sink's commit decisions, kept in a compacted Kafka topic.

One record per decision step, keyed by the sink's ``transactionalIdPrefix``, valued
``{"queryId", "batchId", "state": "decided"|"done", "transactions": [...]}``. Kept in
Kafka (not in the checkpoint) so it works for any checkpoint file system and survives
the loss of the checkpoint. Compaction keeps the latest record per sink; the reader
still reads backwards from the end in small windows, so a busy shared topic costs a
window, not a scan.

Writes use ``acks=all``, one record in flight, and are flushed before returning: a
decision is durable before the first transaction of its batch is committed.
"""

from __future__ import annotations

import json
import zlib
from typing import Any, Mapping, Optional

from kafka_eos_ds.errors import ConfigError, KafkaClientError
from kafka_eos_ds.kafka.client_settings import client_config, redact
from kafka_eos_ds.twophase.protocol import Decision

DEFAULT_TOPIC = "_kafka_eos_commit_log"
_WINDOW = 256


def partition_for(key: str, partitions: int) -> int:
    """The partition holding ``key``'s decisions (fixed, so readers know where to look)."""
    return zlib.crc32(key.encode("utf-8")) % max(1, partitions)


class KafkaDecisionLog:
    """:class:`~kafka_eos_ds.twophase.DecisionLog` on a compacted topic.

    Parameters
    ----------
    conf : Mapping
        librdkafka client settings (bootstrap servers, security); producer-only or
        consumer-only keys are filtered by the clients themselves.
    topic : str
        The commit-log topic (sink option ``commitLogTopic``); created if missing.
    key : str
        The sink's ``transactionalIdPrefix``.
    """

    def __init__(self, conf: Mapping[str, Any], topic: str, key: str) -> None:
        self._conf = dict(conf)  # client_config keeps what the commit-log clients need
        self.topic = topic
        self.key = key
        self._producer: Any = None
        self._partition: Optional[int] = None

    # -- topic --------------------------------------------------------------

    def ensure_topic(self, metadata: Any = None) -> int:
        """Create the topic if missing (RF = min(3, brokers), compacted); return its partition.

        ``metadata`` (a confluent-kafka ClusterMetadata already fetched) saves a round trip.
        """
        if self._partition is not None:
            return self._partition
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient(client_config(self._conf, "commit_log"))
        try:
            md = metadata if metadata is not None else admin.list_topics(timeout=15)
            existing = md.topics.get(self.topic)
            if existing is None or existing.error is not None:
                rf = min(3, len(md.brokers))
                config = {"cleanup.policy": "compact", "min.insync.replicas": str(min(2, rf))}
                fut = admin.create_topics([NewTopic(self.topic, 1, rf, config=config)], operation_timeout=30)
                try:
                    fut[self.topic].result(60)
                except KafkaException as exc:
                    if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                        raise
                partitions = 1
                for _ in range(100):
                    t = admin.list_topics(self.topic, timeout=10).topics.get(self.topic)
                    if t is not None and t.error is None and all(p.leader >= 0 for p in t.partitions.values()):
                        partitions = len(t.partitions)
                        break
                    import time

                    time.sleep(0.1)
            else:
                partitions = len(existing.partitions)
        except KafkaException as exc:
            raise KafkaClientError(
                f"Cannot create or read the commit-log topic '{self.topic}' (option 'commitLogTopic') at "
                f"{redact(self._conf).get('bootstrap.servers')}: {exc}. The sink needs to create it or be "
                "allowed to describe and write it.", retriable=True) from exc
        self._partition = partition_for(self.key, partitions)
        return self._partition

    # -- write --------------------------------------------------------------

    def write(self, decision: Decision) -> None:
        from confluent_kafka import KafkaException, Producer

        partition = self.ensure_topic()
        if self._producer is None:
            # acks=all and one record in flight, flushed before returning: decisions land
            # in order. A retried send may store a copy twice, and readers take the latest,
            # so idempotence is not needed (docs/decisions.md, "Commit-log writes").
            self._producer = Producer(client_config(self._conf, "commit_log", **{
                "acks": "all", "linger.ms": 0, "max.in.flight.requests.per.connection": 1,
                "client.id": "kafka-eos-commit-log"}))
        errors: list = []

        def delivered(err: Any, _msg: Any) -> None:
            if err is not None:
                errors.append(err)

        value = json.dumps(decision.to_json(), sort_keys=True, separators=(",", ":")).encode()
        try:
            self._producer.produce(self.topic, value=value, key=self.key.encode(), partition=partition,
                                   on_delivery=delivered)
            left = self._producer.flush(60)
        except KafkaException as exc:
            raise KafkaClientError(f"Writing the commit decision to '{self.topic}' failed: {exc}",
                                   retriable=True) from exc
        if left or errors:
            raise KafkaClientError(
                f"Writing the commit decision to '{self.topic}' failed: "
                f"{errors[0] if errors else 'not acknowledged within 60s'}", retriable=True)

    # -- read ---------------------------------------------------------------

    def latest(self) -> Optional[Decision]:
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        partition = self.ensure_topic()
        consumer = Consumer(client_config(self._conf, "commit_log", **{
            "group.id": "kafka-eos-commit-log-reader", "enable.auto.commit": False,
            "isolation.level": "read_committed", "fetch.wait.max.ms": 10, "enable.partition.eof": True}))
        key = self.key.encode()
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(self.topic, partition), timeout=15,
                                                       cached=False)
            end = high
            while end > low:
                start = max(low, end - _WINDOW)
                found = self._read_window(consumer, partition, start, end, key)
                if found is not None:
                    return Decision.from_json(json.loads(found))
                end = start
            return None
        except KafkaException as exc:
            raise KafkaClientError(f"Reading the commit log '{self.topic}' failed: {exc}", retriable=True) from exc
        except (ValueError, KeyError) as exc:
            raise ConfigError(f"The commit-log topic '{self.topic}' holds a record for '{self.key}' that is not a "
                              f"kafka_eos decision ({exc}); option 'commitLogTopic' must name a topic used only "
                              "by kafka_eos sinks.") from exc
        finally:
            consumer.close()

    def _read_window(self, consumer: Any, partition: int, start: int, end: int, key: bytes) -> Optional[bytes]:
        from confluent_kafka import KafkaError, TopicPartition

        consumer.assign([TopicPartition(self.topic, partition, start)])
        found = None
        while True:
            msg = consumer.poll(10)
            if msg is None:
                raise KafkaClientError(f"Reading the commit log '{self.topic}' timed out", retriable=True)
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    return found
                raise KafkaClientError(f"Reading the commit log '{self.topic}' failed: {msg.error()}", retriable=True)
            if msg.offset() >= end:
                return found
            if msg.key() == key:
                found = msg.value()
            if msg.offset() >= end - 1:
                return found

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(10)
            self._producer = None

