"""The operator's view of a sink's transactions: list them, abort the open ones.

Backs ``kafka-eos transactions list --prefix P`` and ``... abort --prefix P``. Aborting
fences each open id (InitProducerId), exactly what recovery does; stop the query first,
or a transaction its driver has decided to commit may be aborted (the query then fails
with TransactionLostError instead of losing records silently).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from kafka_eos_ds.kafka.coordinator import OPEN_STATES, TransactionCoordinator
from kafka_eos_ds.sink import transactional_ids
from kafka_eos_ds.sink.config import DEFAULT_TRANSACTION_TIMEOUT_MS


@dataclass(frozen=True)
class SinkTransaction:
    """One transactional id of a sink as the coordinator sees it."""

    transactional_id: str
    family: str  # '' for a stream's own sink; a job's, a foreachBatch run's or an app's otherwise
    partition: int
    attempt: int
    producer_id: int
    producer_epoch: int
    state: str
    start_time_ms: int

    @property
    def open(self) -> bool:
        return self.state in OPEN_STATES


def list_transactions(conf: Mapping[str, Any], prefix: str, open_only: bool = False) -> list[SinkTransaction]:
    """Every transactional id of the sink ``prefix`` the coordinators know (or only open ones)."""
    with TransactionCoordinator(conf) as coordinator:
        return _list(coordinator, prefix, open_only)


def abort_transactions(conf: Mapping[str, Any], prefix: str,
                       transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS) -> list[SinkTransaction]:
    """Abort every open transaction of the sink ``prefix``; return what was aborted."""
    with TransactionCoordinator(conf) as coordinator:
        found = _list(coordinator, prefix, open_only=True)
        for txn in found:
            coordinator.fence(txn.transactional_id, transaction_timeout_ms)
        return found


def _list(coordinator: TransactionCoordinator, prefix: str, open_only: bool) -> list[SinkTransaction]:
    out = []
    for tid, _pid, _state in coordinator.list_transactions(transactional_ids.any_family(prefix), open_only=open_only):
        parsed = transactional_ids.parse(prefix, tid)
        if parsed is None:
            continue
        desc = coordinator.describe(tid)
        if desc is None:
            continue
        out.append(SinkTransaction(tid, parsed.family, parsed.partition, parsed.attempt, desc.producer_id,
                                   desc.producer_epoch, desc.state, desc.start_time_ms))
    return sorted(out, key=lambda t: (t.family, t.partition, t.attempt))
