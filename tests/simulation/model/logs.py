"""Partition logs and consumer-group offsets, as a broker keeps them.

One :class:`PartitionLog` model serves the output topics and the commit-log topic. The
rules (Kafka's ``UnifiedLog``, ``ProducerStateManager``, ``LogCleaner``, the group
coordinator's offset store):

* Records are appended at the end; an offset is never reused and a record never goes away
  (compaction is modelled by readers taking the latest record per key, which is all the
  commit-log reader needs).
* A transactional producer's records stay *open* until the coordinator writes a COMMIT or
  ABORT control marker (with the transaction's epoch) into the partition.
* The last stable offset (LSO) is the first offset of the earliest still-open transaction
  on the partition, or the high watermark when none is open.
* A ``read_committed`` reader sees records below the LSO only, and skips records of
  aborted transactions (the aborted-transaction index).
* ``ProducerStateManager.checkProducerEpoch``: a data batch or marker whose epoch is below
  the epoch the partition already knows for that producer id is refused
  (INVALID_PRODUCER_EPOCH): a fenced zombie cannot append after the fence's marker.
* TxnOffsetCommit parks offsets per (group, producer id); they become the group's
  committed offsets when the transaction's COMMIT marker reaches the group's partition of
  ``__consumer_offsets``, and are dropped on ABORT.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tests.simulation.model import errors

OFFSETS_TOPIC = "__consumer_offsets"


@dataclass(frozen=True)
class Record:
    """One entry of a partition: a data record or a control marker."""

    offset: int
    key: Any | None             # str, or bytes from a client that sends bytes
    value: Any
    producer_id: int = -1
    epoch: int = -1
    txn: int | None = None      # serial of the transaction a transactional record belongs to
    control: str | None = None  # "COMMIT" / "ABORT" for a marker
    timestamp: int = -1            # CreateTime, ms (the producer's clock: the shared virtual one)


class PartitionLog:
    """One topic partition."""

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.records: list[Record] = []
        self._open: dict[int, tuple[int, int]] = {}  # producer id -> (txn serial, first offset)
        self._outcome: dict[int, bool] = {}          # txn serial -> committed?
        self._epochs: dict[int, int] = {}            # producer id -> highest epoch seen
        self._serials = 0

    def high_watermark(self) -> int:
        return len(self.records)

    def last_stable_offset(self) -> int:
        return min((first for _serial, first in self._open.values()), default=self.high_watermark())

    def open_producers(self) -> list[int]:
        return sorted(self._open)

    def append(self, key: Any | None, value: Any, producer_id: int = -1, epoch: int = -1,
               transactional: bool = False, timestamp: int = -1) -> int:
        """Append a data record; an error code, NONE when appended."""
        if producer_id >= 0 and epoch < self._epochs.get(producer_id, -1):
            return errors.INVALID_PRODUCER_EPOCH  # checkProducerEpoch
        if producer_id >= 0:
            self._epochs[producer_id] = max(epoch, self._epochs.get(producer_id, -1))
        txn = None
        if transactional:
            if producer_id not in self._open:
                self._serials += 1
                self._open[producer_id] = (self._serials, len(self.records))
            txn = self._open[producer_id][0]
        self.records.append(Record(len(self.records), key, value, producer_id, epoch, txn, None, timestamp))
        return errors.NONE

    def write_marker(self, producer_id: int, epoch: int, commit: bool) -> int:
        """The coordinator's COMMIT/ABORT marker for ``producer_id``'s open transaction here."""
        if epoch < self._epochs.get(producer_id, -1):
            return errors.INVALID_PRODUCER_EPOCH  # checkProducerEpoch, for control batches too
        self._epochs[producer_id] = epoch
        opened = self._open.pop(producer_id, None)
        if opened is not None:
            self._outcome[opened[0]] = commit
        self.records.append(Record(len(self.records), None, None, producer_id, epoch, None,
                                   "COMMIT" if commit else "ABORT"))
        return errors.NONE

    def _visible(self, record: Record) -> bool:
        return record.control is None and (record.txn is None or self._outcome.get(record.txn) is True)

    def read_committed(self, start: int = 0) -> list[Record]:
        """What a ``read_committed`` consumer reads from ``start``: committed data below the LSO."""
        return [r for r in self.records[start:self.last_stable_offset()] if self._visible(r)]

    def read_uncommitted(self, start: int = 0) -> list[Record]:
        return [r for r in self.records[start:] if r.control is None]

    def open_records(self, producer_id: int) -> list[Record]:
        """The records of ``producer_id``'s transaction still open here."""
        opened = self._open.get(producer_id)
        return [] if opened is None else [r for r in self.records[opened[1]:] if r.txn == opened[0]]

    def outcome(self, record: Record) -> bool | None:
        """Whether ``record``'s transaction committed (None: still open; True for non-transactional)."""
        return True if record.txn is None else self._outcome.get(record.txn)


class Groups:
    """Committed consumer-group offsets, ``{group: {(topic, partition): next offset}}``."""

    def __init__(self) -> None:
        self.committed: dict[str, dict[tuple[str, int], int]] = {}
        self._pending: dict[tuple[str, int], dict[tuple[str, int], int]] = {}

    def commit(self, group: str, offsets: dict[tuple[str, int], int]) -> None:
        """OffsetCommit outside a transaction: visible at once."""
        self.committed.setdefault(group, {}).update(offsets)

    def txn_commit(self, group: str, producer_id: int, offsets: dict[tuple[str, int], int]) -> None:
        """TxnOffsetCommit: parked until the transaction's marker."""
        self._pending.setdefault((group, producer_id), {}).update(offsets)

    def write_marker(self, group: str, producer_id: int, commit: bool) -> None:
        pending = self._pending.pop((group, producer_id), {})
        if commit:
            self.commit(group, pending)

    def offsets(self, group: str) -> dict[tuple[str, int], int]:
        return dict(self.committed.get(group, {}))

    def pending_partitions(self, group: str) -> set[tuple[str, int]]:
        """The partitions of ``group`` with transactional offsets waiting for their marker."""
        return {tp for (g, _pid), pending in self._pending.items() if g == group for tp in pending}

    def stable(self, group: str) -> bool:
        """Whether an OffsetFetch with require_stable (KIP-447; librdkafka's committed() of a
        read_committed consumer) answers now: no transactional offsets of the group are
        pending (GroupMetadata.hasPendingOffsetCommitsForTopicPartition -> UNSTABLE_OFFSET_COMMIT)."""
        return not any(g == group and pending for (g, _pid), pending in self._pending.items())
