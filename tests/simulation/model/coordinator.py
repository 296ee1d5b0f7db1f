"""A transaction coordinator that answers as Kafka's does (transaction protocol v1).

Each rule below names where it comes from in Apache Kafka
(``core/src/main/scala/kafka/coordinator/transaction/``: ``TransactionCoordinator`` =
TC, ``TransactionMetadata`` = TM, ``TransactionStateManager`` = TSM). Only what a client
of protocol v1 can observe is modelled: librdkafka's producers and the sink's EndTxn v4
never use transaction version 2 (which bumps the epoch on every EndTxn). Appends to the
transaction log are instantaneous here, so the "pending transition" of a real coordinator
exists only as the Prepare* states that wait for their markers.

* InitProducerId (TC.handleInitProducerId / prepareInitProducerIdTransit): a new id gets
  a new producer id at epoch 0. Empty / CompleteCommit / CompleteAbort: epoch + 1, or, when
  the epoch is exhausted (>= Short.MaxValue - 1, TM.isEpochExhausted), a new producer id
  at epoch 0 (TM.prepareProducerIdRotation). Ongoing: the open transaction is fenced
  first (TM.prepareFenceProducerEpoch: epoch + 1) and aborted at that epoch, and the
  answer is CONCURRENT_TRANSACTIONS; the client retries and, once the abort completed,
  gets epoch + 2 ("fencing an ongoing transaction costs an extra bump"). PrepareCommit /
  PrepareAbort: CONCURRENT_TRANSACTIONS. A timeout above transaction.max.timeout.ms:
  INVALID_TRANSACTION_TIMEOUT.
* AddPartitionsToTxn (TC.handleAddPartitionsToTransaction): unknown id or other producer
  id: INVALID_PRODUCER_ID_MAPPING; other epoch: PRODUCER_FENCED; Prepare*:
  CONCURRENT_TRANSACTIONS; otherwise Ongoing (the start time is set when it leaves
  Empty/Complete*, TM.prepareAddPartitions).
* EndTxn from a client, v1 (TC.endTransaction): unknown id or other producer id:
  INVALID_PRODUCER_ID_MAPPING; any other epoch, lower or higher: PRODUCER_FENCED (v1
  demands equality). Ongoing -> PrepareCommit/PrepareAbort, answered NONE as soon as that
  is in the transaction log, *before* the markers are written (visibility lags the
  answer). CompleteCommit + commit or CompleteAbort + abort: NONE (a retry). PrepareCommit
  + commit or PrepareAbort + abort: CONCURRENT_TRANSACTIONS. Every other pairing, and
  Empty: INVALID_TXN_STATE.
* Markers (TransactionMarkerChannelManager): written to every partition of the
  transaction, in any order and later; when all are written the state becomes Complete*.
* Timeouts (TC.abortTimedOutTransactions, every
  transaction.abort.timed.out.transaction.cleanup.interval.ms): an Ongoing transaction
  older than its timeout is fenced (epoch + 1) and aborted at that epoch.
* Expiry (TSM.removeExpiredTransactionalIds): an id in Empty/Complete* not updated for
  transactional.id.expiration.ms is forgotten (Describe answers TRANSACTIONAL_ID_NOT_FOUND).
* DescribeTransactions / ListTransactions (TC.handleDescribeTransactions,
  TSM.listTransactionStates): the id's state, producer id, epoch, timeout, start time and
  partitions; List filters by state and (KIP-1152) by an id pattern.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import Callable, Sequence

from tests.simulation.model import errors
from tests.simulation.model.clock import Clock

SHORT_MAX = 32767  # Short.MaxValue: producer epochs are int16


class TxnState(str, enum.Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"


PREPARE = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
RESTING = (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


@dataclass
class TxnMetadata:
    """The coordinator's state of one transactional id (TM)."""

    transactional_id: str
    producer_id: int
    epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: list = field(default_factory=list)  # (topic, partition) in the order added
    start_ms: int = -1
    last_update_ms: int = -1
    last_producer_id: int = -1
    # Prepare*: the partitions whose marker is not written yet.
    markers_due: list = field(default_factory=list)
    # Serial of the current (or last) transaction on this id, for observers.
    serial: int = 0


@dataclass(frozen=True)
class TxnView:
    """What DescribeTransactions returns for one id."""

    transactional_id: str
    state: TxnState
    producer_id: int
    epoch: int
    timeout_ms: int
    start_ms: int
    partitions: tuple


MarkerWriter = Callable[[tuple, int, int, bool], None]  # (partition, producer id, epoch, commit)
Observer = Callable[[str, TxnMetadata], None]            # (event, metadata) for invariant checks


class TransactionCoordinator:
    """Every transactional id of one cluster (one coordinator: partitioning of the
    transaction-state topic is not observable by clients, only its moves are, which
    :class:`~tests.simulation.model.cluster.Cluster` models as unavailability)."""

    def __init__(self, clock: Clock, write_marker: MarkerWriter, *, max_timeout_ms: int = 900_000,
                 id_expiration_ms: int = 7 * 24 * 3600 * 1000, epoch_limit: int = SHORT_MAX,
                 first_producer_id: int = 1000) -> None:
        self.clock = clock
        self._write_marker = write_marker
        self.max_timeout_ms = max_timeout_ms           # transaction.max.timeout.ms
        self.id_expiration_ms = id_expiration_ms       # transactional.id.expiration.ms
        # Short.MaxValue in Kafka; a smaller limit makes producer-id rotation reachable.
        self.epoch_limit = epoch_limit
        self._next_pid = first_producer_id
        self.txns: dict[str, TxnMetadata] = {}
        self.observers: list[Observer] = []

    # -- helpers -------------------------------------------------------------

    def _new_producer_id(self) -> int:
        self._next_pid += 1
        return self._next_pid

    def _exhausted(self, epoch: int) -> bool:
        return epoch >= self.epoch_limit - 1  # TM.isEpochExhausted

    def _notify(self, event: str, meta: TxnMetadata) -> None:
        for observer in self.observers:
            observer(event, meta)

    def _prepare_end(self, meta: TxnMetadata, commit: bool) -> None:
        """Ongoing -> PrepareCommit/PrepareAbort; markers due on every partition."""
        meta.state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        meta.markers_due = list(meta.partitions)
        meta.last_update_ms = self.clock.now_ms
        self._notify("prepare-commit" if commit else "prepare-abort", meta)
        if not meta.markers_due:
            self._complete(meta)

    def _complete(self, meta: TxnMetadata) -> None:
        """TM.prepareComplete: all markers written."""
        commit = meta.state == TxnState.PREPARE_COMMIT
        meta.state = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        meta.partitions = []
        meta.last_update_ms = self.clock.now_ms
        self._notify("complete-commit" if commit else "complete-abort", meta)

    def _fence_and_abort(self, meta: TxnMetadata) -> None:
        """TM.prepareFenceProducerEpoch, then endTransaction(ABORT, isFromClient = false)."""
        if meta.epoch == SHORT_MAX:
            raise AssertionError(f"{meta.transactional_id}: cannot fence at epoch Short.MaxValue")
        meta.epoch += 1
        self._prepare_end(meta, commit=False)

    # -- requests ------------------------------------------------------------

    def init_producer_id(self, transactional_id: str, timeout_ms: int) -> tuple[int, int, int]:
        """InitProducerId without an expected producer id/epoch (librdkafka's init, the
        sink's fence): ``(error, producer id, epoch)``."""
        if not 0 < timeout_ms <= self.max_timeout_ms:
            return errors.INVALID_TRANSACTION_TIMEOUT, -1, -1
        meta = self.txns.get(transactional_id)
        if meta is None:
            meta = TxnMetadata(transactional_id, self._new_producer_id(), -1, timeout_ms,
                               last_update_ms=self.clock.now_ms)
            self.txns[transactional_id] = meta
        if meta.state in PREPARE:
            return errors.CONCURRENT_TRANSACTIONS, -1, -1
        if meta.state == TxnState.ONGOING:
            self._notify("fence", meta)
            self._fence_and_abort(meta)
            return errors.CONCURRENT_TRANSACTIONS, -1, -1
        if self._exhausted(meta.epoch):  # TM.prepareProducerIdRotation
            meta.last_producer_id, meta.producer_id, meta.epoch = meta.producer_id, self._new_producer_id(), 0
        else:  # TM.prepareIncrementProducerEpoch
            meta.epoch += 1
        meta.state, meta.partitions, meta.start_ms = TxnState.EMPTY, [], -1
        meta.timeout_ms, meta.last_update_ms = timeout_ms, self.clock.now_ms
        self._notify("init", meta)
        return errors.NONE, meta.producer_id, meta.epoch

    def _check_producer(self, meta: TxnMetadata | None, producer_id: int, epoch: int,
                        adding: bool = False) -> int:
        """The checks every request under a producer id and epoch starts with; ``adding``
        (AddPartitions, a partition's verification): also busy while Prepare*."""
        if meta is None or meta.producer_id != producer_id:
            return errors.INVALID_PRODUCER_ID_MAPPING
        if meta.epoch != epoch:
            return errors.PRODUCER_FENCED
        if adding and meta.state in PREPARE:
            return errors.CONCURRENT_TRANSACTIONS
        return errors.NONE

    def add_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                       partitions: Sequence[tuple]) -> int:
        meta = self.txns.get(transactional_id)
        code = self._check_producer(meta, producer_id, epoch, adding=True)
        if code != errors.NONE:
            return code
        assert meta is not None
        if meta.state in RESTING:
            meta.start_ms = self.clock.now_ms
            meta.serial += 1
            meta.state = TxnState.ONGOING
            self._notify("begin", meta)
        for p in partitions:
            if p not in meta.partitions:
                meta.partitions.append(p)
        meta.last_update_ms = self.clock.now_ms
        return errors.NONE

    def verify_partition(self, transactional_id: str, producer_id: int, epoch: int, partition: tuple) -> int:
        """The partition leader's check before a transactional append (KIP-890 part 1,
        TC.handleVerifyPartitionsInTransaction): the partition must be in the ongoing
        transaction of that producer id and epoch."""
        meta = self.txns.get(transactional_id)
        code = self._check_producer(meta, producer_id, epoch, adding=True)
        if code != errors.NONE:
            return code
        assert meta is not None
        if meta.state != TxnState.ONGOING or partition not in meta.partitions:
            return errors.INVALID_TXN_STATE
        return errors.NONE

    def end_txn(self, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> int:
        """EndTxn from a client (v <= 4: transaction protocol v1)."""
        meta = self.txns.get(transactional_id)
        code = self._check_producer(meta, producer_id, epoch)
        if code != errors.NONE:
            return code
        assert meta is not None
        state = meta.state
        if state == TxnState.ONGOING:
            if not commit:
                self._notify("end-abort", meta)  # for observers: an abort by a client, as a fence is
            self._prepare_end(meta, commit)
            return errors.NONE
        if (state, commit) in ((TxnState.COMPLETE_COMMIT, True), (TxnState.COMPLETE_ABORT, False)):
            return errors.NONE
        if (state, commit) in ((TxnState.PREPARE_COMMIT, True), (TxnState.PREPARE_ABORT, False)):
            return errors.CONCURRENT_TRANSACTIONS
        return errors.INVALID_TXN_STATE

    def describe(self, transactional_id: str) -> TxnView | None:
        meta = self.txns.get(transactional_id)
        if meta is None:
            return None  # TRANSACTIONAL_ID_NOT_FOUND
        return TxnView(meta.transactional_id, meta.state, meta.producer_id, meta.epoch, meta.timeout_ms,
                       meta.start_ms, tuple(meta.partitions))

    def list_transactions(self, states: Sequence[TxnState] | None = None,
                          pattern: str | None = None) -> list[tuple[str, int, TxnState]]:
        rx = re.compile(pattern) if pattern else None
        return [(tid, m.producer_id, m.state) for tid, m in sorted(self.txns.items())
                if (states is None or m.state in states) and (rx is None or rx.search(tid))]

    # -- the coordinator's own work -----------------------------------------

    def markers_due(self) -> list[tuple[str, tuple]]:
        """``(transactional id, partition)`` of every marker still to be written."""
        return [(tid, p) for tid, m in sorted(self.txns.items()) for p in m.markers_due]

    def write_marker(self, transactional_id: str, partition: tuple) -> None:
        meta = self.txns[transactional_id]
        meta.markers_due.remove(partition)
        self._write_marker(partition, meta.producer_id, meta.epoch, meta.state == TxnState.PREPARE_COMMIT)
        if not meta.markers_due:
            self._complete(meta)

    def abort_timed_out(self) -> list[str]:
        """TC.abortTimedOutTransactions: fence and abort every Ongoing transaction past its timeout."""
        now = self.clock.now_ms
        late = [m for _tid, m in sorted(self.txns.items())
                if m.state == TxnState.ONGOING and m.start_ms + m.timeout_ms < now]
        for meta in late:
            self._notify("timeout", meta)
            self._fence_and_abort(meta)
        return [m.transactional_id for m in late]

    def expire_ids(self) -> list[str]:
        """TSM.removeExpiredTransactionalIds."""
        now = self.clock.now_ms
        gone = [tid for tid, m in sorted(self.txns.items())
                if m.state in RESTING and m.last_update_ms <= now - self.id_expiration_ms]
        for tid in gone:
            del self.txns[tid]
        return gone
