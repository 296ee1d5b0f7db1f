"""The sink's commit decisions, kept in a compacted Kafka topic.

One record per decision step, keyed by the sink's ``transactionalIdPrefix``, valued
``{"queryId", "batchId", "state": "decided"|"done"|"abandoned", "transactions": [...]}``.
Kept in Kafka (not in the checkpoint) so it works for any checkpoint file system and
survives the loss of the checkpoint. Compaction keeps the latest record per sink; the
reader reads backwards from the end in small windows, so a busy shared topic costs a
window, not a scan.

Where a sink's decisions live is pinned: the first one goes to ``crc32(prefix) %
partitions``, every later one to the partition that holds the sink's latest decision,
found by key. Partitions added to the topic later therefore never move them (a reader
that looked only at the hashed partition would see no decision and fence a decided
batch).

Writes are transactions of one producer per sink, transactional id
``{prefix}.decisions`` (never an id of the sink's tasks, see
:mod:`.transactional_ids`), read with ``read_committed``. A write either committed or
never becomes visible: :meth:`KafkaDecisionLog.fence_writers` (every driver step
calls it before reading) fences an older writer whose write stalled, so that write
cannot land after the step has read the log and acted on what it read.
"""

from __future__ import annotations

import json
import zlib
from typing import Any, Mapping, Optional

from kafka_eos_ds.errors import ConfigError, KafkaClientError
from kafka_eos_ds.kafka.client_settings import client_config, redact
from kafka_eos_ds.kafka.producer_start import init_transactions
from kafka_eos_ds.sink import transactional_ids
from kafka_eos_ds.twophase import faults
from kafka_eos_ds.twophase.protocol import Decision

DEFAULT_TOPIC = "_kafka_eos_commit_log"
WRITE_TIMEOUT_S = 60.0  # how long a decision write may take (its commit_transaction)
_WINDOW = 256


def partition_for(key: str, partitions: int) -> int:
    """The partition a sink's first decision goes to (later ones follow it, see the module)."""
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
        self._partitions: Optional[int] = None
        self._partition: Optional[int] = None  # where this sink's decisions are, once looked up

    # -- topic --------------------------------------------------------------

    def ensure_topic(self, metadata: Any = None) -> int:
        """Create the topic if missing (RF = min(3, brokers), compacted); return its partition count.

        ``metadata`` (a confluent-kafka ClusterMetadata already fetched) saves a round trip.
        """
        if self._partitions is not None:
            return self._partitions
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
        self._partitions = partitions
        return partitions

    # -- write ---------------------------------------------------------------

    def fence_writers(self) -> None:
        """Become the sink's only decision writer: init_transactions on ``{prefix}.decisions``
        aborts an open write of an earlier writer and refuses it from then on."""
        from confluent_kafka import KafkaException, Producer

        if self._producer is not None:
            return
        self.ensure_topic()  # the topic exists, as compacted, before a producer asks for it
        producer = Producer(client_config(self._conf, "commit_log", **{
            "transactional.id": transactional_ids.decision_writer(self.key), "acks": "all", "linger.ms": 0,
            "client.id": "kafka-eos-commit-log"}))
        try:
            # Connected first: a new writer starts in every driver step (producer_start).
            init_transactions(producer, self.topic)
        except KafkaException as exc:
            raise KafkaClientError(f"Cannot start the commit-log writer of '{self.key}' on '{self.topic}': {exc}",
                                   retriable=exc.args[0].retriable()) from exc
        self._producer = producer

    def write(self, decision: Decision) -> None:
        from confluent_kafka import KafkaException

        partition = self._locate()
        self.fence_writers()
        value = json.dumps(decision.to_json(), sort_keys=True, separators=(",", ":")).encode()
        producer = self._producer
        try:
            producer.begin_transaction()
            producer.produce(self.topic, value=value, key=self.key.encode(), partition=partition)
            faults.check("decision-before-commit", batch=decision.batch_id)
            producer.commit_transaction(WRITE_TIMEOUT_S)
        except KafkaException as exc:
            error = exc.args[0]
            if error.txn_requires_abort():
                try:
                    producer.abort_transaction(60)  # definite: this decision is not in the log
                except KafkaException:
                    pass  # then the next writer's init_transactions aborts it
            elif not error.retriable():
                # Fenced by a newer writer (another driver of this sink), or fatal: this
                # write never becomes visible and this driver must not go on.
                self._producer = None
                raise KafkaClientError(
                    f"Writing the commit decision of '{self.key}' to '{self.topic}' failed: {error}. Another "
                    "driver of this sink took over its commit log; this one stops.", retriable=False) from exc
            # Retriable: the outcome is settled by the next writer's init_transactions.
            self._producer = None
            raise KafkaClientError(f"Writing the commit decision to '{self.topic}' failed: {error}",
                                   retriable=True) from exc

    # -- read ---------------------------------------------------------------

    def latest(self) -> Optional[Decision]:
        self._partition = None  # look again: a writer may have pinned it since
        found = self._lookup()
        return Decision.from_json(json.loads(found)) if found is not None else None

    def _locate(self) -> int:
        if self._partition is None:
            self._lookup()
        assert self._partition is not None
        return self._partition

    def _lookup(self) -> Optional[bytes]:
        """The sink's latest decision record, searched by key: the hashed partition first,
        then the others; pins ``_partition`` to where it is (or the hashed one if none).

        A partition without the key is read to its start: a cost only after partitions
        were added (compaction keeps a partition to about one record per sink)."""
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        partitions = self.ensure_topic()
        hashed = partition_for(self.key, partitions)
        consumer = Consumer(client_config(self._conf, "commit_log", **{
            "group.id": reader_group(self.key), "enable.auto.commit": False,
            "isolation.level": "read_committed", "fetch.wait.max.ms": 10, "enable.partition.eof": True}))
        key = self.key.encode()
        try:
            for partition in [hashed] + [p for p in range(partitions) if p != hashed]:
                low, high = consumer.get_watermark_offsets(TopicPartition(self.topic, partition), timeout=15,
                                                           cached=False)
                end = high
                while end > low:
                    start = max(low, end - _WINDOW)
                    found = self._read_window(consumer, partition, start, end, key)
                    if found is not None:
                        Decision.from_json(json.loads(found))  # a foreign record fails here, loudly
                        self._partition = partition
                        return found
                    end = start
            self._partition = hashed
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
        # Every write committed or aborted its transaction before returning: nothing to flush.
        self._producer = None


def reader_group(prefix: str) -> str:
    """The consumer group of the commit-log reader. librdkafka's consumers need one even
    when they only assign partitions, and look its coordinator up, which Kafka ACLs
    check; named under the sink's prefix, one prefixed Group ACL on
    ``transactionalIdPrefix`` covers it (docs/sink.md, "Secured clusters")."""
    return f"{prefix}.commit-log-reader"
