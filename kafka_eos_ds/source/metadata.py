"""Driver-side questions to Kafka: which partitions, which offsets, which group positions.

One :class:`KafkaMetadata` lives in the driver-side reader process. It answers with one
batched ListOffsets request per question (AdminClient.list_offsets), asking with the
query's isolation level: under ``read_committed`` the "latest" offset Kafka returns is
the partition's last stable offset, so a range never ends inside an open transaction.
confluent-kafka errors are translated into :class:`KafkaClientError` here and only here.
"""

from __future__ import annotations

import re
from typing import Iterable, Optional

from kafka_eos_ds.errors import ConfigError, KafkaClientError
from kafka_eos_ds.kafka.config import logged, redact
from kafka_eos_ds.source.offsets import Offsets, TopicPartitionKey
from kafka_eos_ds.source.options import SourceOptions, SubscriptionKind

_TIMEOUT_S = 30.0


class KafkaMetadata:
    """Partition discovery and offset look-ups for one source, on the driver."""

    def __init__(self, options: SourceOptions) -> None:
        self._options = options
        self._admin = None
        self._consumer = None
        self._pattern = re.compile(options.subscription.pattern) if options.subscription.pattern else None

    # -- clients -----------------------------------------------------------------------
    def _conf(self) -> dict[str, str]:
        return dict(self._options.client_conf)

    def admin(self):
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            conf = {k: v for k, v in self._conf().items() if k != "isolation.level"}
            self._admin = _client(AdminClient, conf)
        return self._admin

    def consumer(self):
        if self._consumer is None:
            from confluent_kafka import Consumer

            conf = {**self._conf(), "group.id": self._options.group_id, "enable.auto.commit": False}
            self._consumer = _client(Consumer, conf)
        return self._consumer

    def close(self) -> None:
        if self._consumer is not None:
            try:
                self._consumer.close()
            finally:
                self._consumer = None
        self._admin = None

    # -- questions ---------------------------------------------------------------------
    def partitions(self) -> set[TopicPartitionKey]:
        """The topic-partitions the subscription covers now (missing topics give none)."""
        sub = self._options.subscription
        try:
            topics = self.admin().list_topics(timeout=_TIMEOUT_S).topics
        except Exception as exc:
            raise _translate("list topics", exc) from exc
        found: set[TopicPartitionKey] = set()
        for name, meta in topics.items():
            if meta.error is not None:
                continue
            if sub.kind is SubscriptionKind.SUBSCRIBE and name not in sub.topics:
                continue
            matches = self._pattern is not None and self._pattern.fullmatch(name)
            if sub.kind is SubscriptionKind.PATTERN and (name.startswith("__") or not matches):
                continue
            found.update((name, p) for p in meta.partitions)
        if sub.kind is SubscriptionKind.ASSIGN:
            found &= set(sub.assigned)
        return found

    def earliest(self, tps: Iterable[TopicPartitionKey]) -> Offsets:
        from confluent_kafka.admin import OffsetSpec

        return self._list_offsets({tp: OffsetSpec.earliest() for tp in tps})

    def latest(self, tps: Iterable[TopicPartitionKey]) -> Offsets:
        """Under read_committed: the last stable offset (end of committed data)."""
        from confluent_kafka.admin import OffsetSpec

        return self._list_offsets({tp: OffsetSpec.latest() for tp in tps})

    def for_times(self, stamps: dict[TopicPartitionKey, int]) -> dict[TopicPartitionKey, Optional[int]]:
        """First offset with timestamp >= the given one; None where there is none."""
        from confluent_kafka.admin import OffsetSpec

        found = self._list_offsets({tp: OffsetSpec.for_timestamp(ts) for tp, ts in stamps.items()})
        return {tp: (off if off >= 0 else None) for tp, off in found.items()}

    def committed(self, tps: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, Optional[int]]:
        """The source's consumer group's committed offsets; None where it has none."""
        from confluent_kafka import TopicPartition

        tps = sorted(tps)
        if not tps:
            return {}
        consumer = self.consumer()
        group_id = self._options.group_id
        try:
            result = consumer.committed([TopicPartition(t, p) for t, p in tps], timeout=_TIMEOUT_S)
        except Exception as exc:
            raise _translate(f"read committed offsets of group {group_id!r}", exc) from exc
        return {(r.topic, r.partition): (r.offset if r.offset >= 0 else None) for r in result}

    def _list_offsets(self, specs: dict) -> Offsets:
        from confluent_kafka import IsolationLevel, TopicPartition

        if not specs:
            return {}
        isolation = (IsolationLevel.READ_COMMITTED if self._options.read_committed
                     else IsolationLevel.READ_UNCOMMITTED)
        request = {TopicPartition(t, p): spec for (t, p), spec in specs.items()}
        try:
            futures = self.admin().list_offsets(request, isolation_level=isolation, request_timeout=_TIMEOUT_S)
            return {(tp.topic, tp.partition): fut.result().offset for tp, fut in futures.items()}
        except Exception as exc:
            raise _translate("list offsets", exc) from exc


def _client(factory, conf: dict):
    from confluent_kafka import KafkaException

    try:
        return factory(logged(conf))
    except (KafkaException, ValueError, TypeError) as exc:
        raise ConfigError(f"Kafka client settings (kafka.* options) were refused: {exc}. "
                          f"Settings given: {redact(conf)}") from exc


def _translate(what: str, exc: Exception) -> Exception:
    from confluent_kafka import KafkaException

    if isinstance(exc, KafkaException) and exc.args:
        err = exc.args[0]
        retriable = bool(getattr(err, "retriable", lambda: False)())
        return KafkaClientError(f"Kafka call failed: {what}: {err}", retriable=retriable)
    return KafkaClientError(f"Kafka call failed: {what}: {exc}")
