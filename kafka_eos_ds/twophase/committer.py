"""The driver's half of the two-phase commit: decide, commit, mark done; abort; recover.

:class:`TwoPhaseCommitter` runs the policy of :mod:`.recovery` against a sink's
:class:`~.protocol.DecisionLog` and :class:`~.protocol.Participants`. It is the only
place that orders the steps, so every sink built on it gets the same guarantees:

* the decision is durable before the first participant is committed;
* ``commit`` is idempotent per write (:mod:`.identity`); ``abort`` never touches a
  decided write;
* recovery commits what was decided and fences everything else the writer left open;
* with a sink's :class:`~.protocol.Fences`, every fence (recovery, the post-commit sweep,
  ``abort`` and its grace sweeps, abandoning, a job's sweep of crashed jobs' transactions
  that no job can decide any more) aborts only the exact instances it observed,
  and only after claiming the step's decision writer: a driver that stalled and came back
  cannot abort what a newer driver decided meanwhile (:meth:`TwoPhaseCommitter._fence`);
* a decided participant that turns out aborted fails loudly (TransactionLostError), and
  so does one whose outcome can no longer be told (TransactionError, never a guess).

It calls only the ports declared in :mod:`.protocol`; nothing here knows Kafka.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, Callable, Iterable, Mapping, Sequence

from kafka_eos_ds.errors import KafkaEosError, TransactionError, TransactionLostError, TransactionOutcomeUnknownError
from kafka_eos_ds.twophase import faults
from kafka_eos_ds.twophase.identity import Kind, WriteId
from kafka_eos_ds.twophase.protocol import (
    ABANDONED,
    DECIDED,
    DONE,
    Decision,
    DecisionLog,
    DecisionState,
    DoneMark,
    Fences,
    Instance,
    Outcome,
    Participant,
    Participants,
    ProgressStore,
)
from kafka_eos_ds.twophase.recovery import (
    RecoveryContext,
    check_app_version,
    output_before,
    plan_abort,
    plan_recovery,
    plan_write,
    stream_target,
)
from kafka_eos_ds.twophase.retrying import NOTHING_DECIDED, retrying

log = logging.getLogger(__name__)

_FINISHES = "The commit decision is stored; restarting the query finishes the commit."
_RESTART = NOTHING_DECIDED
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


class TwoPhaseCommitter:
    """Drives decide -> commit -> done for the writers of one sink.

    Parameters
    ----------
    decisions : DecisionLog
        Where decisions are made durable.
    participants : Participants
        Commits and fences the sink's participants.
    progress_store : ProgressStore, optional
        Stores what a batch consumed with its first participant; needed only by sinks
        whose ``commit`` is given ``progress``.
    commit_timeout_s : float
        How long to keep retrying a step whose outcome is not known yet before failing
        it (a decision stays; a restart finishes it).
    parallelism : int
        Participants committed concurrently.
    abort_grace_s : float
        How long ``abort`` keeps sweeping for transactions opened by tasks that were
        still running when the write was aborted.
    time_needed_s : float
        How long each participant must still have before a timeout may abort it for the
        write to be decided (the time to commit them all, with room to spare).
    streams_share_ids : bool
        Whether every stream on the sink uses the same participant ids (the Kafka sink's
        ``{prefix}-{partition}-{attempt}``): then another stream's decision is either the
        query this one replaces or a conflict (:func:`~.recovery.stream_target`). A sink
        whose streams stage apart (the file sink) gives False.
    fences : Fences, optional
        Exact fencing (validate, then act): when given, every fence observes the exact
        instances, claims the step's decision writer, then aborts those instances only.
        Without it, ``participants.fence`` aborts whatever is open under each id.
    publish : callable, optional
        What the sink does once every participant of a decision is committed and before
        the decision is recorded done (the file sink: register the batch's partitions in
        a metastore). It must be idempotent: a restart that finishes the decision runs it
        again, so a crash between the last commit and ``done`` never skips it.
    """

    def __init__(self, decisions: DecisionLog, participants: Participants, *,
                 progress_store: ProgressStore | None = None, commit_timeout_s: float = 120.0,
                 parallelism: int = 8, abort_grace_s: float = 3.0, time_needed_s: float = 15.0,
                 streams_share_ids: bool = True, publish: Callable[[Decision], None] | None = None,
                 fences: Fences | None = None, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.decisions = decisions
        self.participants = participants
        self.progress_store = progress_store
        self.commit_timeout_s = commit_timeout_s
        self.parallelism = max(1, parallelism)
        self.abort_grace_s = abort_grace_s
        self.time_needed_s = time_needed_s
        self.streams_share_ids = streams_share_ids
        self.publish = publish
        self.fences = fences
        self._sleep = sleep
        self._clock = clock

    # -- before the tasks (the planner) ------------------------------------------

    def recover(self, write: WriteId, known_query: bool = True) -> DoneMark:
        """Finish the writer's unfinished decision, fence its other open ids; return the
        done mark its tasks get. Only for writers whose tasks re-open the ids of earlier
        runs (:attr:`~.identity.WriteId.recovers_before_tasks`). For a stream,
        ``known_query`` False (its id could not be read from the checkpoint) acts on the
        sink's latest stream decision, whoever's."""
        assert write.recovers_before_tasks, write
        own = self._read(lambda: self.decisions.latest(write.key))
        if write.kind is Kind.APP:
            check_app_version(own, write)
        target = own
        if write.kind is Kind.STREAM and self.streams_share_ids:
            latest = self._read(lambda: self.decisions.latest_of(Kind.STREAM.value))
            target = stream_target(own, latest, write.app) if known_query else latest
        faults.check("driver-after-reading-decision")
        if known_query and target is not None and target is not own and output_before(target):
            self._check_resumable(target)
        open_ids = self._open_ids(write)
        plan = plan_recovery(RecoveryContext(target, open_ids, write.app if known_query else None))
        if plan.only_if_started and plan.finish is not None and not self._started(plan.finish):
            log.warning("abandoning batch %s of query %s: its checkpoint is gone and none of it was committed; "
                        "this query re-reads its input", plan.finish.batch_id, plan.finish.query_id)
            self._abandon(_key_of(write, plan.finish), plan.finish, plan.fence)
            return DoneMark()
        if plan.finish is not None:
            log.warning("finishing the commit of batch %s of query %s after a restart",
                        plan.finish.batch_id, plan.finish.query_id)
            self._finish(_key_of(write, plan.finish), plan.finish)
        if plan.fence:
            log.warning("aborting %d leftover transaction(s): %s", len(plan.fence), ", ".join(plan.fence))
        self._fence(plan.fence)
        return plan.mark

    def _finish_jobs(self) -> None:
        """Finish what other batch jobs on this sink decided but did not end (a driver that
        died during its commit): decided is committed, whoever finishes it. A job's ids are
        its own (never re-opened by another job), so this is clean-up, not a precondition:
        it runs at a job's commit, where the write is known to be a job."""
        for key, decision in self._read(lambda: self.decisions.unfinished(Kind.JOB.value)):
            log.warning("finishing the commit of batch job %s, which stopped after its decision", decision.query_id)
            try:
                self._finish(key, decision)
            except (TransactionLostError, TransactionOutcomeUnknownError) as exc:
                # Known lost, or no longer to be told (and said so, by this error, which names
                # what to check): recorded, so that it fails one write, not every later one.
                self._record(key, decision.with_state(_final_state(exc)))
                raise
            except Exception:
                # The job may be live and have finished its decision meanwhile, down to
                # dropping its records (the directory this record was going to): then there
                # is nothing left to finish. Otherwise the failure stands, and the decision
                # stays for the next writer.
                if self._latest(key) == decision:
                    raise
                log.info("batch job %s finished its commit meanwhile", decision.query_id)

    def _latest(self, key: str) -> Decision | None:
        latest: Decision | None = self._read(lambda: self.decisions.latest(key))
        return latest

    def _fence_abandoned_jobs(self, write: WriteId) -> None:
        """Abort the open transactions of other batch jobs that no job can decide any more
        (a driver that died after its tasks wrote: they hold back every ``read_committed``
        reader of their partitions until the broker's timeout). Clean-up, best effort: this
        job's own write does not depend on it.

        Validate, then act exactly (:meth:`_fence`), with the other jobs' decision writers
        as the token: the step observes the instances past the least margin any job's
        commit asks (``Fences.abandoned``), shuts their writers out (a job whose commit
        step began before can decide nothing any more; one that begins after refuses them,
        too old), then reads the decided decisions, which are therefore complete, and
        aborts the observed instances that none of them names. A live job that is shut out
        fails before its decision: nothing of it becomes visible (docs/dev/decisions.md,
        "A crashed df.write's open transactions are fenced by the next job")."""
        fences = self.fences
        if fences is None:
            return
        try:
            found: Sequence[Instance] = self._retrying(lambda: fences.abandoned(write),
                                                       "Could not describe other jobs' open transactions",
                                                       then=_RESTART)
            if not found:
                return
            self._retrying(lambda: fences.shut_out(found), "Could not fence other jobs' commit-log writers",
                           then=_RESTART)
            decided = {p.id for _key, decision in self._read(lambda: self.decisions.unfinished(Kind.JOB.value))
                       for p in decision.participants}
            targets = [i for i in found if i.id not in decided]
            if not targets:
                return
            log.warning("aborting %d transaction(s) of crashed batch jobs, too near their timeout for any job to "
                        "commit: %s", len(targets), ", ".join(i.id for i in targets))
            self._claim_and_abort(targets)
        except KafkaEosError as exc:
            log.warning("could not abort other batch jobs' open transactions (the broker aborts them at their "
                        "timeout): %s", exc)

    def _record(self, key: str, decision: Decision) -> None:
        self._retrying(lambda: self.decisions.write(key, decision),
                       f"Could not record how job {key}'s commit ended", then=_RESTART)

    def commit_decided(self, decision: Decision) -> None:
        """Commit ``decision``'s participants (with its progress) and nothing else: no
        decision is written, nothing is fenced. For an operator finishing what a stopped
        driver decided (the writer's own next step records it done)."""
        assert decision.state == DECIDED, decision
        self._carry_legacy(decision)
        self._commit_all(decision)

    # -- after the tasks ----------------------------------------------------------

    def commit(self, write: WriteId, messages: Iterable[Participant | None],
               progress: Mapping[str, Any] | None = None) -> None:
        """Commit a write; ``progress`` (what a stream's batch consumed) commits with its
        first participant."""
        messages = list(messages)
        batch = write.version
        faults.check("driver-before-decision", batch=batch)
        own = self._read(lambda: self.decisions.latest(write.key), then=_RESTART)
        if write.kind is Kind.STREAM and self.streams_share_ids:
            stream_target(own, self._read(lambda: self.decisions.latest_of(Kind.STREAM.value)), write.app)
        if write.kind is Kind.JOB:
            self._finish_jobs()
            self._fence_abandoned_jobs(write)
        plan = plan_write(own, write, messages, progress)
        if plan.noop:
            log.info("batch %s of %s already committed", batch, write.app)
            return
        if plan.earlier is not None:
            self._finish(write.key, plan.earlier)
        decision = plan.decision
        assert decision is not None
        superseded = sorted({i for p in messages if p is not None for i in self.participants.superseded(p)})
        if write.kind is Kind.FOREACH:
            # Runs of the stream before this one: what they left open is not decided (their
            # unfinished decision was just finished), and would hold back readers.
            self._fence(sorted(set(self._open_ids(write)) - {p.id for p in decision.participants}
                               - {p.id for p in messages if p is not None}))
        if plan.skip:
            log.info("write %s of batch %s of %s was committed by an earlier run; this one adds nothing",
                     decision.write, batch, write.app)
            self._fence(sorted({p.id for p in messages if p is not None and p.records > 0} | set(superseded)))
            if plan.write_decision:
                self.decisions.write(write.key, decision)
            return
        if plan.write_decision and not decision.participants:
            # Nothing to commit (every task was empty or a re-run of a decided batch):
            # no decision to record, only earlier attempts to shut out. Recorded all the
            # same: a sink whose checkpoint has committed batches always has a decision,
            # so a commit log that lost them is noticed (never guessed). The progress has
            # no output to be atomic with: the record stores it, in the same write, so a
            # driver whose writer was fenced since cannot store it (and move it back).
            self._fence(superseded)
            self.decisions.write(write.key, decision.with_state(DONE))
            self._forget_job(write)
            return
        if plan.write_decision:
            self._check_fit(decision)
            if decision.progress is not None:
                # Attached before the decision: a failure here refuses the batch undecided
                # (an unreadable group, a missing ACL), instead of wedging a decided one.
                # Marked so, finishing the decision never attaches it again (_carry_legacy).
                self._carry(decision)
                decision = replace(decision, progress_attached=True)
            self.decisions.write(write.key, decision)
        faults.check("driver-after-decision", batch=batch)
        try:
            self._commit_all(decision, write.key)
        except Exception as exc:
            if write.kind not in (Kind.JOB, Kind.APP):
                raise
            raise self._batch_write_failed(write, decision, exc) from exc
        faults.check("driver-after-all-commits", batch=batch)
        self._publish(decision)
        if plan.write_decision:
            # Earlier attempts of the winning tasks may still hold open transactions
            # (a failed attempt, a zombie), and so may the losing attempts of speculation
            # (any attempt number); they hold back readers until fenced.
            self._fence(self._strays(write, decision, superseded))
        else:
            # A decision another run wrote (one presumed dead that came back, or an app
            # write's earlier run) was finished instead of this run's: its tasks' own
            # transactions are in no decision, and would hold back readers until the next
            # recovery or their timeout.
            decided = {p.id for p in decision.participants}
            self._fence(sorted({p.id for p in messages if p is not None and p.records > 0} - decided))
        self._record_done(write, decision)
        faults.check("driver-after-done", batch=batch)
        self._forget_job(write)

    def _batch_write_failed(self, write: WriteId, decision: Decision, exc: Exception) -> KafkaEosError:
        """The error of a batch write (JOB, APP) whose commit failed after its decision.
        Spark reports the job failed: the error must say what became of its output, or a
        re-run would write it twice without anyone knowing. A job's outcome known to be
        final (lost, or no longer to be told) is recorded here, so that no later job on the
        prefix fails on it again (:meth:`_finish_jobs`). An app write's stays decided: its
        user retries it by running the same version again, which must say so again, not
        succeed without its rows."""
        kind = type(exc) if isinstance(exc, KafkaEosError) else TransactionError
        job, version = write.kind is Kind.JOB, write.version
        if isinstance(exc, TransactionLostError):
            told = _JOB_LOST if job else _APP_LOST.format(app=write.app, version=version)
        elif isinstance(exc, TransactionOutcomeUnknownError):
            told = _JOB_UNTOLD if job else _APP_UNTOLD.format(app=write.app, version=version)
        else:  # the commit did not get through: the decision stands, and the rest is committed later
            told = _JOB_DECIDED if job else _APP_DECIDED.format(app=write.app, version=version)
        final = _final_state(exc)
        if job and final is not None:
            self._record_final(write.key, decision.with_state(final))
        return kind(f"{exc} {told}", retriable=False)

    def _record_final(self, key: str, decision: Decision) -> None:
        """Record a batch write's final outcome; if that fails too, the next writer on the
        prefix finds the decision unfinished and records it (failing once, as it did before)."""
        try:
            self._record(key, decision)
        except KafkaEosError as exc:
            log.warning("could not record how %s ended (%s); the next write on the prefix records it", key, exc)

    def abort(self, write: WriteId | None, messages: Iterable[Participant | None],
              fallback: WriteId | None = None) -> None:
        """Fence what an undecided write left open; a decided one is left to recovery.
        ``write`` None: no task reported; ``fallback`` names the ids its tasks would use."""
        messages = list(messages)
        superseded = [i for p in messages if p is not None for i in self.participants.superseded(p)]
        owner = write if write is not None else fallback
        latest = self._read(lambda: self.decisions.latest(write.key)) if write is not None else None
        batch = write.version if write is not None else None
        faults.check("driver-after-reading-decision", batch=batch)
        if latest is not None and write is not None and latest.same_batch(write.app, write.version) \
                and latest.state == DECIDED:
            log.warning("batch %s of %s was decided; its transactions are left for recovery to finish",
                        write.version, write.app)
        app, version = (write.app, write.version) if write is not None else (None, -1)
        self._fence(plan_abort(latest, app, version, messages, superseded, self._open_ids(owner) if owner else ()))
        # Tasks killed when Spark cancelled the stage may still be finishing their
        # write after this abort started (their Python workers notice late); sweep again
        # for a short while so their transactions do not hold back readers.
        deadline = self._clock() + self.abort_grace_s
        while self._clock() < deadline:
            self._sleep(0.5)
            self._fence(plan_abort(latest, app, version, (), (), self._open_ids(owner) if owner else ()))

    # -- steps --------------------------------------------------------------

    def _check_fit(self, decision: Decision) -> None:
        """Refuse to decide a write one of whose participants can no longer commit.

        Decided, such a write would end partly committed (the others commit, that one is
        lost) and every restart would fail on it; refused, ``abort()`` fences it all and
        the restarted query runs the batch again. A transient error asking is retried:
        only the participants' state refuses."""
        problem = self._retrying(lambda: self.participants.unfit(decision.participants, self.time_needed_s),
                                 "Could not check the batch's transactions before its decision", then=_RESTART)
        if problem:
            raise TransactionError(
                f"Batch {decision.batch_id} of {decision.query_id} was not committed: {problem} "
                "Nothing of the batch is visible; restarting the query runs it again.", retriable=True)

    def _strays(self, write: WriteId, decision: Decision, superseded: Sequence[str]) -> list[str]:
        """What to fence once ``decision`` is committed: the superseded ids, and every id
        of the writer still open. Only the write just committed can be decided and
        unfinished here (an earlier decision was finished first), and its participants are
        committed, past ``Ongoing``: an id of the decision that is open again holds a
        transaction begun since its commit (a zombie task's, whose InitProducerId arrived
        late), which no decision names and which would hold back readers."""
        decided = {p.id for p in decision.participants}
        still_open = self._open_ids(write)
        return sorted((set(superseded) - decided) | set(still_open))

    def _finish(self, key: str, decision: Decision) -> None:
        self._carry_legacy(decision)
        self._commit_all(decision, key)
        self._publish(decision)
        done = decision.with_state(DONE)
        self._retrying(lambda: self.decisions.write(key, done), f"Could not record batch {decision.batch_id} done")

    def _publish(self, decision: Decision) -> None:
        if self.publish is not None:
            publish = self.publish
            self._retrying(lambda: publish(decision), f"Could not publish batch {decision.batch_id}")

    def _carry_legacy(self, decision: Decision) -> None:
        """Attach the progress of a decision written before progress was attached ahead of
        the decision (an older version's record: no ``progress_attached``); a no-op once
        the first participant has committed. A marked decision's progress is in its first
        participant already: attaching it again would only open a window for a driver that
        stalls inside the attachment and comes back after a newer driver committed the
        batch, to open a new transaction under the still-current epoch and move the
        group's offsets back (the schedule zombie-recovery-carry)."""
        if decision.progress is not None and not decision.progress_attached:
            self._carry(decision)

    def _carry(self, decision: Decision) -> None:
        first, progress = decision.participants[0], decision.progress
        assert progress is not None
        store = self._progress_store()
        self._retrying(lambda: store.carry(progress, first), f"Could not attach the batch's progress to {first.id}",
                       then=_RESTART)
        faults.check("driver-after-progress", batch=decision.batch_id)

    def _record_done(self, write: WriteId, decision: Decision) -> None:
        """Record the write's decision done. Another batch job's commit finishes the
        decisions it finds unfinished (:meth:`_finish_jobs`) and cannot tell a live job
        from a dead one, so a job may find its own decision recorded done by another,
        its writer's log moved on under it: every row is final then, and the job succeeded
        (reporting it failed would have its user run it again, writing its rows twice)."""
        try:
            self.decisions.write(write.key, decision.with_state(DONE))
        except KafkaEosError:
            if write.kind is not Kind.JOB or not _finished_by_another(self._latest(write.key), decision):
                raise
            log.info("batch job %s: another job's commit finished its decision; every row is committed", write.app)

    def _forget_job(self, write: WriteId) -> None:
        """Drop a finished job's record: best effort (the job is committed either way, and
        a done record is only a little more for the commit log to keep)."""
        if write.kind is Kind.JOB:
            try:
                self._forget(write.key)
            except KafkaEosError as exc:
                log.warning("job %s is committed, but its record could not be dropped: %s", write.app, exc)

    def _forget(self, key: str) -> None:
        self._retrying(lambda: self.decisions.forget(key), f"Could not record {key} done", then=_RESTART)

    def _check_resumable(self, decision: Decision) -> None:
        """A query replacing one whose checkpoint was lost starts where the progress store
        says the output ends; if the store lost it (a consumer group whose offsets expired),
        the new query re-reads input that is already in the output: stop before writing.
        ``decision``: done, or abandoned (the output ends with the batch before it)."""
        progress = decision.progress
        assert progress is not None
        store = self._progress_store()
        problem = self._retrying(lambda: store.resumes_before(progress, reached=decision.state != ABANDONED),
                                 "Could not read where the output ends", then=_RESTART)
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

    def _started(self, decision: Decision) -> bool:
        """Whether the first participant (which carries the progress) committed: asked of
        the progress store, which also knows where the progress stands. Never guessed:
        finishing a batch that had not started duplicates the input the new query
        re-reads, abandoning one that had started loses what it made visible."""
        first, progress = decision.participants[0], decision.progress
        assert progress is not None
        store = self._progress_store()
        started = self._first_started(decision)
        if started is None:
            raise TransactionError(
                f"Cannot tell whether batch {decision.batch_id} of query {decision.query_id} (decided before its "
                f"checkpoint was lost) had started to commit: {store.unknown_message(progress, first)}",
                retriable=False)
        return bool(started)

    def _read(self, call: Callable[[], Any], then: str = _RESTART) -> Any:
        return self._retrying(call, "Could not read the sink's decisions", then=then)

    def _open_ids(self, write: WriteId) -> Sequence[str]:
        ids: Sequence[str] = self._retrying(lambda: self.participants.open_ids(write),
                                            "Could not list the sink's open transactions", then=_RESTART)
        return ids

    def _fence_one(self, participant_id: str) -> None:
        self._retrying(lambda: self.participants.fence(participant_id), f"Could not abort {participant_id}",
                       then=_RESTART)

    def _commit_all(self, decision: Decision, key: str | None = None) -> None:
        """Commit every participant, the first (which carries the progress) alone and first.
        ``key``: the decision's writer key, to record it abandoned (None: an operator
        finishing a decision, who is told instead)."""
        parts = list(decision.participants)
        if not parts:
            return
        first, rest = parts[0], parts[1:]
        # The first one alone, so a crash test can stop between "some" and "all".
        outcomes = [(first, self._commit_one(first))]
        if outcomes[0][1] in (Outcome.LOST, Outcome.UNKNOWN) and self._never_started(decision):
            self._abandon_unstarted(key, decision)
        faults.check("driver-after-first-commit", batch=decision.batch_id)
        faults.check("commit-raise", batch=decision.batch_id)
        if rest:
            with ThreadPoolExecutor(min(self.parallelism, len(rest))) as pool:
                outcomes += list(zip(rest, pool.map(self._commit_one, rest), strict=True))
        lost = [p for p, outcome in outcomes if outcome is Outcome.LOST]
        if lost:
            raise TransactionLostError(
                f"Batch {decision.batch_id} of {decision.query_id} was decided but "
                f"{len(lost)} of its {len(parts)} transaction(s) were aborted instead of committed "
                f"({', '.join(p.id for p in lost)}); their records are not in the output. "
                + self.participants.lost_message(lost)
            )
        unknown = [p for p, outcome in outcomes if outcome is Outcome.UNKNOWN]
        if unknown:
            raise TransactionOutcomeUnknownError(
                f"Cannot tell whether batch {decision.batch_id} of query {decision.query_id} committed: the outcome "
                f"of {len(unknown)} of its {len(parts)} decided transaction(s) can no longer be told. "
                + self.participants.unknown_outcome_message(unknown), retriable=False)

    def _never_started(self, decision: Decision) -> bool:
        """Whether the progress store knows that the first participant did not commit (a
        decision with progress only; None from the store, "cannot tell", is not "no")."""
        return decision.progress is not None and self._first_started(decision) is False

    def _first_started(self, decision: Decision) -> bool | None:
        """The progress store's answer to whether the first participant, which carried the
        decision's progress, committed (None: it cannot tell)."""
        first, progress, store = decision.participants[0], decision.progress, self._progress_store()
        assert progress is not None
        started: bool | None = self._retrying(lambda: store.started(progress, first),
                                              f"Could not learn whether {first.id} committed", then=_RESTART)
        return started

    def _abandon(self, key: str, decision: Decision, also: Sequence[str] = ()) -> None:
        """Record ``decision`` abandoned, then fence its participants (and ``also``).
        Recorded first: fenced first, a crash in between would leave a decided batch
        whose first participant's start can no longer be told (its epoch moved on)."""
        abandoned = decision.with_state(ABANDONED)
        self._retrying(lambda: self.decisions.write(key, abandoned), "Could not record the abandoned batch",
                       then=_RESTART)
        self._fence(sorted({p.id for p in decision.participants} | set(also)))

    def _abandon_unstarted(self, key: str | None, decision: Decision) -> None:
        """The first participant was aborted after the decision and never committed: keep
        the batch all or nothing. Committing the others would leave it partly visible for
        good, and a query that replaces this one after a lost checkpoint abandons a batch
        whose first participant did not commit (``recover``) and re-reads its input, the
        others' records included. So none is committed: the decision is abandoned
        (:meth:`_abandon`), and the restarted query runs the batch again under a new
        decision."""
        first, progress = decision.participants[0], decision.progress
        assert progress is not None
        why = self._progress_store().abandoned_message(progress, first)
        what = (f"Batch {decision.batch_id} of query {decision.query_id} was not committed: its first transaction "
                f"{first.id}, which carries the batch's progress, was aborted after the batch was decided, and "
                f"none of the batch's other transactions was committed. {why}")
        if key is None:
            raise TransactionError(f"{what} Not committing them either.", retriable=False)
        log.warning("abandoning batch %s of query %s: its first transaction %s was aborted after the decision",
                    decision.batch_id, decision.query_id, first.id)
        self._abandon(key, decision)
        raise TransactionError(f"{what} Nothing of the batch is visible: it is recorded abandoned, and restarting "
                               "the query runs it again (docs/troubleshooting.md, \"Batch N was not committed: its "
                               "first transaction was aborted after the decision\").", retriable=True)

    def _commit_one(self, participant: Participant) -> Outcome:
        outcome: Outcome = self._retrying(lambda: self.participants.commit(participant),
                                          f"Could not learn the outcome of committing {participant.id}",
                                          again=Outcome.RETRY)
        return outcome

    def _retrying(self, call: Callable[[], Any], failure: str, *, again: Any = None, then: str = _FINISHES) -> Any:
        return retrying(call, failure, self.commit_timeout_s, again=again, then=then, sleep=self._sleep,
                        clock=self._clock)

    def _progress_store(self) -> ProgressStore:
        if self.progress_store is None:
            raise TypeError("this sink's decisions carry progress but its committer has no progress_store")
        return self.progress_store

    def _fence(self, ids: Sequence[str]) -> None:
        """Abort what is open under ``ids``. With the sink's :class:`~.protocol.Fences`:
        validate, then act exactly. The step fenced its decision writer and read the log
        when it began; now it observes the exact instances open under ``ids``, claims the
        writer (a record it commits, which fails if a newer step fenced the writer since),
        and aborts those instances only. A decision a newer step writes after the claim
        names only instances begun after it, never observed here; one written before the
        claim came from a step that fenced this writer, so the claim fails and nothing is
        aborted. A stall anywhere in between is therefore harmless (docs/dev/decisions.md,
        "Fences validate, then abort exact transactions")."""
        if not ids:
            return
        if self.fences is None:
            with ThreadPoolExecutor(min(self.parallelism, len(ids))) as pool:
                list(pool.map(self._fence_one, ids))
            return
        fences = self.fences
        targets: Sequence[Instance] = self._retrying(lambda: fences.observe(ids),
                                                     "Could not describe the sink's open transactions",
                                                     then=_RESTART)
        if targets:
            self._claim_and_abort(targets)

    def _claim_and_abort(self, targets: Sequence[Instance]) -> None:
        """Claim the step's decision writer, then abort the observed ``targets`` exactly
        (nothing if the claim fails: a newer step took the writer over)."""
        fences = self.fences
        assert fences is not None
        self._retrying(lambda: fences.claim(targets), "Could not claim the commit-log writer before aborting",
                       then=_RESTART)
        faults.check("driver-after-claim")
        with ThreadPoolExecutor(min(self.parallelism, len(targets))) as pool:
            list(pool.map(self._abort_exact, targets))

    def _abort_exact(self, instance: Instance) -> None:
        fences = self.fences
        assert fences is not None
        if not self._retrying(lambda: fences.abort_exact(instance), f"Could not abort {instance.id}",
                              then=_RESTART):
            log.info("%s (%s) moved on before it could be aborted: not this step's to abort", instance.id,
                     instance.tag)


def _finished_by_another(latest: Decision | None, decision: Decision) -> bool:
    """``latest`` is ``decision`` recorded done (by another job's commit)."""
    return (latest is not None and latest.state == DONE and latest.query_id == decision.query_id
            and latest.batch_id == decision.batch_id
            and [p.id for p in latest.participants] == [p.id for p in decision.participants])


def _key_of(write: WriteId, decision: Decision) -> str:
    """The writer key of ``decision`` as found by ``write``'s recovery: a stream may find
    (and finish, or abandon) the decision of the query it replaces."""
    if write.kind is Kind.STREAM:
        return f"{Kind.STREAM.value}:{decision.query_id}"
    return write.key


def _final_state(exc: BaseException) -> DecisionState | None:
    """The state a decision's commit ended in, when ``exc`` says it is final: LOST (its
    transactions were aborted) or UNTOLD (their outcome can no longer be told); None when
    the commit may still get through."""
    if isinstance(exc, TransactionLostError):
        return DecisionState.LOST
    if isinstance(exc, TransactionOutcomeUnknownError):
        return DecisionState.UNTOLD
    return None
