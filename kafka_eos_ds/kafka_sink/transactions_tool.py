"""The operator's view of a sink's transactions: list them, finish the decided ones,
abort the open ones.

Backs ``kafka-eos transactions list|finish|abort --prefix P``. Aborting fences each open
id (InitProducerId), exactly what recovery does; stop the query first, or a transaction
its driver has decided to commit may be aborted (the query then fails with
TransactionLostError instead of losing records silently). Finishing commits what a
writer of the prefix decided and did not end (its driver stopped for good mid-commit, a
job's driver died, a query replaced after losing its checkpoint that has no new input to
run a batch with): safe at any time, it commits only what is decided and writes nothing
to the commit log (the writer's own next step records it done).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from kafka_eos_ds.kafka.coordinator import OPEN_STATES, TransactionCoordinator
from kafka_eos_ds.kafka_sink import transactional_ids
from kafka_eos_ds.kafka_sink.config import DEFAULT_TRANSACTION_TIMEOUT_MS
from kafka_eos_ds.kafka_sink.decision_log import DEFAULT_TOPIC


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


def list_transactions(conf: Mapping[str, Any], prefix: str, open_only: bool = False,
                      family: str | None = None) -> list[SinkTransaction]:
    """Every transactional id of the sink ``prefix`` the coordinators know (or only open
    ones; ``family``: only that family's)."""
    with TransactionCoordinator(conf) as coordinator:
        return _list(coordinator, prefix, open_only, family)


def abort_transactions(conf: Mapping[str, Any], prefix: str,
                       transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS,
                       family: str | None = None) -> list[SinkTransaction]:
    """Abort every open transaction of the sink ``prefix`` (``family``: of that family
    only, e.g. a crashed batch job's, while a stream runs on the prefix); return what was
    aborted."""
    with TransactionCoordinator(conf) as coordinator:
        found = _list(coordinator, prefix, open_only=True, family=family)
        for txn in found:
            coordinator.fence(txn.transactional_id, transaction_timeout_ms)
        return found


@dataclass(frozen=True)
class FinishedWrite:
    """A writer's decided write that :func:`finish_decided` committed (or found lost)."""

    writer: str
    batch_id: int
    transactions: int
    outcome: str  # "committed", or "lost: ..." when a transaction was aborted instead


def finish_decided(conf: Mapping[str, Any], prefix: str, commit_log_topic: str = DEFAULT_TOPIC,
                   transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS) -> list[FinishedWrite]:
    """Commit every transaction a writer of ``prefix`` decided but did not finish."""
    from kafka_eos_ds.errors import TransactionLostError
    from kafka_eos_ds.kafka_sink.decision_log import KafkaDecisionLog
    from kafka_eos_ds.kafka_sink.participants import KafkaTransactions
    from kafka_eos_ds.twophase.committer import TwoPhaseCommitter
    from kafka_eos_ds.twophase.identity import Kind

    log = KafkaDecisionLog(conf, commit_log_topic, prefix)
    out = []
    try:
        with TransactionCoordinator(conf) as coordinator:
            transactions = KafkaTransactions(coordinator, prefix, transaction_timeout_ms)
            committer = TwoPhaseCommitter(log, transactions, progress_store=transactions)
            for kind in Kind:
                for key, decision in log.unfinished(kind.value):
                    try:
                        committer.commit_decided(decision)
                        outcome = "committed"
                    except TransactionLostError as exc:
                        outcome = f"lost: {exc}"
                    out.append(FinishedWrite(key, decision.batch_id, len(decision.participants), outcome))
    finally:
        log.close()
    return out


def _list(coordinator: TransactionCoordinator, prefix: str, open_only: bool,
          family: str | None = None) -> list[SinkTransaction]:
    pattern = transactional_ids.any_family(prefix) if family is None else transactional_ids.pattern(prefix, family)
    out = []
    for tid, _pid, _state in coordinator.list_transactions(pattern, open_only=open_only):
        parsed = transactional_ids.parse(prefix, tid)
        if parsed is None or (family is not None and not transactional_ids.in_families(prefix, tid, family)):
            continue
        desc = coordinator.describe(tid)
        if desc is None:
            continue
        out.append(SinkTransaction(tid, parsed.family, parsed.partition, parsed.attempt, desc.producer_id,
                                   desc.producer_epoch, desc.state, desc.start_time_ms))
    return sorted(out, key=lambda t: (t.family, t.partition, t.attempt))
