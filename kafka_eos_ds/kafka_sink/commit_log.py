"""The commit-log topic: created if missing, and its committed records as every driver
step reads them.

The topic is compacted, one partition when this sink creates it, replicated to
min(3, brokers). A step reads a partition of the commit-log topic in windows of offsets, backwards from
its settled end: another writer's open write (another sink sharing the topic) would
hide every later record from a ``read_committed`` reader, so a read first waits for the
partition's last stable offset to reach its high watermark, and then sees everything
committed before it started. What the records mean is :mod:`.decision_log`'s.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Mapping

from kafka_eos_ds.errors import KafkaClientError
from kafka_eos_ds.kafka.clients import AdminLike, ConsumerLike, ProducerLike
from kafka_eos_ds.kafka.driver_session import ClientSessions
from kafka_eos_ds.kafka.errors import client_error
from kafka_eos_ds.kafka.settings import client_config, redact

# How long a read waits for another writer's open decision write to end (its timeout
# plus the broker's abort sweep, with room) before it is retried.
SETTLE_S = 30.0

Record = tuple[int, bytes, Any, int]  # offset, key, value (None: a tombstone), timestamp ms


def ensure_topic(conf: Mapping[str, Any], topic: str, clients: LogClients, sleep: Callable[[float], None],
                 metadata: Any = None) -> int:
    """Create ``topic`` if missing; its partition count. ``metadata`` (a confluent-kafka
    ClusterMetadata already fetched: every driver step hands in the one it read) saves a
    round trip; an admin client is built only when one is needed."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    admin: AdminLike | None = None
    try:
        if metadata is None:
            admin = clients.admin(client_config(conf, "commit_log"))
            metadata = admin.list_topics(timeout=15)
        existing = metadata.topics.get(topic)
        if existing is not None and existing.error is None:
            return len(existing.partitions)
        admin = admin or clients.admin(client_config(conf, "commit_log"))
        rf = min(3, len(metadata.brokers))
        config = {"cleanup.policy": "compact", "min.insync.replicas": str(min(2, rf))}
        fut = admin.create_topics([NewTopic(topic, 1, rf, config=config)], operation_timeout=30)
        try:
            fut[topic].result(60)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
        for _ in range(100):
            t = admin.list_topics(topic, timeout=10).topics.get(topic)
            if t is not None and t.error is None and all(p.leader >= 0 for p in t.partitions.values()):
                return len(t.partitions)
            sleep(0.1)
        return 1
    except KafkaException as exc:
        raise client_error(
            f"Cannot create or read the commit-log topic '{topic}' (option 'commitLogTopic') at "
            f"{redact(conf).get('bootstrap.servers')}", exc, conf,
            fix="The sink needs to create it or be allowed to describe and write it.") from exc


class LogClients:
    """Builds the commit log's clients from their settings: confluent-kafka's, unless a
    test (the protocol simulation) hands in its own."""

    def admin(self, conf: Mapping[str, Any]) -> AdminLike:
        from confluent_kafka.admin import AdminClient

        return AdminClient(dict(conf))

    def producer(self, conf: Mapping[str, Any]) -> ProducerLike:
        from confluent_kafka import Producer

        return Producer(dict(conf))

    def consumer(self, conf: Mapping[str, Any]) -> ConsumerLike:
        from confluent_kafka import Consumer

        return Consumer(dict(conf))


class CommitLogReader:
    """Reads ``topic``'s committed records for the sink of ``prefix`` through the driver
    process's kept consumers (``clients`` builds them, ``sessions`` keeps them)."""

    def __init__(self, conf: Mapping[str, Any], topic: str, prefix: str, clients: LogClients,
                 sessions: ClientSessions,
                 clock: Callable[[], float], sleep: Callable[[float], None]) -> None:
        self._conf = conf
        self.topic = topic
        self.prefix = prefix
        self._clients, self._sessions = clients, sessions
        self._clock, self._sleep = clock, sleep
        self._readers: tuple[ConsumerLike, ConsumerLike] | None = None
        self._held = contextlib.ExitStack()  # the process's kept readers, given back at close
        self._doubt: BaseException | None = None  # a read failed: its readers are closed, not kept

    def reading(self, read: Callable[[], Any]) -> Any:
        """``read()``, a read of the log: a failure is the client's error, and it closes the
        step's readers instead of keeping them (:meth:`close`)."""
        from confluent_kafka import KafkaException

        try:
            return read()
        except KafkaException as exc:
            self._doubt = exc
            raise client_error(f"Reading the commit log '{self.topic}' failed", exc, self._conf) from exc
        except BaseException as exc:
            self._doubt = exc
            raise

    def settled_range(self, partition: int) -> tuple[int, int]:
        """``(low, end)`` of what a read_committed reader may trust: ``end`` is the last
        stable offset once it has reached the high watermark seen when the read started."""
        from confluent_kafka import TopicPartition

        committed, uncommitted = self._consumers()
        tp = TopicPartition(self.topic, partition)
        _, high = uncommitted.get_watermark_offsets(tp, timeout=15, cached=False)
        deadline = self._clock() + SETTLE_S
        while True:
            low, stable = committed.get_watermark_offsets(tp, timeout=15, cached=False)
            if stable >= high:
                return low, stable
            if self._clock() >= deadline:
                raise KafkaClientError(
                    f"The commit log '{self.topic}' (partition {partition}) is held back by another writer's open "
                    f"write for more than {SETTLE_S:.0f}s (offsets {stable}..{high} not settled); retrying.",
                    retriable=True)
            self._sleep(0.05)

    def window(self, partition: int, start: int, end: int) -> list[Record]:
        """The committed records in ``[start, end)``."""
        from confluent_kafka import TopicPartition

        consumer = self._consumers()[0]
        consumer.assign([TopicPartition(self.topic, partition, start)])
        try:
            return self._fetch(consumer, end)
        finally:
            consumer.unassign()  # a kept reader fetches nothing until the next read assigns it

    def close(self) -> None:
        self._readers = None
        doubt, self._doubt = self._doubt, None
        held, self._held = self._held, contextlib.ExitStack()
        if doubt is None:
            held.close()  # the readers are kept for the process's next step
        else:
            held.__exit__(type(doubt), doubt, doubt.__traceback__)  # the sessions close them

    def _consumers(self) -> tuple[ConsumerLike, ConsumerLike]:
        """A read_committed consumer (reads, and the last stable offset) and a
        read_uncommitted one (the high watermark).

        Both are the driver process's, kept from earlier steps by their full settings
        (:data:`~kafka_eos_ds.kafka.driver_session.SESSIONS`, as the coordinator client
        is): building them cost each step two clients' bootstrap and group-coordinator
        lookups. Only the clients are kept, never what they read: every read asks the
        offsets again and fetches again (docs/dev/decisions.md, "The commit log is read
        afresh by every read"). A reader is unassigned after each read, so a kept one
        fetches nothing between steps; after a failed read both are closed."""
        if self._readers is None:
            def consumer(isolation: str) -> ConsumerLike:
                conf = client_config(self._conf, "commit_log", **{
                    "group.id": reader_group(self.prefix), "enable.auto.commit": False,
                    "isolation.level": isolation, "fetch.wait.max.ms": 10, "enable.partition.eof": True})
                return self._held.enter_context(self._sessions.session(conf, self._clients.consumer,
                                                                       kind=(type(self._clients), "log consumer")))

            self._readers = (consumer("read_committed"), consumer("read_uncommitted"))
        return self._readers

    def _fetch(self, consumer: ConsumerLike, end: int) -> list[Record]:
        from confluent_kafka import KafkaError

        records: list[Record] = []
        while True:
            msg: Any = consumer.poll(10)  # a record, or an error event (whose offset is None)
            if msg is None:
                raise KafkaClientError(f"Reading the commit log '{self.topic}' timed out", retriable=True)
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    return records
                raise client_error(f"Reading the commit log '{self.topic}' failed", error, self._conf)
            offset = int(msg.offset())
            if offset >= end:
                return records
            records.append((offset, msg.key() or b"", msg.value(), msg.timestamp()[1]))
            if offset >= end - 1:
                return records


def reader_group(prefix: str) -> str:
    """The consumer group of the commit-log reader. librdkafka's consumers need one even
    when they only assign partitions, and look its coordinator up, which Kafka ACLs
    check; named under the sink's prefix, one prefixed Group ACL on
    ``transactionalIdPrefix`` covers it (docs/sink.md, "Secured clusters")."""
    return f"{prefix}.commit-log-reader"
