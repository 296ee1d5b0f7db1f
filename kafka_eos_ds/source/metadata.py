"""Driver-side questions to Kafka: which partitions, which offsets, which group positions.

One :class:`KafkaMetadata` lives in the driver-side reader process. It answers with one
batched ListOffsets request per question (AdminClient.list_offsets), asking with the
query's isolation level: under ``read_committed`` the "latest" offset Kafka returns is
the partition's last stable offset, so a range never ends inside an open transaction.
confluent-kafka errors are mapped by :func:`~kafka_eos_ds.kafka.errors.mapping_client_errors`.
"""

from __future__ import annotations

import re
import time
from typing import Any, Callable, Iterable

from kafka_eos_ds.errors import ConfigError, KafkaClientError
from kafka_eos_ds.kafka.clients import AdminLike, ConsumerLike
from kafka_eos_ds.kafka.errors import AuthWatch, mapping_client_errors
from kafka_eos_ds.kafka.settings import client_config, redact
from kafka_eos_ds.source.offsets import Offsets, TopicPartitionKey
from kafka_eos_ds.source.options import SourceOptions, SubscriptionKind

_TIMEOUT_S = 30.0
# One ListOffsets attempt of an offset look-up: 2 s, doubled at each retry up to 10 s. A
# request sent to a dead leader waits for it (27 s measured, then FENCED_LEADER_EPOCH), and
# the cluster names the new leader only once its controller fences the dead broker (about
# 9 s): short first attempts let a new client, with fresh metadata, ask the new leader
# soon after; a slow but healthy cluster still gets the longer attempts.
_FIRST_ATTEMPT_S = 2.0
_ATTEMPT_S = 10.0

# Kafka's internal topics: a pattern subscription never matches them (as the Java
# consumer's exclude.internal.topics); other topics starting with "_" are ordinary topics.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state",
                             "__cluster_metadata"})


class KafkaMetadata:
    """Partition discovery and offset look-ups for one source, on the driver.

    Its clients are built on first use, from their settings, by ``admin_factory``
    (confluent-kafka's ``AdminClient`` unless given) and ``consumer_factory``
    (``Consumer``); unit tests pass fakes.
    """

    def __init__(self, options: SourceOptions, *, admin_factory: Callable[[dict[str, Any]], AdminLike] | None = None,
                 consumer_factory: Callable[[dict[str, Any]], ConsumerLike] | None = None) -> None:
        self._options = options
        self._admin_factory, self._consumer_factory = admin_factory, consumer_factory
        self._admin: AdminLike | None = None
        self._consumer: ConsumerLike | None = None
        self._admin_conf: dict[str, Any] = {}
        self._consumer_conf: dict[str, Any] = {}
        # Each client's error callback: the authentication or TLS error behind a failed call.
        self._admin_watch, self._consumer_watch = AuthWatch(), AuthWatch()
        self._pattern = re.compile(options.subscription.pattern) if options.subscription.pattern else None

    # -- clients -----------------------------------------------------------------------
    def _conf(self) -> dict[str, str]:
        return dict(self._options.client_conf)

    def admin(self) -> AdminLike:
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin_conf = client_config({k: v for k, v in self._conf().items() if k != "isolation.level"},
                                             "source_metadata", error_cb=self._admin_watch)
            self._admin = _client(self._admin_factory or AdminClient, self._admin_conf)
        return self._admin

    def consumer(self) -> ConsumerLike:
        if self._consumer is None:
            from confluent_kafka import Consumer

            self._consumer_conf = client_config(self._conf(), "source_metadata", **{
                "group.id": self._options.group_id, "enable.auto.commit": False, "error_cb": self._consumer_watch})
            self._consumer = _client(self._consumer_factory or Consumer, self._consumer_conf)
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
        admin = self.admin()
        with mapping_client_errors("list topics", self._admin_conf, watch=self._admin_watch, client=admin):
            topics = admin.list_topics(timeout=_TIMEOUT_S).topics
        found: set[TopicPartitionKey] = set()
        for name, meta in topics.items():
            if meta.error is not None:
                continue
            if sub.kind is SubscriptionKind.SUBSCRIBE and name not in sub.topics:
                continue
            matches = self._pattern is not None and self._pattern.fullmatch(name)
            if sub.kind is SubscriptionKind.PATTERN and (name in INTERNAL_TOPICS or not matches):
                continue
            found.update((name, p) for p in meta.partitions)
        if sub.kind is SubscriptionKind.ASSIGN:
            _check_assigned(sub.assigned, found)
            found &= set(sub.assigned)
        return found

    def earliest(self, tps: Iterable[TopicPartitionKey]) -> Offsets:
        from confluent_kafka.admin import OffsetSpec

        return self._known_offsets(OffsetSpec.earliest, "earliest", tps)

    def latest(self, tps: Iterable[TopicPartitionKey]) -> Offsets:
        """Under read_committed: the last stable offset (end of committed data)."""
        from confluent_kafka.admin import OffsetSpec

        return self._known_offsets(OffsetSpec.latest, "latest", tps)

    def _known_offsets(self, spec: Callable[[], Any], which: str, tps: Iterable[TopicPartitionKey]) -> Offsets:
        """Every partition's ``which`` offset, asked again for up to _TIMEOUT_S while the
        partitions' leaders move (a broker died): a partition answered without an offset
        (-1001, and no error), or a transient error (FENCED_LEADER_EPOCH,
        LEADER_NOT_AVAILABLE). Both were seen at every broker kill of a 3-broker cluster;
        the first, taken for an offset, read as offsets going backwards (a false data loss,
        and failOnDataLoss=false would have recorded -1001 as the batch's end), the second
        failed the query."""
        wanted, found = set(tps), Offsets()
        deadline, delay, attempt_cap = time.monotonic() + _TIMEOUT_S, 0.1, _FIRST_ATTEMPT_S
        while True:
            try:
                attempt_s = min(attempt_cap, max(1.0, deadline - time.monotonic()))
                attempt_cap = min(attempt_cap * 2, _ATTEMPT_S)
                answer = self._list_offsets({tp: spec() for tp in sorted(wanted - found.keys())}, attempt_s)
                last = "no offset (-1001)"
            except KafkaClientError as error:
                if not error.retriable:
                    raise
                answer, last = {}, str(error)
            found.update({tp: offset for tp, offset in answer.items() if offset >= 0})
            missing = sorted(wanted - found.keys())
            if not missing:
                return found
            # librdkafka's admin client goes on sending the leader epoch it cached, and the
            # new leader goes on refusing it (FENCED_LEADER_EPOCH, measured for the whole
            # 12 s a broker was down): a new client asks with fresh metadata.
            self._admin = None
            if time.monotonic() + delay > deadline:
                raise KafkaClientError(
                    f"Kafka answered no {which} offset for {', '.join(f'{t}-{p}' for t, p in missing)} within "
                    f"{_TIMEOUT_S:.0f}s (last answer: {last}): a partition whose leader is still being elected "
                    "answers so; restart the query once every partition has a leader (kafka-topics --describe "
                    "shows them).", retriable=True)
            time.sleep(delay)
            delay = min(delay * 2, 2.0)

    def for_times(self, stamps: dict[TopicPartitionKey, int]) -> dict[TopicPartitionKey, int | None]:
        """First offset with timestamp >= the given one; None where there is none."""
        from confluent_kafka.admin import OffsetSpec

        found = self._list_offsets({tp: OffsetSpec.for_timestamp(ts) for tp, ts in stamps.items()})
        return {tp: (off if off >= 0 else None) for tp, off in found.items()}

    def committed(self, tps: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, int | None]:
        """The source's consumer group's committed offsets; None where it has none."""
        from confluent_kafka import TopicPartition

        tps = sorted(tps)
        if not tps:
            return {}
        consumer = self.consumer()
        group_id = self._options.group_id
        # On a fresh or restarted broker the group's coordinator is still being elected or
        # loaded (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS): asked again, it answers.
        deadline, delay = time.monotonic() + _TIMEOUT_S, 0.1
        while True:
            try:
                with mapping_client_errors(f"read committed offsets of group {group_id!r}", self._consumer_conf,
                                           watch=self._consumer_watch):
                    result = consumer.committed([TopicPartition(t, p) for t, p in tps], timeout=_TIMEOUT_S)
                break
            except KafkaClientError as error:
                if not (error.retriable or _coordinator_moving(error.__cause__)) or time.monotonic() + delay > deadline:
                    if _timed_out(error.__cause__):
                        # A read_committed fetch of a group's offsets waits while a
                        # transaction that commits offsets to the group is open.
                        raise KafkaClientError(
                            f"The committed offsets of group {group_id!r} could not be read within {_TIMEOUT_S:.0f}s: "
                            "a transaction that commits offsets to the group may still be open (an exactly-once "
                            "sink's batch, with 'sourceGroupId', in flight when its query stopped). It ends when "
                            "that query runs again, when the sink's kafka.transaction.timeout.ms passes, or with "
                            "'kafka-eos transactions abort --prefix <the sink's prefix>' (docs/troubleshooting.md, "
                            "\"The group's offsets cannot be read\").", retriable=True) from error
                    raise
            time.sleep(delay)
            delay = min(delay * 2, 2.0)
        return {(r.topic, r.partition): (r.offset if r.offset >= 0 else None) for r in result}

    def _list_offsets(self, specs: dict[Any, Any], timeout_s: float = _TIMEOUT_S) -> Offsets:
        from confluent_kafka import IsolationLevel, TopicPartition

        if not specs:
            return {}
        isolation = (IsolationLevel.READ_COMMITTED if self._options.read_committed
                     else IsolationLevel.READ_UNCOMMITTED)
        request = {TopicPartition(t, p): spec for (t, p), spec in specs.items()}
        admin = self.admin()
        with mapping_client_errors("list offsets", self._admin_conf, watch=self._admin_watch, client=admin):
            futures = admin.list_offsets(request, isolation_level=isolation, request_timeout=timeout_s)
            return {(tp.topic, tp.partition): fut.result().offset for tp, fut in futures.items()}


def _coordinator_moving(exc: BaseException | None) -> bool:
    from confluent_kafka import KafkaError

    err = exc.args[0] if exc is not None and exc.args else None
    return err is not None and hasattr(err, "code") and err.code() in (
        KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE)


def _timed_out(error: Any) -> bool:
    from confluent_kafka import KafkaError, KafkaException

    return isinstance(error, KafkaException) and error.args[0].code() == KafkaError._TIMED_OUT


def _client(factory: Callable[[dict[str, Any]], Any], conf: dict[str, Any]) -> Any:
    from confluent_kafka import KafkaException

    try:
        return factory(conf)
    except (KafkaException, ValueError, TypeError) as exc:
        raise ConfigError(f"Kafka client settings (kafka.* options) were refused: {exc}. "
                          f"Settings given: {redact(conf)}") from exc


def _check_assigned(assigned: Iterable[TopicPartitionKey], existing: set[TopicPartitionKey]) -> None:
    # The built-in source fails a query whose 'assign' names a partition that does not
    # exist, rather than reading nothing from it forever.
    missing = sorted(set(assigned) - existing)
    if missing:
        shown = ", ".join(f"{t}-{p}" for t, p in missing)
        raise ConfigError(f"Option 'assign' names partitions that do not exist: {shown}. Check the topic names "
                          "and partition numbers (or create the topic first).")
