"""A write's commit on the driver: decide -> commit every participant -> fence the strays
-> done. The plan (what to decide, finish or skip) is :func:`.recovery.plan_write`, pure;
this runs it."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any, Generic, Iterable, Mapping, Sequence

from kafka_eos_ds.errors import KafkaEosError, TransactionError
from kafka_eos_ds.twophase import faults
from kafka_eos_ds.twophase.identity import Kind, WriteId
from kafka_eos_ds.twophase.outcome_messages import batch_write_failed, final_state
from kafka_eos_ds.twophase.protocol import DONE, Decision, H, Participant
from kafka_eos_ds.twophase.recovering import Recovering
from kafka_eos_ds.twophase.recovery import plan_write, stream_target
from kafka_eos_ds.twophase.steps import Steps

log = logging.getLogger(__name__)


class Committing(Generic[H]):
    """The commit over ``steps`` (a job's clean-up of other jobs by ``recovering``);
    ``time_needed_s``, ``streams_share_ids``: as :class:`~.committer.TwoPhaseCommitter`."""

    def __init__(self, steps: Steps[H], recovering: Recovering[H], time_needed_s: float,
                 streams_share_ids: bool) -> None:
        self.steps, self.ports, self.recovering = steps, steps.ports, recovering
        self.time_needed_s, self.streams_share_ids = time_needed_s, streams_share_ids

    def commit(self, write: WriteId, messages: Iterable[Participant[H] | None],
               progress: Mapping[str, Any] | None = None) -> None:
        """:meth:`.committer.TwoPhaseCommitter.commit`."""
        messages = list(messages)
        batch = write.version
        decisions, steps = self.ports.decisions, self.steps
        faults.check("driver-before-decision", batch=batch)
        own = decisions.latest(write.key)
        if write.kind is Kind.STREAM and self.streams_share_ids:
            stream_target(own, decisions.latest_of(Kind.STREAM.value), write.app)
        if write.kind is Kind.JOB:
            self.recovering.finish_jobs()
            self.recovering.fence_abandoned_jobs(write)
        plan = plan_write(own, write, messages, progress)
        if plan.noop:
            log.info("batch %s of %s already committed", batch, write.app)
            return
        if plan.earlier is not None:
            steps.finish(write.key, plan.earlier)
        decision = plan.decision
        assert decision is not None
        superseded = sorted({i for p in messages if p is not None for i in self.ports.participants.superseded(p)})
        if write.kind is Kind.FOREACH:
            # Runs of the stream before this one: what they left open is not decided (their
            # unfinished decision was just finished), and would hold back readers.
            steps.fence(sorted(set(self.ports.participants.open_ids(write)) - {p.id for p in decision.participants}
                               - {p.id for p in messages if p is not None}))
        if plan.skip:
            log.info("write %s of batch %s of %s was committed by an earlier run; this one adds nothing",
                     decision.write, batch, write.app)
            steps.fence(sorted({p.id for p in messages if p is not None and p.records > 0} | set(superseded)))
            if plan.write_decision:
                decisions.write(write.key, decision)
            return
        if plan.write_decision and not decision.participants:
            # Nothing to commit (every task was empty or a re-run of a decided batch):
            # no decision to record, only earlier attempts to shut out. Recorded all the
            # same: a sink whose checkpoint has committed batches always has a decision,
            # so a commit log that lost them is noticed (never guessed). The progress has
            # no output to be atomic with: the record stores it, in the same write, so a
            # driver whose writer was fenced since cannot store it (and move it back).
            steps.fence(superseded)
            decisions.write(write.key, decision.with_state(DONE))
            self._forget_job(write)
            return
        if plan.write_decision:
            self._check_fit(decision)
            if decision.progress is not None:
                # Attached before the decision: a failure here refuses the batch undecided
                # (an unreadable group, a missing ACL), instead of wedging a decided one.
                # Marked so, finishing the decision never attaches it again (carry_legacy).
                steps.carry(decision)
                decision = replace(decision, progress_attached=True)
            decisions.write(write.key, decision)
        log.debug("batch %s of %s decided: %s", batch, write.app, decision)
        faults.check("driver-after-decision", batch=batch)
        try:
            steps.commit_all(decision, write.key)
        except Exception as exc:
            if write.kind not in (Kind.JOB, Kind.APP):
                raise
            raise self._batch_write_failed(write, decision, exc) from exc
        faults.check("driver-after-all-commits", batch=batch)
        self.ports.publish(decision)
        if plan.write_decision:
            # Earlier attempts of the winning tasks may still hold open transactions
            # (a failed attempt, a zombie), and so may the losing attempts of speculation
            # (any attempt number); they hold back readers until fenced.
            steps.fence(self._strays(write, decision, superseded))
        else:
            # A decision another run wrote (one presumed dead that came back, or an app
            # write's earlier run) was finished instead of this run's: its tasks' own
            # transactions are in no decision, and would hold back readers until the next
            # recovery or their timeout.
            decided = {p.id for p in decision.participants}
            steps.fence(sorted({p.id for p in messages if p is not None and p.records > 0} - decided))
        self._record_done(write, decision)
        log.debug("batch %s of %s done", batch, write.app)
        faults.check("driver-after-done", batch=batch)
        self._forget_job(write)

    def _check_fit(self, decision: Decision[H]) -> None:
        """Refuse to decide a write one of whose participants can no longer commit.

        Decided, such a write would end partly committed (the others commit, that one is
        lost) and every restart would fail on it; refused, ``abort()`` fences it all and
        the restarted query runs the batch again. A transient error asking is retried:
        only the participants' state refuses."""
        problem = self.ports.participants.unfit(decision.participants, self.time_needed_s)
        if problem:
            raise TransactionError(
                f"Batch {decision.batch_id} of {decision.query_id} was not committed: {problem} "
                "Nothing of the batch is visible; restarting the query runs it again.", retriable=True)

    def _strays(self, write: WriteId, decision: Decision[H], superseded: Sequence[str]) -> list[str]:
        """What to fence once ``decision`` is committed: the superseded ids, and every id
        of the writer still open. Only the write just committed can be decided and
        unfinished here (an earlier decision was finished first), and its participants are
        committed, past ``Ongoing``: an id of the decision that is open again holds a
        transaction begun since its commit (a zombie task's, whose InitProducerId arrived
        late), which no decision names and which would hold back readers."""
        decided = {p.id for p in decision.participants}
        still_open = self.ports.participants.open_ids(write)
        return sorted((set(superseded) - decided) | set(still_open))

    def _batch_write_failed(self, write: WriteId, decision: Decision[H], exc: Exception) -> KafkaEosError:
        """The error of a batch write (JOB, APP) whose commit failed after its decision
        (:mod:`.outcome_messages`). A job's outcome known to be final (lost, or no longer
        to be told) is recorded here, so that no later job on the prefix fails on it again
        (:meth:`.recovering.Recovering.finish_jobs`). An app write's stays decided: its
        user retries it by running the same version again, which must say so again, not
        succeed without its rows."""
        job = write.kind is Kind.JOB
        final = final_state(exc)
        if job and final is not None:
            self._record_final(write.key, decision.with_state(final))
        return batch_write_failed(exc, job, write.app, write.version)

    def _record_final(self, key: str, decision: Decision[H]) -> None:
        """Record a batch write's final outcome; if that fails too, the next writer on the
        prefix finds the decision unfinished and records it (failing once, as it did before)."""
        try:
            self.ports.decisions.record_ending(key, decision)
        except KafkaEosError as exc:
            log.warning("could not record how %s ended (%s); the next write on the prefix records it", key, exc)

    def _record_done(self, write: WriteId, decision: Decision[H]) -> None:
        """Record the write's decision done. Another batch job's commit finishes the
        decisions it finds unfinished (:meth:`.recovering.Recovering.finish_jobs`) and
        cannot tell a live job from a dead one, so a job may find its own decision recorded
        done by another, its writer's log moved on under it: every row is final then, and
        the job succeeded (reporting it failed would have its user run it again, writing its
        rows twice)."""
        decisions = self.ports.decisions
        try:
            decisions.write(write.key, decision.with_state(DONE))
        except KafkaEosError:
            if write.kind is not Kind.JOB or not _finished_by_another(decisions.latest(write.key), decision):
                raise
            log.info("batch job %s: another job's commit finished its decision; every row is committed", write.app)

    def _forget_job(self, write: WriteId) -> None:
        """Drop a finished job's record: best effort (the job is committed either way, and
        a done record is only a little more for the commit log to keep)."""
        if write.kind is Kind.JOB:
            try:
                self.ports.decisions.forget(write.key)
            except KafkaEosError as exc:
                log.warning("job %s is committed, but its record could not be dropped: %s", write.app, exc)


def _finished_by_another(latest: Decision[H] | None, decision: Decision[H]) -> bool:
    """``latest`` is ``decision`` recorded done (by another job's commit)."""
    return (latest is not None and latest.state == DONE and latest.query_id == decision.query_id
            and latest.batch_id == decision.batch_id
            and [p.id for p in latest.participants] == [p.id for p in decision.participants])
