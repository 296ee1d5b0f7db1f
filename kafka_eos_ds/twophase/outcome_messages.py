"""What a batch write's failed commit tells its user (pure logic).

A batch write (a ``df.write`` job, or an app write with ``txnAppId``/``txnVersion``)
whose commit fails after its decision is reported failed by Spark: the error must say
what became of its output, or a re-run would write it twice without anyone knowing.

  =========================================  ========  ===================================
  the commit failed with ...                  final     the error adds
  =========================================  ========  ===================================
  TransactionLostError (some were aborted)    LOST      the output is partial
  TransactionOutcomeUnknownError              UNTOLD    what to check before a re-run
  anything else (it did not get through)      (none)    the decision stands: the rest is
                                                        committed by the next write
  =========================================  ========  ===================================

"final": the state a job's decision is recorded in, so that no later job on the prefix
fails on it again; an app write's stays decided (:mod:`.committing`).
"""

from __future__ import annotations

from kafka_eos_ds.errors import KafkaEosError, TransactionError, TransactionLostError, TransactionOutcomeUnknownError
from kafka_eos_ds.twophase.protocol import DecisionState

_APP_DECIDED = ("The write (txnAppId {app!r}, txnVersion {version}) is decided: its rows become visible once the "
                "rest is committed, which running it again with the same txnAppId and txnVersion does first, "
                "adding nothing.")
_JOB_DECIDED = ("The job's output is decided: its rows become visible once the rest is committed, which the next "
                "write with the same 'transactionalIdPrefix' does first. Running this job again writes its rows a "
                "second time; give the job 'txnAppId' and 'txnVersion' to make a re-run add nothing.")
# A batch write whose own commit found some of its transactions aborted, or could no
# longer tell their outcome: nothing will commit the rest, so "will become visible" would
# be false; what is in the output, and what a re-run does, is said instead.
_JOB_LOST = ("The job's other transactions are committed: its output is partial, and the aborted transactions' "
             "rows will not be written by anything. Running this job again writes all of its rows, the committed "
             "ones a second time.")
_APP_LOST = ("The write's (txnAppId {app!r}, txnVersion {version}) other transactions are committed: its output is "
             "partial, and running it again with the same txnAppId and txnVersion fails the same way; a new "
             "txnVersion writes all of its rows, the committed ones a second time.")
_JOB_UNTOLD = ("Check with a read_committed consumer whether the job's rows are in the output before running it "
               "again: a re-run writes all of them, a second time if they are.")
_APP_UNTOLD = ("Check with a read_committed consumer whether the write's rows (txnAppId {app!r}, txnVersion "
               "{version}) are in the output: running it again with the same txnAppId and txnVersion stops here "
               "again, and a new txnVersion writes all of them, a second time if they are.")


def final_state(exc: BaseException) -> DecisionState | None:
    """The state a decision's commit ended in, when ``exc`` says it is final: LOST (its
    transactions were aborted) or UNTOLD (their outcome can no longer be told); None when
    the commit may still get through."""
    if isinstance(exc, TransactionLostError):
        return DecisionState.LOST
    if isinstance(exc, TransactionOutcomeUnknownError):
        return DecisionState.UNTOLD
    return None


def batch_write_failed(exc: Exception, job: bool, app: str, version: int) -> KafkaEosError:
    """The error of a batch write whose commit failed with ``exc`` after its decision: of
    the same kind (a TransactionError for anything else), never retriable, with what became
    of the output. ``job``: a ``df.write`` job, else an app write (``app``, ``version``)."""
    kind = type(exc) if isinstance(exc, KafkaEosError) else TransactionError
    if isinstance(exc, TransactionLostError):
        told = _JOB_LOST if job else _APP_LOST.format(app=app, version=version)
    elif isinstance(exc, TransactionOutcomeUnknownError):
        told = _JOB_UNTOLD if job else _APP_UNTOLD.format(app=app, version=version)
    else:  # the commit did not get through: the decision stands, and the rest is committed later
        told = _JOB_DECIDED if job else _APP_DECIDED.format(app=app, version=version)
    return kind(f"{exc} {told}", retriable=False)
