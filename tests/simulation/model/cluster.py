"""A Kafka cluster as its clients see it: topics, one transaction coordinator, group
offsets, and the broker's background work on the virtual clock.

What moves by itself (:meth:`Cluster.tick`, called by the scheduler at every step):

* transaction markers are written some steps after their EndTxn was answered (any order,
  one partition at a time), so a committed transaction becomes visible partition by
  partition, later than its EndTxn answer;
* every ``abort_interval_ms`` (Kafka's transaction.abort.timed.out.transaction.cleanup.
  interval.ms, 10 s) the coordinator aborts timed-out transactions; every
  ``expire_interval_ms`` (transaction.remove.expired.transaction.cleanup.interval.ms,
  1 h) it forgets idle ids;
* while the coordinator is unavailable (a broker bounce moving it; set by a fault), its
  requests answer NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS and no marker is written.
"""

from __future__ import annotations

import random
from typing import Any

from tests.simulation.model import errors
from tests.simulation.model.clock import Clock
from tests.simulation.model.coordinator import TransactionCoordinator
from tests.simulation.model.logs import OFFSETS_TOPIC, Groups, PartitionLog


class Cluster:
    def __init__(self, clock: Clock | None = None, *, abort_interval_ms: int = 10_000,
                 expire_interval_ms: int = 3_600_000, marker_chance: float = 0.5, **coordinator: Any) -> None:
        self.clock = clock or Clock()
        self.logs: dict[tuple[str, int], PartitionLog] = {}
        self.groups = Groups()
        self.coordinator = TransactionCoordinator(self.clock, self._write_marker, **coordinator)
        self.abort_interval_ms = abort_interval_ms
        self.expire_interval_ms = expire_interval_ms
        self.marker_chance = marker_chance
        self.unavailable_until_ms = -1
        self._next_abort_sweep = self.clock.now_ms + abort_interval_ms
        self._next_expiry_sweep = self.clock.now_ms + expire_interval_ms

    def expire_ids_after(self, expiration_ms: int, sweep_interval_ms: int) -> None:
        """Set transactional.id.expiration.ms and its clean-up interval (a test's shortcut)."""
        self.coordinator.id_expiration_ms = expiration_ms
        self.expire_interval_ms = sweep_interval_ms
        self._next_expiry_sweep = self.clock.now_ms + sweep_interval_ms

    # -- topics --------------------------------------------------------------

    def create_topic(self, topic: str, partitions: int) -> None:
        for p in range(partitions):
            self.logs.setdefault((topic, p), PartitionLog(topic, p))

    def partitions(self, topic: str) -> int:
        return sum(1 for t, _p in self.logs if t == topic)

    def topics(self) -> list[str]:
        return sorted({t for t, _p in self.logs})

    def log(self, topic: str, partition: int) -> PartitionLog:
        return self.logs[(topic, partition)]

    # -- availability ---------------------------------------------------------

    def coordinator_error(self) -> int:
        """NONE, or what a moving coordinator answers right now."""
        if self.clock.now_ms < self.unavailable_until_ms:
            # A new leader of the transaction-state partition first loads it.
            return errors.COORDINATOR_LOAD_IN_PROGRESS if self.clock.now_ms % 2 else errors.NOT_COORDINATOR
        return errors.NONE

    def make_unavailable(self, ms: int) -> None:
        self.unavailable_until_ms = max(self.unavailable_until_ms, self.clock.now_ms + ms)

    # -- data path -----------------------------------------------------------

    def produce(self, transactional_id: str, producer_id: int, epoch: int, topic: str, partition: int,
                key: Any | None, value: Any) -> int:
        """A transactional producer's append: verified with the coordinator (KIP-890
        part 1: the partition must be in its ongoing transaction), then epoch-checked by
        the partition."""
        code = self.coordinator.verify_partition(transactional_id, producer_id, epoch, (topic, partition))
        if code != errors.NONE:
            return code
        return self.logs[(topic, partition)].append(key, value, producer_id, epoch, transactional=True,
                                                    timestamp=self.clock.now_ms)

    def txn_offset_commit(self, transactional_id: str, producer_id: int, epoch: int, group: str,
                          offsets: dict[tuple[str, int], int]) -> int:
        """TxnOffsetCommit, after AddOffsetsToTxn added the group's partition to the transaction."""
        code = self.coordinator.verify_partition(transactional_id, producer_id, epoch, (OFFSETS_TOPIC, group))
        if code != errors.NONE:
            return code
        self.groups.txn_commit(group, producer_id, offsets)
        return errors.NONE

    def _write_marker(self, partition: tuple, producer_id: int, epoch: int, commit: bool) -> None:
        topic, part = partition
        if topic == OFFSETS_TOPIC:
            self.groups.write_marker(part, producer_id, commit)
        else:
            self.logs[partition].write_marker(producer_id, epoch, commit)

    # -- background ----------------------------------------------------------

    def tick(self, rng: random.Random) -> list[str]:
        """The brokers' work due at this instant; returns what happened (for the trace)."""
        events: list[str] = []
        if self.coordinator_error() != errors.NONE:
            return events
        now = self.clock.now_ms
        if now >= self._next_abort_sweep:
            self._next_abort_sweep = now + self.abort_interval_ms
            events += [f"broker aborts timed-out {tid}" for tid in self.coordinator.abort_timed_out()]
        if now >= self._next_expiry_sweep:
            self._next_expiry_sweep = now + self.expire_interval_ms
            events += [f"broker expires {tid}" for tid in self.coordinator.expire_ids()]
        for tid, partition in self.coordinator.markers_due():
            if rng.random() < self.marker_chance:
                self.coordinator.write_marker(tid, partition)
                events.append(f"marker {tid} -> {partition[0]}-{partition[1]}")
        return events

    def settle(self) -> None:
        """Write every marker now (used by tests and at the end of a schedule)."""
        for tid, partition in self.coordinator.markers_due():
            self.coordinator.write_marker(tid, partition)

    def time_out_everything(self) -> None:
        """Let every open transaction's timeout pass, and the broker abort it: what readers
        see once the brokers have cleaned up (the end of a schedule)."""
        self.settle()
        longest = max((m.timeout_ms for m in self.coordinator.txns.values()), default=0)
        self.unavailable_until_ms = -1
        self.clock.advance(longest + self.abort_interval_ms + 1)
        self.coordinator.abort_timed_out()
        self.settle()
