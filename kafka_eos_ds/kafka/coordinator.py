"""Transaction-coordinator calls on another process's transactions (kafka-python).

librdkafka cannot end, fence or list a transaction it did not open, so these calls go
through kafka-python's request classes: EndTxn (commit or abort by producer id and
epoch), InitProducerId (fence an id: bump its epoch, abort what is open under it),
DescribeTransactions and ListTransactions; and, to commit a batch's source offsets inside
one of its transactions, AddOffsetsToTxn and TxnOffsetCommit (what a producer's
sendOffsetsToTransaction sends). EndTxn stays at v4 and InitProducerId at v4:
librdkafka speaks transaction protocol v1, and newer versions change the semantics
(Kafka 4's transaction version 2 bumps the epoch per transaction; KIP-939 fields).

kafka-python's errors become the project's through :mod:`.errors` (its retriable
classes stay retriable; anything else that is raised propagates, not retriable); its
private API is reached only through :mod:`.kafka_python`, which checks the installed
version.
"""

from __future__ import annotations

import enum
import re
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from kafka_eos_ds.errors import ConfigError, KafkaClientError, TransactionError
from kafka_eos_ds.kafka.clients import ChannelLike, CoordinatorAdminLike
from kafka_eos_ds.kafka.errors import mapping_client_errors
from kafka_eos_ds.kafka.kafka_python import CoordinatorChannel, to_kafka_python

# Kafka error codes the sink reasons about (org.apache.kafka.common.protocol.Errors).
NONE = 0
REQUEST_TIMED_OUT = 7
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
INVALID_TRANSACTION_TIMEOUT = 50
CONCURRENT_TRANSACTIONS = 51
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
UNSTABLE_OFFSET_COMMIT = 88
PRODUCER_FENCED = 90

RETRIABLE = frozenset({REQUEST_TIMED_OUT, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE,
                       NOT_COORDINATOR, CONCURRENT_TRANSACTIONS})
_MOVED = frozenset({COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR})


class TxnStatus(str, enum.Enum):
    """A transaction's state as the coordinator names it (Kafka's TransactionState).

    Compares equal to the broker's string, so a state this enum does not list (a newer
    broker's) still flows through as a plain string."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"


OPEN_STATES = (TxnStatus.ONGOING, TxnStatus.PREPARE_COMMIT, TxnStatus.PREPARE_ABORT, TxnStatus.PREPARE_EPOCH_FENCE)

TIMEOUT_FIX = ("Check the sink option 'kafka.transaction.timeout.ms' against the broker's "
               "'transaction.max.timeout.ms'.")


@dataclass(frozen=True)
class TxnState:
    """The coordinator's view of one transactional id (DescribeTransactions)."""

    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    start_time_ms: int = -1
    timeout_ms: int = -1  # the transaction timeout its producer registered


def _txn_state(transactional_id: str, desc: Any) -> TxnState:
    return TxnState(transactional_id, str(getattr(desc.state, "value", desc.state)), desc.producer_id,
                    desc.producer_epoch, desc.transaction_start_time_ms,
                    int(getattr(desc, "transaction_timeout_ms", -1)))


def error_name(code: int) -> str:
    import kafka.errors as kerrors

    return str(kerrors.for_code(code).__name__)


IN_FLIGHT = 64


class TransactionCoordinator:
    """Talks to the transaction coordinators of a cluster for transactions owned elsewhere.

    Parameters
    ----------
    conf : Mapping
        librdkafka-style client settings (``bootstrap.servers``, security settings).
    admin_factory : callable, optional
        Builds the client from kafka-python keyword settings (default: kafka-python's
        ``KafkaAdminClient``).
    channel_factory : callable, optional
        Builds the channel to the coordinators over that client (default:
        :class:`~kafka_eos_ds.kafka.kafka_python.CoordinatorChannel`).
    clock, sleep : callable, optional
        Monotonic seconds and a wait, for the retries of a fence (the sink's runtime's).
    """

    def __init__(self, conf: Mapping[str, Any], *, admin_factory: Callable[..., CoordinatorAdminLike] | None = None,
                 channel_factory: Callable[[Any], ChannelLike] = CoordinatorChannel,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        if admin_factory is None:
            from kafka.admin import KafkaAdminClient

            admin_factory = KafkaAdminClient
        # The coordinator's own client id unless the user set one (kafka.client.id). Many
        # requests in flight per connection: a batch's commits and fences go out together
        # (the committer's pool), and kafka-python's default of 5 paused the connection
        # ("Node paused: max_in_flight") and sent them back to retry, 21 times in one
        # 64-partition run.
        settings = {"client_id": "kafka-eos-coordinator", "max_in_flight_requests_per_connection": IN_FLIGHT,
                    **to_kafka_python(conf)}
        self._conf = conf  # for errors: the servers to name, the secrets to hide
        self._clock = clock
        self._sleep = sleep
        with mapping_client_errors("connect the transaction-coordinator client", conf):
            self._admin = admin_factory(**settings)
        self._channel = channel_factory(self._admin)

    def close(self) -> None:
        try:
            self._admin.close()
        except Exception:  # closing must never mask the error that made us close
            pass

    def refresh(self) -> None:
        """Read the cluster's brokers again: for a client kept from an earlier driver step
        (:mod:`.driver_session`), so that it lists transactions on every broker, as a new
        client would."""
        with mapping_client_errors("refresh the cluster's brokers", self._conf):
            self._channel.refresh()

    def __enter__(self) -> "TransactionCoordinator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- requests -----------------------------------------------------------

    def _send_to_coordinator(self, transactional_id: str, request: Any, *, group: bool = False) -> Any:
        """Send ``request`` to the transaction coordinator of ``transactional_id`` (or, with
        ``group``, to the group coordinator of the group of that name)."""
        try:
            with mapping_client_errors(f"Coordinator call for {transactional_id} failed", self._conf):
                response = self._channel.send(transactional_id, request, group=group)
        except Exception:
            self._channel.forget(transactional_id, group=group)  # it may have moved
            raise
        if getattr(response, "error_code", NONE) in _MOVED:
            self._channel.forget(transactional_id, group=group)
        return response

    def send_offsets(self, transactional_id: str, producer_id: int, epoch: int, group_id: str,
                     offsets: Mapping[str, Mapping[str, int]]) -> None:
        """Add ``offsets`` (``{"topic": {"partition": next_offset}}``) for ``group_id`` to the
        open transaction of ``transactional_id``: AddOffsetsToTxn, then TxnOffsetCommit.

        The offsets become the group's committed offsets when, and only when, that
        transaction commits. The caller checks the transaction is open first: on a
        finished transaction AddOffsetsToTxn would start a new one.
        """
        from kafka.protocol.producer.transaction import AddOffsetsToTxnRequest, TxnOffsetCommitRequest

        add = AddOffsetsToTxnRequest(transactional_id=transactional_id, producer_id=int(producer_id),
                                     producer_epoch=int(epoch), group_id=group_id, max_version=3)
        self._raise_for(int(self._send_to_coordinator(transactional_id, add).error_code),
                        f"AddOffsetsToTxn({transactional_id}, group {group_id!r})")
        topic_type = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
        part_type = topic_type.TxnOffsetCommitRequestPartition
        topics = [topic_type(name=t, partitions=[part_type(partition_index=int(p), committed_offset=int(o),
                                                           committed_leader_epoch=-1, committed_metadata="")
                                                 for p, o in sorted(parts.items(), key=lambda kv: int(kv[0]))])
                  for t, parts in sorted(offsets.items())]
        # No group membership: generation -1 and an empty member id (the group must have
        # no active members, which holds for a query's own group).
        commit = TxnOffsetCommitRequest(transactional_id=transactional_id, group_id=group_id,
                                        producer_id=int(producer_id), producer_epoch=int(epoch), generation_id=-1,
                                        member_id="", group_instance_id=None, topics=topics, max_version=3)
        response = self._send_to_coordinator(group_id, commit, group=True)
        for topic in response.topics:
            for part in topic.partitions:
                if part.error_code in _MOVED:  # per partition here, not in the response's header
                    self._channel.forget(group_id, group=True)
                self._raise_for(int(part.error_code), f"TxnOffsetCommit({transactional_id}, group {group_id!r}, "
                                                      f"{topic.name}-{part.partition_index})")

    def commit_offsets(self, group_id: str, offsets: Mapping[str, Mapping[str, int]]) -> None:
        """Commit ``offsets`` to ``group_id`` outside any transaction."""
        from kafka.structs import OffsetAndMetadata, TopicPartition

        request = {TopicPartition(t, int(p)): OffsetAndMetadata(int(o), "", None)
                   for t, parts in offsets.items() for p, o in parts.items()}
        with mapping_client_errors(f"Committing offsets to group {group_id!r} failed", self._conf):
            result = self._admin.alter_group_offsets(group_id, request)
        for tp, error in result.items():
            code = int(getattr(error, "errno", NONE) or NONE)
            self._raise_for(code, f"OffsetCommit(group {group_id!r}, {tp.topic}-{tp.partition})")

    def group_offsets(self, group_id: str, partitions: Mapping[str, Iterable[Any]], *,
                      timeout_s: float = 60.0) -> dict[str, dict[str, int]]:
        """The committed offsets of ``group_id`` on ``partitions`` (``{"topic": partitions}``,
        each partition a number or its string): ``{"topic": {"partition": offset}}``, a
        partition without one left out.

        Asked with require_stable (KIP-447, OffsetFetch v7). A transaction carrying offsets
        is committed once the coordinator logs the decision; its marker reaches the group a
        moment later, and until then a plain fetch answers the offsets from before the
        commit (a CI run read ``{}`` right after a commit). The group coordinator answers
        UNSTABLE_OFFSET_COMMIT for such a partition instead: asked again, with backoff,
        until every partition is stable or ``timeout_s`` passes.
        """
        from kafka.protocol.consumer.group import OffsetFetchRequest

        topic_type = OffsetFetchRequest.OffsetFetchRequestTopic
        topics = [topic_type(name=t, partition_indexes=sorted({int(p) for p in parts}))
                  for t, parts in sorted(partitions.items())]
        what = f"OffsetFetch(group {group_id!r})"
        waiting: list[int] = []
        for _attempt in self._attempts(timeout_s):
            request = OffsetFetchRequest(group_id=group_id, topics=topics, require_stable=True, max_version=7)
            response = self._send_to_coordinator(group_id, request, group=True)
            codes = [int(getattr(response, "error_code", NONE))] + [
                int(part.error_code) for topic in response.topics for part in topic.partitions]
            waiting = [c for c in codes if c == UNSTABLE_OFFSET_COMMIT or c in RETRIABLE]
            for code in codes:
                if code not in waiting:
                    self._raise_for(code, what)
            if not waiting:
                held: dict[str, dict[str, int]] = {}
                for topic in response.topics:
                    for part in topic.partitions:
                        if part.committed_offset >= 0:
                            held.setdefault(topic.name, {})[str(part.partition_index)] = int(part.committed_offset)
                return held
        raise KafkaClientError(f"{what} failed: {error_name(waiting[0])} for {timeout_s:.0f} s",
                               retriable=True, code=waiting[0])

    @staticmethod
    def _raise_for(code: int, what: str) -> None:
        if code == NONE:
            return
        raise KafkaClientError(f"{what} failed: {error_name(code)}", retriable=code in RETRIABLE, code=code)

    def end_txn(self, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> int:
        """Send EndTxn; return the broker's error code (0 = done)."""
        from kafka.protocol.producer.transaction import EndTxnRequest

        request = EndTxnRequest(transactional_id=transactional_id, producer_id=int(producer_id),
                                producer_epoch=int(epoch), committed=bool(commit), max_version=4)
        return int(self._send_to_coordinator(transactional_id, request).error_code)

    def fence(self, transactional_id: str, transaction_timeout_ms: int, *, timeout_s: float = 60.0) -> None:
        """Bump the id's epoch with InitProducerId, which aborts its open transaction.

        The coordinator answers CONCURRENT_TRANSACTIONS until the abort completes, so
        the call is retried with backoff until it succeeds or ``timeout_s`` passes.
        """
        from kafka.protocol.producer.transaction import InitProducerIdRequest

        last: KafkaClientError | None = None
        code = NONE
        for _attempt in self._attempts(timeout_s):
            request = InitProducerIdRequest(transactional_id=transactional_id,
                                            transaction_timeout_ms=int(transaction_timeout_ms),
                                            producer_id=-1, producer_epoch=-1, max_version=4)
            try:
                code = int(self._send_to_coordinator(transactional_id, request).error_code)
            except KafkaClientError as exc:
                code, last = -1, exc
            else:
                last = None
            if code == NONE:
                return
            if code == INVALID_TRANSACTION_TIMEOUT:
                raise ConfigError(f"The broker refused transaction timeout {transaction_timeout_ms} ms. {TIMEOUT_FIX}")
            if code not in RETRIABLE and code != -1:
                raise TransactionError(f"Could not abort the open transaction of {transactional_id}: "
                                       f"{error_name(code)}")
        raise TransactionError(f"Could not abort the open transaction of {transactional_id} within "
                               f"{timeout_s:.0f}s (last: {last or error_name(code)})", retriable=True)

    def _attempts(self, timeout_s: float) -> Iterator[None]:
        """One step per attempt of a call the coordinator may answer "not yet": between
        attempts a backoff of 20 ms doubling to 1 s; none after ``timeout_s`` has passed
        (the caller then raises its timeout)."""
        deadline = self._clock() + timeout_s
        delay = 0.02
        while True:
            yield
            if self._clock() >= deadline:
                return
            self._sleep(delay)
            delay = min(delay * 2, 1.0)

    def describe(self, transactional_id: str) -> TxnState | None:
        """The coordinator's state of one id, or None if it does not know the id."""
        found = self._describe([transactional_id], transactional_id)
        desc = None if found is None else found.get(transactional_id)
        return None if desc is None else _txn_state(transactional_id, desc)

    def describe_many(self, transactional_ids: Sequence[str]) -> dict[str, TxnState | None]:
        """The coordinators' states of several ids: one DescribeTransactions per coordinator
        (one per id only when some id is unknown, to tell which)."""
        ids = list(dict.fromkeys(transactional_ids))
        if not ids:
            return {}
        found = self._describe(ids, f"{len(ids)} ids")
        if found is None:
            return {tid: self.describe(tid) for tid in ids}
        return {tid: (_txn_state(tid, found[tid]) if tid in found else None) for tid in ids}

    def _describe(self, ids: list[str], shown: str) -> dict[str, Any] | None:
        """DescribeTransactions of ``ids``; None if the coordinator does not know one of them."""
        import kafka.errors as kerrors

        try:
            with mapping_client_errors(f"DescribeTransactions({shown}) failed", self._conf):
                try:
                    return dict(self._admin.describe_transactions(ids))
                except kerrors.TransactionalIdNotFoundError:
                    return None
        except KafkaClientError:
            for tid in ids:
                self._channel.forget(tid, group=False)  # the coordinator may have moved
            raise

    def list_transactions(self, id_regex: str | None = None, open_only: bool = True) -> list[tuple[str, int, str]]:
        """``(transactional_id, producer_id, state)`` of every coordinator's transactions.

        The id filter is sent to brokers that support it (Kafka 4.1+, KIP-1152) and is
        applied here for older brokers (3.9 lists everything).
        """
        from kafka.protocol.admin.transactions import ListTransactionsRequest

        states = [s.value for s in OPEN_STATES] if open_only else None
        use_pattern = id_regex is not None and self._channel.api_version(ListTransactionsRequest) >= 2
        with mapping_client_errors("ListTransactions failed", self._conf):
            by_broker = self._admin.list_transactions(state_filters=states,
                                                      transactional_id_pattern=id_regex if use_pattern else None)
        rx = re.compile(id_regex) if id_regex else None
        out = {}
        for listings in by_broker.values():
            for t in listings:
                if rx is None or rx.match(t.transactional_id):
                    out[t.transactional_id] = (t.transactional_id, t.producer_id,
                                               str(getattr(t.state, "value", t.state)))
        return [out[k] for k in sorted(out)]
