"""Recovery on the driver: finish what was decided, fence the rest, abandon what a lost
checkpoint left undecidable; and, at a batch job's commit, finish and fence what other
jobs' drivers left behind. The policy is :mod:`.recovery` (pure); this runs it."""

from __future__ import annotations

import logging
from typing import Generic

from kafka_eos_ds.errors import KafkaEosError, TransactionError, TransactionLostError, TransactionOutcomeUnknownError
from kafka_eos_ds.twophase import faults
from kafka_eos_ds.twophase.identity import Kind, WriteId
from kafka_eos_ds.twophase.outcome_messages import final_state
from kafka_eos_ds.twophase.protocol import ABANDONED, Decision, DoneMark, H
from kafka_eos_ds.twophase.recovery import (
    RecoveryContext,
    check_app_version,
    output_before,
    plan_recovery,
    stream_target,
)
from kafka_eos_ds.twophase.steps import Steps

log = logging.getLogger(__name__)


class Recovering(Generic[H]):
    """Recovery over ``steps``; ``streams_share_ids``: as :class:`~.committer.TwoPhaseCommitter`."""

    def __init__(self, steps: Steps[H], streams_share_ids: bool) -> None:
        self.steps, self.ports = steps, steps.ports
        self.streams_share_ids = streams_share_ids

    def recover(self, write: WriteId, known_query: bool = True) -> DoneMark:
        """:meth:`.committer.TwoPhaseCommitter.recover`."""
        assert write.recovers_before_tasks, write
        decisions = self.ports.decisions
        own = decisions.latest(write.key)
        if write.kind is Kind.APP:
            check_app_version(own, write)
        target = own
        if write.kind is Kind.STREAM and self.streams_share_ids:
            latest = decisions.latest_of(Kind.STREAM.value)
            target = stream_target(own, latest, write.app) if known_query else latest
        faults.check("driver-after-reading-decision")
        if known_query and target is not None and target is not own and output_before(target):
            self._check_resumable(target)
        open_ids = self.ports.participants.open_ids(write)
        plan = plan_recovery(RecoveryContext(target, open_ids, write.app if known_query else None))
        if plan.only_if_started and plan.finish is not None and not self._started(plan.finish):
            log.warning("abandoning batch %s of query %s: its checkpoint is gone and none of it was committed; "
                        "this query re-reads its input", plan.finish.batch_id, plan.finish.query_id)
            self.steps.abandon(_key_of(write, plan.finish), plan.finish, plan.fence)
            return DoneMark()
        if plan.finish is not None:
            log.warning("finishing the commit of batch %s of query %s after a restart",
                        plan.finish.batch_id, plan.finish.query_id)
            self.steps.finish(_key_of(write, plan.finish), plan.finish)
        if plan.fence:
            log.warning("aborting %d leftover transaction(s): %s", len(plan.fence), ", ".join(plan.fence))
        self.steps.fence(plan.fence)
        return plan.mark

    def finish_jobs(self) -> None:
        """Finish what other batch jobs on this sink decided but did not end (a driver that
        died during its commit): decided is committed, whoever finishes it. A job's ids are
        its own (never re-opened by another job), so this is clean-up, not a precondition:
        it runs at a job's commit, where the write is known to be a job."""
        decisions = self.ports.decisions
        for key, decision in decisions.unfinished(Kind.JOB.value):
            log.warning("finishing the commit of batch job %s, which stopped after its decision", decision.query_id)
            try:
                self.steps.finish(key, decision)
            except (TransactionLostError, TransactionOutcomeUnknownError) as exc:
                # Known lost, or no longer to be told (and said so, by this error, which names
                # what to check): recorded, so that it fails one write, not every later one.
                final = final_state(exc)
                assert final is not None
                decisions.record_ending(key, decision.with_state(final))
                raise
            except Exception:
                # The job may be live and have finished its decision meanwhile, down to
                # dropping its records (the directory this record was going to): then there
                # is nothing left to finish. Otherwise the failure stands, and the decision
                # stays for the next writer.
                if decisions.latest(key) == decision:
                    raise
                log.info("batch job %s finished its commit meanwhile", decision.query_id)

    def fence_abandoned_jobs(self, write: WriteId) -> None:
        """Abort the open transactions of other batch jobs that no job can decide any more
        (a driver that died after its tasks wrote: they hold back every ``read_committed``
        reader of their partitions until the broker's timeout). Clean-up, best effort: this
        job's own write does not depend on it.

        Validate, then act exactly (:meth:`.steps.Steps.fence`), with the other jobs'
        decision writers as the token: the step observes the instances past the least
        margin any job's commit asks (``Fences.abandoned``), shuts their writers out (a job
        whose commit step began before can decide nothing any more; one that begins after
        refuses them, too old), then reads the decided decisions, which are therefore
        complete, and aborts the observed instances that none of them names. A live job
        that is shut out fails before its decision: nothing of it becomes visible
        (docs/dev/decisions.md, "A crashed df.write's open transactions are fenced by the
        next job")."""
        fences = self.ports.fences
        if fences is None:
            return
        try:
            found = fences.abandoned(write)
            if not found:
                return
            fences.shut_out(found)
            decided = {p.id for _key, decision in self.ports.decisions.unfinished(Kind.JOB.value)
                       for p in decision.participants}
            targets = [i for i in found if i.id not in decided]
            if not targets:
                return
            log.warning("aborting %d transaction(s) of crashed batch jobs, too near their timeout for any job to "
                        "commit: %s", len(targets), ", ".join(i.id for i in targets))
            self.steps.claim_and_abort(targets)
        except KafkaEosError as exc:
            log.warning("could not abort other batch jobs' open transactions (the broker aborts them at their "
                        "timeout): %s", exc)

    def _check_resumable(self, decision: Decision[H]) -> None:
        """A query replacing one whose checkpoint was lost starts where the progress store
        says the output ends; if the store lost it (a consumer group whose offsets expired),
        the new query re-reads input that is already in the output: stop before writing.
        ``decision``: done, or abandoned (the output ends with the batch before it)."""
        progress = decision.progress
        assert progress is not None
        problem = self.ports.progress.resumes_before(progress, reached=decision.state != ABANDONED)
        if problem:
            last, abandoned = decision.batch_id, ""
            if decision.state == ABANDONED:
                last -= 1
                abandoned = (f" Batch {decision.batch_id} was abandoned (none of it is in the output): the output ends "
                             f"where batch {last} ended, before those offsets.")
            raise TransactionError(
                f"Query {decision.query_id} wrote up to batch {last} with this sink; this query replaces it but cannot "
                f"start where its output ends: {problem.replace('{batch}', str(decision.batch_id))}{abandoned}",
                retriable=False)

    def _started(self, decision: Decision[H]) -> bool:
        """Whether the first participant (which carries the progress) committed: asked of
        the progress store, which also knows where the progress stands. Never guessed:
        finishing a batch that had not started duplicates the input the new query
        re-reads, abandoning one that had started loses what it made visible."""
        first, progress = decision.participants[0], decision.progress
        assert progress is not None
        store = self.ports.progress
        started = self.steps.first_started(decision)
        if started is None:
            raise TransactionError(
                f"Cannot tell whether batch {decision.batch_id} of query {decision.query_id} (decided before its "
                f"checkpoint was lost) had started to commit: {store.unknown_message(progress, first)}",
                retriable=False)
        return bool(started)


def _key_of(write: WriteId, decision: Decision[H]) -> str:
    """The writer key of ``decision`` as found by ``write``'s recovery: a stream may find
    (and finish, or abandon) the decision of the query it replaces."""
    if write.kind is Kind.STREAM:
        return f"{Kind.STREAM.value}:{decision.query_id}"
    return write.key
