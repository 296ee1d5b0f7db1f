"""Sorting the answers to EndTxn(commit) into the protocol's outcomes (pure logic).

* OK, or "already committed" -> COMMITTED;
* coordinator moving, loading, or busy finishing the transaction -> RETRY;
* the id's epoch moved on, the producer id is gone, the transaction is in the wrong
  state -> ask the coordinator (DescribeTransactions) and decide from its answer:
  committed under our producer id and epoch -> COMMITTED; aborted, or a newer epoch,
  or an unknown id -> LOST (known outcome: the records never become visible);
* anything else -> an error that names it (not retried: retrying cannot change it).
"""

from __future__ import annotations

from typing import Optional

from kafka_eos_ds.errors import KafkaClientError
from kafka_eos_ds.kafka import coordinator as c
from kafka_eos_ds.kafka.coordinator import TxnState, TxnStatus
from kafka_eos_ds.twophase.protocol import Outcome

ASK_COORDINATOR = frozenset({c.INVALID_PRODUCER_EPOCH, c.PRODUCER_FENCED, c.INVALID_TXN_STATE,
                             c.INVALID_PRODUCER_ID_MAPPING})


def classify_end_txn(code: int) -> Optional[Outcome]:
    """The outcome an EndTxn error code proves, or None when only a describe can tell."""
    if code == c.NONE:
        return Outcome.COMMITTED
    if code in c.RETRIABLE:
        return Outcome.RETRY
    if code in ASK_COORDINATOR:
        return None
    if code == c.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
        raise KafkaClientError("Not authorised to commit the sink's transactions: grant WRITE and DESCRIBE on "
                               "TransactionalId resources matching the option 'transactionalIdPrefix'.")
    raise KafkaClientError(f"Committing a transaction failed with {c.error_name(code)} (error code {code}).")


def classify_described(state: Optional[TxnState], producer_id: int, epoch: int) -> Outcome:
    """The outcome of a transaction from the coordinator's current view of its id."""
    if state is None or state.producer_id != producer_id:
        return Outcome.LOST  # the id expired or was re-created: our transaction is gone
    if state.producer_epoch > epoch:
        return Outcome.LOST  # bumped by a timeout abort or a fence after our transaction
    if state.producer_epoch < epoch:
        return Outcome.RETRY  # a coordinator that has not loaded the latest state yet
    if state.state == TxnStatus.COMPLETE_COMMIT:
        return Outcome.COMMITTED
    if state.state in (TxnStatus.PREPARE_COMMIT, TxnStatus.ONGOING):
        return Outcome.RETRY
    return Outcome.LOST  # PrepareAbort, CompleteAbort, Empty, Dead, PrepareEpochFence
