"""A crashed ``df.write``'s open transactions are aborted by the next job on the prefix
(docs/dev/decisions.md, "A crashed df.write's open transactions are fenced by the next
job"): once no job's commit could decide them any more (too near their timeout), the job
shuts their decision writers out, reads the decided decisions and aborts the rest at their
exact producer id and epoch. The interleavings with live jobs are the simulation's
directed ``crashed-job-fenced``."""

from __future__ import annotations

import time

from kafka_eos_ds.errors import KafkaClientError
from kafka_eos_ds.kafka.coordinator import TxnState
from kafka_eos_ds.kafka_sink import transactional_ids
from kafka_eos_ds.kafka_sink.messages import KafkaHandle
from kafka_eos_ds.twophase import DECIDED, Decision, Kind, Participant, WriteId
from tests.test_zombie_fences import Coordinator, Log, committer

TIMEOUT_MS = 300_000
CRASHED, LIVE, THIS = (WriteId(Kind.JOB, name, 0, job=name) for name in ("crashed", "live", "this"))


def open_for(tid: str, pid: int, epoch: int, age_s: float) -> TxnState:
    return TxnState(tid, "Ongoing", pid, epoch, int(time.time() * 1000 - age_s * 1000), TIMEOUT_MS)


def tid(write: WriteId, partition: int = 0) -> str:
    return transactional_ids.build("p", partition, 0, write.family)


class Jobs(Log):
    """A decision log of batch jobs: ``decided`` are the unfinished decisions a read
    returns, from the ``since``-th read on (a job deciding between two reads)."""

    def __init__(self, decided=(), since=0, events=None):
        super().__init__(events=events)
        self.decided, self.since, self.reads = list(decided), since, 0

    def unfinished(self, kind):
        self.reads += 1
        return self.decided if self.reads > self.since else []


def run_job(coordinator, log):
    """This job's commit (it wrote nothing itself)."""
    committer(coordinator, log).commit(THIS, [None])


def test_a_crashed_jobs_transactions_are_aborted_exactly_after_its_writer_is_shut_out():
    """Before: nothing touched them (they held back readers until the broker's timeout)."""
    events: list = []
    old = TIMEOUT_MS / 1000 - 30  # 30 s left: less than any job's commit asks before deciding
    coordinator = Coordinator({tid(CRASHED): open_for(tid(CRASHED), 7, 3, old),
                               tid(CRASHED, 1): open_for(tid(CRASHED, 1), 8, 0, old)})
    coordinator.calls = events
    run_job(coordinator, Jobs(events=events))
    writer = transactional_ids.decision_writer("p", CRASHED.family)
    acts = [e for e in events if e[0] != "describe"]
    assert acts == [("fence", writer), ("claim",), ("end_txn", tid(CRASHED), 7, 3, False),
                    ("end_txn", tid(CRASHED, 1), 8, 0, False)]


def test_a_live_jobs_transactions_are_left_alone():
    """A job's transaction with more time left than the least margin a commit asks may
    still be decided by its job: neither it nor its job's writer is touched."""
    coordinator = Coordinator({tid(LIVE): open_for(tid(LIVE), 7, 3, TIMEOUT_MS / 1000 - 62)})
    run_job(coordinator, Jobs())
    assert [e for e in coordinator.calls if e[0] in ("fence", "end_txn")] == []


def test_a_transaction_a_job_decided_before_the_shut_out_is_left_to_be_committed():
    """The job decided after this job finished the other jobs' decisions and before it shut
    the writer out: the read after the shut-out sees the decision, and its transaction is
    not aborted (the job, or the next job on the prefix, commits it)."""
    old = TIMEOUT_MS / 1000 - 30
    decided = Decision("live", 0, DECIDED, (Participant(tid(LIVE), 0, 0, 5, KafkaHandle(7, 3)),))
    coordinator = Coordinator({tid(LIVE): open_for(tid(LIVE), 7, 3, old),
                               tid(CRASHED): open_for(tid(CRASHED), 8, 0, old)})
    run_job(coordinator, Jobs([("j:live", decided)], since=1))
    assert [e for e in coordinator.calls if e[0] == "end_txn"] == [("end_txn", tid(CRASHED), 8, 0, False)]


def test_only_other_batch_jobs_are_swept():
    """The stream's ids, an app's and this job's own are never this sweep's."""
    old = TIMEOUT_MS / 1000 - 30
    app = WriteId(Kind.APP, "orders", 1)
    ids = ["p-0-0", tid(app), tid(THIS)]
    coordinator = Coordinator({i: open_for(i, 7, 3, old) for i in ids})
    run_job(coordinator, Jobs())
    assert [e for e in coordinator.calls if e[0] in ("fence", "end_txn")] == []


def test_a_sweep_that_fails_does_not_fail_the_job():
    old = TIMEOUT_MS / 1000 - 30
    coordinator = Coordinator({tid(CRASHED): open_for(tid(CRASHED), 7, 3, old)})

    def unreachable(tid, timeout_ms):
        raise KafkaClientError("InitProducerId failed: TRANSACTIONAL_ID_AUTHORIZATION_FAILED", retriable=False)

    coordinator.fence = unreachable
    log = Jobs()
    run_job(coordinator, log)
    assert [e for e in coordinator.calls if e[0] == "end_txn"] == []
    assert log.latest(THIS.key) is not None  # the job's own commit recorded
