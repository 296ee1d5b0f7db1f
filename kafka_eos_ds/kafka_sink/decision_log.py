"""The sink's commit decisions, kept in a compacted Kafka topic.

One record per decision step, keyed ``{transactionalIdPrefix}|{writer}`` (the writer
key of :mod:`kafka_eos_ds.twophase.identity`: ``q:<query id>`` for a stream,
``f:<query id>`` for its writes inside foreachBatch, ``a:<txnAppId>``, ``j:<job id>``),
valued ``{"queryId", "batchId", "state": "decided"|"done"|"abandoned", "transactions":
[...]}``. Kept in Kafka (not in the checkpoint) so it works for any checkpoint file
system and survives the loss of the checkpoint. Compaction keeps the latest record per
writer; a finished job's key is deleted (a tombstone).

The reader reads backwards from the end in small windows, so a busy shared topic costs
a window, not a scan. All of a prefix's records live in one partition: the first goes
to ``crc32(prefix) % partitions``, every later one to the partition that holds the
prefix's latest record, found by key. Partitions added to the topic later therefore
never move them.

Writes are transactions of one producer per writer (:func:`~.transactional_ids.decision_writer`),
read with ``read_committed``. A write either committed or never becomes visible:
:meth:`KafkaDecisionLog.fence_writers` (every driver step calls it before reading)
fences an older producer of the same writer whose write stalled, so that write cannot
land after the step has read the log and acted on what it read. The same fence is the
step's token: :meth:`KafkaDecisionLog.claim` commits a record with the step's own producer,
which fails once a newer step has run ``init_transactions`` on the writer, and the sink
aborts transactions only after a claim succeeded (``twophase.steps``, ``Steps.fence``). A
write is pinned to the log's :meth:`~KafkaDecisionLog.position` its planner read: its
commit refuses it while undecided if a claim of its writer came from there on
(:meth:`~KafkaDecisionLog.claimed_since`; a step that claimed between the planner and the
commit may have observed the write's open transactions to abort them). The topic itself
(created if missing, read up to its settled end in windows) is :mod:`.commit_log`'s.
"""

from __future__ import annotations

import json
import time
import zlib
from typing import Any, Callable, Mapping

from kafka_eos_ds.errors import ConfigError, KafkaClientError
from kafka_eos_ds.kafka.driver_session import SESSIONS, ClientSessions
from kafka_eos_ds.kafka.errors import client_error
from kafka_eos_ds.kafka.producer_start import init_transactions
from kafka_eos_ds.kafka.settings import client_config
from kafka_eos_ds.kafka_sink import transactional_ids
from kafka_eos_ds.kafka_sink.commit_log import CommitLogReader, LogClients, ensure_topic
from kafka_eos_ds.kafka_sink.messages import KafkaHandle
from kafka_eos_ds.twophase import faults
from kafka_eos_ds.twophase.protocol import DECIDED, DONE, Decision

DEFAULT_TOPIC = "_kafka_eos_commit_log"
# The Kafka sink's decisions: their participants are transactions.
KafkaDecision = Decision[KafkaHandle]
WRITE_TIMEOUT_S = 60.0  # how long a decision write may take (its commit_transaction)
_WINDOW = 256
# A decision write is one record and a commit. Short, so that a writer that dies in the
# middle holds back readers of the topic (every sink sharing it) for seconds, not the
# librdkafka default of a minute; the broker aborts it after this.
WRITER_TIMEOUT_MS = 10_000
# How far back a search for unfinished jobs reads: a job's transactions are aborted by
# their timeout (at most the broker's transaction.max.timeout.ms, 15 min by default)
# long before this, and finishing them is then impossible anyway.
JOB_HORIZON_S = 3600.0


def partition_for(key: str, partitions: int) -> int:
    """The partition a prefix's first decision goes to (later ones follow it, see the module)."""
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
    prefix : str
        The sink's ``transactionalIdPrefix``.
    writer : str
        The writer family whose producer writes here ('' for a stream's own sink).
    clients : LogClients, optional
        Builds the log's clients (a test hands in its own).
    sessions : ClientSessions, optional
        Where the process keeps the log's readers between steps.
    clock, wall, sleep : callable, optional
        Monotonic seconds, the wall clock (records' timestamps) and a wait: the sink's
        runtime's (:mod:`kafka_eos_ds.kafka_sink.runtime`).
    """

    def __init__(self, conf: Mapping[str, Any], topic: str, prefix: str, writer: str = "",
                 clients: "LogClients" | None = None, *, sessions: ClientSessions = SESSIONS,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._conf = dict(conf)  # client_config keeps what the commit-log clients need
        self.topic = topic
        self.prefix = prefix
        self.writer = writer
        self._clients = clients or LogClients()
        self._sessions = sessions
        self._clock, self._wall, self._sleep = clock, wall, sleep
        self._producer: Any = None
        self._first: Any = None  # the producer fenced when the step began: the one a claim must use
        self._reads = CommitLogReader(self._conf, topic, prefix, self._clients, sessions, clock, sleep)
        self._partitions: int | None = None
        self._partition: int | None = None  # where this prefix's decisions are, once looked up

    # -- topic --------------------------------------------------------------

    def ensure_topic(self, metadata: Any = None) -> int:
        """Create the topic if missing; return its partition count (``metadata``: a
        confluent-kafka ClusterMetadata already fetched, which saves a round trip)."""
        if self._partitions is None:
            self._partitions = ensure_topic(self._conf, self.topic, self._clients, self._sleep, metadata)
        return self._partitions

    # -- write ---------------------------------------------------------------

    def fence_writers(self) -> None:
        """Become the writer's only decision producer: init_transactions on its id aborts an
        open write of an earlier producer and refuses it from then on."""
        from confluent_kafka import KafkaException

        if self._producer is not None:
            return
        self.ensure_topic()  # the topic exists, as compacted, before a producer asks for it
        producer = self._clients.producer(client_config(self._conf, "commit_log", **{
            "transactional.id": transactional_ids.decision_writer(self.prefix, self.writer), "acks": "all",
            "linger.ms": 0, "transaction.timeout.ms": _writer_timeout_ms(self._conf),
            "client.id": "kafka-eos-commit-log"}))
        try:
            # Connected first: a new writer starts in every driver step (producer_start).
            init_transactions(producer, self.topic)
        except KafkaException as exc:
            raise client_error(f"Cannot start the commit-log writer of '{self.prefix}' on '{self.topic}'", exc,
                               self._conf) from exc
        self._producer = producer
        if self._first is None:
            self._first = producer

    def claim(self) -> None:
        """Commit a record (a tombstone keyed ``fence:<writer>``: only its commit matters)
        with the producer fenced when this step began. It fails if a newer step has run
        ``init_transactions`` on the writer since, and also if this step lost that producer
        (a write that failed; a retry starts a new one, which proves nothing about what
        happened in between): the caller then aborts nothing."""
        if self._producer is None or self._producer is not self._first:
            raise KafkaClientError(
                f"The commit-log writer of '{self.prefix}' on '{self.topic}' that this driver step started with is "
                "gone (fenced by another driver of this sink, or a write failed): this step aborts nothing. "
                "Restarting the query runs it again.", retriable=False)
        self._produce(f"fence:{self.writer}", None, None)

    def write(self, key: str, decision: KafkaDecision) -> None:
        value = json.dumps(decision.to_json(), sort_keys=True, separators=(",", ":")).encode()
        # A batch without output stores its progress (sourceGroupId's offsets) with its done
        # record, in this writer's transaction: a plain OffsetCommit would let a driver whose
        # writer was fenced since (a zombie) move the group back.
        alone = decision.progress if decision.state == DONE and not decision.participants else None
        self._produce(key, value, decision.batch_id, alone)

    def forget(self, key: str) -> None:
        self._produce(key, None, None)

    def _produce(self, key: str, value: bytes | None, batch: int | None,
                 progress: Mapping[str, Any] | None = None) -> None:
        from confluent_kafka import KafkaException

        partition = self._locate()
        self.fence_writers()
        producer = self._producer
        try:
            producer.begin_transaction()
            producer.produce(self.topic, value=value, key=self._record_key(key), partition=partition)
            if progress is not None:
                send_offsets(producer, progress, self._clients, self._conf)
            faults.check("decision-before-commit", batch=batch)
            producer.commit_transaction(WRITE_TIMEOUT_S)
        except KafkaException as exc:
            error = exc.args[0]
            if error.txn_requires_abort():
                try:
                    producer.abort_transaction(60)  # definite: this decision is not in the log
                except KafkaException:
                    pass  # then the next writer's init_transactions aborts it
            elif not error.retriable():
                # Fenced by a newer producer (another driver of this writer), or fatal: this
                # write never becomes visible and this driver must not go on.
                self._producer = None
                raise client_error(
                    f"Writing the commit decision of '{self.prefix}' to '{self.topic}' failed", exc, self._conf,
                    fix="Another driver of this sink took over its commit log; this one stops.") from exc
            # Retriable (or abortable): the outcome is settled by the next writer's init_transactions.
            self._producer = None
            raise client_error(f"Writing the commit decision to '{self.topic}' failed", exc, self._conf) from exc

    # -- read ---------------------------------------------------------------

    def latest(self, key: str) -> KafkaDecision | None:
        wanted = self._record_key(key)
        # A tombstone of the key ends the search: the writer was forgotten.
        found = self._search(lambda k, d: k == wanted)
        return found[1] if found else None

    def latest_of(self, kind: str) -> KafkaDecision | None:
        head = self._record_key(kind + ":")
        found = self._search(lambda k, d: d is not None and k.startswith(head))
        return found[1] if found else None

    def unfinished(self, kind: str) -> list[tuple[str, KafkaDecision]]:
        head = self._record_key(kind + ":")
        seen: dict[bytes, KafkaDecision | None] = {}
        horizon_ms = (self._wall() - JOB_HORIZON_S) * 1000

        def collect(record_key: bytes, decision: KafkaDecision | None) -> bool:
            if record_key.startswith(head):
                seen.setdefault(record_key, decision)  # the first seen (backwards) is the latest
            return False

        self._search(collect, since_ms=horizon_ms)
        return [(k.decode()[len(self.prefix) + 1:], d) for k, d in seen.items() if d is not None and d.state == DECIDED]

    def _record_key(self, key: str) -> bytes:
        return f"{self.prefix}|{key}".encode()

    def _locate(self) -> int:
        if self._partition is None:
            self._search(lambda k, d: False, pin_only=True)
        assert self._partition is not None
        return self._partition

    def _search(self, want: Callable[[bytes, KafkaDecision | None], bool], *, since_ms: float | None = None,
                pin_only: bool = False) -> tuple[bytes, KafkaDecision | None] | None:
        """The latest record of this prefix that ``want(record_key, decision)`` accepts
        (``decision`` None: a tombstone, the writer forgotten), reading backwards, and no
        further back than ``since_ms`` if given:
        reading backwards: the pinned (or hashed) partition first, then the others; pins
        ``_partition`` to where the prefix's records are (the hashed one if none).

        A partition without the prefix is read to its start: a cost only after partitions
        were added (compaction keeps a partition to about one record per writer)."""
        partitions = self.ensure_topic()
        hashed = partition_for(self.prefix, partitions)
        order = [self._partition if self._partition is not None else hashed]
        order += [p for p in range(partitions) if p not in order]
        mine = self._record_key("")

        def search() -> tuple[bytes, KafkaDecision | None] | None:
            for partition in order:
                low, end = self._reads.settled_range(partition)
                pinned = False
                while end > low:
                    start = max(low, end - _WINDOW)
                    for _offset, record_key, value, ts in reversed(self._reads.window(partition, start, end)):
                        if since_ms is not None and 0 <= ts < since_ms:
                            return None
                        if not record_key.startswith(mine):
                            continue
                        pinned = True
                        self._partition = partition
                        if pin_only:
                            return None
                        decision = self._decode(record_key, value) if value is not None else None
                        if want(record_key, decision):
                            return record_key, decision
                    end = start
                if pinned:
                    return None  # the prefix lives in this partition: nothing more to find elsewhere
            self._partition = hashed
            return None

        found: tuple[bytes, KafkaDecision | None] | None = self._reads.reading(search)
        return found

    def position(self) -> int:
        """Where the prefix's records end now (the settled end of their partition). A
        planner reads it once its step is over; the write's commit step refuses the write
        if a claim of its writer was committed from there on (:meth:`claimed_since`)."""
        end: int = self._reads.reading(lambda: self._reads.settled_range(self._locate())[1])
        return end

    def claimed_since(self, position: int) -> bool:
        """Whether a claim of this log's writer (:meth:`claim`, by any driver step) was
        committed at or after ``position`` (:meth:`position`). Asked by a step that has
        fenced the writer: an older step's claim committed before that fence, or never will."""
        claim = self._record_key(f"fence:{self.writer}")

        def scan() -> bool:
            partition = self._locate()
            low, end = self._reads.settled_range(partition)
            start = max(low, position)
            while start < end:
                stop = min(end, start + _WINDOW)
                if any(key == claim for _offset, key, _value, _ts in self._reads.window(partition, start, stop)):
                    return True
                start = stop
            return False

        claimed: bool = self._reads.reading(scan)
        return claimed

    def _decode(self, record_key: bytes, value: bytes) -> KafkaDecision:
        try:
            return Decision.from_json(json.loads(value), KafkaHandle.from_json)
        except (ValueError, KeyError) as exc:
            raise ConfigError(f"The commit-log topic '{self.topic}' holds a record for '{record_key!r}' that is not "
                              f"a kafka_eos decision ({exc}); option 'commitLogTopic' must name a topic used only "
                              "by kafka_eos sinks.") from exc

    def close(self) -> None:
        # Every write committed or aborted its transaction before returning: nothing to flush.
        self._producer = self._first = None
        self._reads.close()


def send_offsets(producer: Any, progress: Mapping[str, Any], clients: "LogClients", conf: Mapping[str, Any]) -> None:
    """Add ``progress``'s offsets for its group to ``producer``'s open transaction
    (AddOffsetsToTxn + TxnOffsetCommit, without group membership, as the task
    transactions' are)."""
    from confluent_kafka import TopicPartition

    group = str(progress["group"])
    member = clients.consumer(client_config(conf, "commit_log", **{
        "group.id": group, "enable.auto.commit": False}))
    try:
        metadata = member.consumer_group_metadata()
    finally:
        member.close()
    positions = [TopicPartition(topic, int(part), int(offset))
                 for topic, parts in sorted(progress["offsets"].items())
                 for part, offset in sorted(parts.items(), key=lambda kv: int(kv[0]))]
    producer.send_offsets_to_transaction(positions, metadata, WRITE_TIMEOUT_S)


def _writer_timeout_ms(conf: Mapping[str, Any]) -> int:
    """The decision writer's transaction timeout: short (:data:`WRITER_TIMEOUT_MS`), but
    never below what librdkafka requires of a user's ``socket.timeout.ms`` (at most the
    transaction timeout + 100 ms)."""
    socket_ms = next((v for k, v in conf.items() if k.lower() == "socket.timeout.ms"), None)
    try:
        return max(WRITER_TIMEOUT_MS, int(str(socket_ms)) - 100) if socket_ms is not None else WRITER_TIMEOUT_MS
    except ValueError:
        return WRITER_TIMEOUT_MS  # librdkafka's own check names the bad value
