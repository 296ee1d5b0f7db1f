"""Sorting the answers to EndTxn(commit) into the protocol's outcomes (pure logic).

* OK, or "already committed" -> COMMITTED;
* coordinator moving, loading, or busy finishing the transaction -> RETRY;
* the id's epoch moved on, the producer id is gone, the transaction is in the wrong
  state -> ask the coordinator (DescribeTransactions) and decide from its answer:

  ======================================  ==========  ===============================
  the coordinator holds the id ...        outcome     because
  ======================================  ==========  ===============================
  at our producer id and epoch:
    CompleteCommit                        COMMITTED   our transaction committed
    PrepareCommit, Ongoing                RETRY       still ending / not loaded yet
    PrepareAbort, CompleteAbort,          LOST        our transaction, at its own
    PrepareEpochFence                                 epoch, was aborted
    Empty, Dead, other                    UNKNOWN     no transaction to judge
  at an older epoch                       RETRY       a coordinator still loading
  at a newer epoch                        UNKNOWN     see below
  under another producer id, or not       UNKNOWN     see below
  ======================================  ==========  ===============================

* anything else -> an error that names it (not retried: retrying cannot change it).

The coordinator keeps only the latest state of an id. A newer epoch follows a timeout
abort or a fence of our open transaction, but just as well any InitProducerId after our
commit (a zombie task, a second query on the prefix); an unknown id or another producer
id follows ``transactional.id.expiration.ms`` (7 days by default) after a commit as after
an abort. None of them proves an abort, so none is LOST: UNKNOWN fails the step loudly
(docs/dev/decisions.md, "A transaction whose id moved on is not proof of an abort").
"""

from __future__ import annotations

from kafka_eos_ds.errors import KafkaClientError
from kafka_eos_ds.kafka import coordinator as c
from kafka_eos_ds.kafka.coordinator import TxnState, TxnStatus
from kafka_eos_ds.twophase.protocol import Outcome

ASK_COORDINATOR = frozenset({c.INVALID_PRODUCER_EPOCH, c.PRODUCER_FENCED, c.INVALID_TXN_STATE,
                             c.INVALID_PRODUCER_ID_MAPPING})


def classify_end_txn(code: int) -> Outcome | None:
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


_ABORTED = (TxnStatus.PREPARE_ABORT, TxnStatus.COMPLETE_ABORT, TxnStatus.PREPARE_EPOCH_FENCE)


def classify_described(state: TxnState | None, producer_id: int, epoch: int) -> Outcome:
    """The outcome of a transaction from the coordinator's current view of its id."""
    if state is None or state.producer_id != producer_id:
        return Outcome.UNKNOWN  # expired, or re-created since: after a commit as after an abort
    if state.producer_epoch > epoch:
        return Outcome.UNKNOWN  # initialised again since: a fence or timeout abort, or a re-init after a commit
    if state.producer_epoch < epoch:
        return Outcome.RETRY  # a coordinator that has not loaded the latest state yet
    if state.state == TxnStatus.COMPLETE_COMMIT:
        return Outcome.COMMITTED
    if state.state in (TxnStatus.PREPARE_COMMIT, TxnStatus.ONGOING):
        return Outcome.RETRY
    if state.state in _ABORTED:
        return Outcome.LOST
    return Outcome.UNKNOWN  # Empty, Dead, or a state this module does not know
