"""The driver's half of the two-phase commit: decide, commit, mark done; abort; recover.

:class:`TwoPhaseCommitter` runs the policy of :mod:`.recovery` against a sink's
:class:`~.protocol.DecisionLog` and :class:`~.protocol.Participants`. It is the only
place that orders the steps, so every sink built on it gets the same guarantees:

* the decision is durable before the first participant is committed;
* ``commit`` is idempotent per (query, batch); ``abort`` never touches a decided batch;
* recovery commits what was decided and fences everything else the sink left open;
* a decided participant that turns out aborted fails loudly (TransactionLostError), and
  so does one whose outcome can no longer be told (TransactionError, never a guess).

It calls only the ports declared in :mod:`.protocol`; nothing here knows Kafka.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

from kafka_eos_ds.errors import KafkaEosError, TransactionError, TransactionLostError
from kafka_eos_ds.twophase import faults
from kafka_eos_ds.twophase.protocol import (
    ABANDONED,
    DONE,
    Decision,
    DecisionLog,
    DoneMark,
    Outcome,
    Participant,
    Participants,
    ProgressStore,
)
from kafka_eos_ds.twophase.recovery import RecoveryContext, plan_abort, plan_commit, plan_recovery

log = logging.getLogger(__name__)

_FINISHES = "The commit decision is stored; restarting the query finishes the commit."
_RESTART = "Nothing was decided by this step; restarting the query runs it again."


class TwoPhaseCommitter:
    """Drives decide -> commit -> done for one sink.

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
        How long to keep retrying a participant whose outcome is not known yet before
        failing the batch (the decision stays; a restart finishes it).
    parallelism : int
        Participants committed concurrently.
    abort_grace_s : float
        How long ``abort`` keeps sweeping for transactions opened by tasks that were
        still running when the batch was aborted.
    time_needed_s : float
        How long each participant must still have before a timeout may abort it for the
        batch to be decided (the time to commit them all, with room to spare).
    """

    def __init__(self, decisions: DecisionLog, participants: Participants, *,
                 progress_store: Optional[ProgressStore] = None, commit_timeout_s: float = 120.0,
                 parallelism: int = 8, abort_grace_s: float = 3.0, time_needed_s: float = 15.0,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> None:
        self.decisions = decisions
        self.participants = participants
        self.progress_store = progress_store
        self.commit_timeout_s = commit_timeout_s
        self.parallelism = max(1, parallelism)
        self.abort_grace_s = abort_grace_s
        self.time_needed_s = time_needed_s
        self._sleep = sleep
        self._clock = clock

    # -- driver entry points ------------------------------------------------

    def commit(self, query_id: str, batch_id: int, messages: Iterable[Optional[Participant]],
               progress: Optional[Mapping[str, Any]] = None) -> None:
        """Commit a batch; ``progress`` (what it consumed) commits with its first participant."""
        messages = list(messages)
        faults.check("driver-before-decision", batch=batch_id)
        plan = plan_commit(self.decisions.latest(), query_id, batch_id, messages, progress)
        if plan.noop:
            log.info("batch %s of query %s already committed", batch_id, query_id)
            return
        if plan.earlier is not None:
            self._finish(plan.earlier)
        decision = plan.decision
        assert decision is not None
        superseded = sorted({i for p in messages if p is not None for i in self.participants.superseded(p)})
        if plan.write_decision and not decision.participants:
            # Nothing to commit (every task was empty or a re-run of a decided batch):
            # no decision to record, only earlier attempts to shut out. The progress has
            # no output to be atomic with: it is stored on its own.
            self._fence(superseded)
            if progress is not None:
                store = self._progress_store()
                self._retrying(lambda: store.carry(progress, None), "Could not store the batch's progress")
            # Recorded all the same: a sink whose checkpoint has committed batches always
            # has a decision, so a commit log that lost them is noticed (never guessed).
            self.decisions.write(decision.with_state(DONE))
            return
        if plan.write_decision:
            self._check_fit(decision)
            self.decisions.write(decision)
        faults.check("driver-after-decision", batch=batch_id)
        self._commit_all(decision, batch_id)
        faults.check("driver-after-all-commits", batch=batch_id)
        if plan.write_decision:
            # Earlier attempts of the winning tasks may still hold open transactions
            # (a failed attempt, a zombie), and so may the losing attempts of speculation
            # (any attempt number); they hold back readers until fenced.
            self._fence(self._strays(decision, superseded))
        self.decisions.write(decision.with_state(DONE))
        faults.check("driver-after-done", batch=batch_id)

    def abort(self, query_id: Optional[str], batch_id: int, messages: Iterable[Optional[Participant]]) -> None:
        messages = list(messages)
        superseded = [i for p in messages if p is not None for i in self.participants.superseded(p)]
        latest = self._read_latest()
        faults.check("driver-after-reading-decision", batch=batch_id)
        if latest is not None and query_id is not None and latest.same_batch(query_id, batch_id):
            log.warning("batch %s of query %s was decided; its transactions are left for recovery to finish",
                        batch_id, query_id)
        self._fence(plan_abort(latest, query_id, batch_id, messages, superseded, self._open_ids()))
        # Tasks killed when Spark cancelled the stage may still be finishing their
        # write after this abort started (their Python workers notice late); sweep again
        # for a short while so their transactions do not hold back readers.
        deadline = self._clock() + self.abort_grace_s
        while self._clock() < deadline:
            self._sleep(0.5)
            self._fence(plan_abort(latest, query_id, batch_id, (), (), self._open_ids()))

    def recover(self, query_id: Optional[str] = None) -> DoneMark:
        """Finish an unfinished decision, fence every other open id; return the done mark.

        ``query_id``: the recovering query (lets recovery tell a decision of a query whose
        checkpoint was lost; see :class:`~.recovery.RecoveryPlan`)."""
        latest = self._read_latest()
        faults.check("driver-after-reading-decision")
        open_ids = self._open_ids()
        plan = plan_recovery(RecoveryContext(latest, open_ids, query_id))
        if plan.only_if_started and plan.finish is not None and not self._started(plan.finish):
            log.warning("abandoning batch %s of query %s: its checkpoint is gone and none of it was committed; "
                        "this query re-reads its input", plan.finish.batch_id, plan.finish.query_id)
            self._fence(sorted({p.id for p in plan.finish.participants} | set(plan.fence)))
            abandoned = plan.finish.with_state(ABANDONED)
            self._retrying(lambda: self.decisions.write(abandoned), "Could not record the abandoned batch",
                           then=_RESTART)
            return DoneMark()
        if plan.finish is not None:
            log.warning("finishing the commit of batch %s of query %s after a restart",
                        plan.finish.batch_id, plan.finish.query_id)
            self._finish(plan.finish)
        if plan.fence:
            log.warning("aborting %d leftover transaction(s): %s", len(plan.fence), ", ".join(plan.fence))
        self._fence(plan.fence)
        return plan.mark

    # -- steps --------------------------------------------------------------

    def _check_fit(self, decision: Decision) -> None:
        """Refuse to decide a batch one of whose participants can no longer commit.

        Decided, such a batch would end partly committed (the others commit, that one is
        lost) and every restart would fail on it; refused, ``abort()`` fences it all and
        the restarted query runs the batch again."""
        # Not retried: any error here refuses the batch just the same, before a decision.
        problem = self.participants.unfit(decision.participants, self.time_needed_s)
        if problem:
            raise TransactionError(
                f"Batch {decision.batch_id} of query {decision.query_id} was not committed: {problem} "
                "Nothing of the batch is visible; restarting the query runs it again.", retriable=True)

    def _strays(self, decision: Decision, superseded: Sequence[str]) -> list[str]:
        """What to fence once ``decision`` is committed: the superseded ids, and every other
        id of the sink still open. Only the batch just committed can be decided and
        unfinished here (an earlier decision was finished first), and its participants
        are committing, not open; so nothing that belongs to a decision is fenced."""
        decided = {p.id for p in decision.participants}
        still_open = self._retrying(lambda: list(self.participants.open_ids()), "Could not list the open participants")
        return sorted((set(superseded) | set(still_open)) - decided)

    def _finish(self, decision: Decision) -> None:
        self._commit_all(decision, decision.batch_id)
        done = decision.with_state(DONE)
        self._retrying(lambda: self.decisions.write(done), f"Could not record batch {decision.batch_id} done")

    def _started(self, decision: Decision) -> bool:
        """Whether the first participant (which carries the progress) committed: asked of
        the progress store, which also knows where the progress stands. Never guessed:
        finishing a batch that had not started duplicates the input the new query
        re-reads, abandoning one that had started loses what it made visible."""
        first, progress = decision.participants[0], decision.progress
        assert progress is not None
        store = self._progress_store()
        started = self._retrying(lambda: store.started(progress, first),
                                 f"Could not learn whether {first.id} committed", then=_RESTART)
        if started is None:
            raise TransactionError(
                f"Cannot tell whether batch {decision.batch_id} of query {decision.query_id} (decided before its "
                f"checkpoint was lost) had started to commit: {store.unknown_message(progress, first)}",
                retriable=False)
        return bool(started)

    def _read_latest(self) -> Optional[Decision]:
        return self._retrying(self.decisions.latest, "Could not read the sink's latest decision", then=_RESTART)

    def _open_ids(self) -> Sequence[str]:
        return self._retrying(self.participants.open_ids, "Could not list the sink's open transactions",
                              then=_RESTART)

    def _fence_one(self, participant_id: str) -> None:
        self._retrying(lambda: self.participants.fence(participant_id), f"Could not abort {participant_id}",
                       then=_RESTART)

    def _commit_all(self, decision: Decision, batch_id: int) -> None:
        parts = list(decision.participants)
        if not parts:
            return
        first, rest = parts[0], parts[1:]
        progress = decision.progress
        if progress is not None:
            # The batch's progress rides in the first participant, so the two become
            # visible together; a no-op when that participant already committed.
            store = self._progress_store()
            self._retrying(lambda: store.carry(progress, first), f"Could not attach the batch's progress to {first.id}")
            faults.check("driver-after-progress", batch=batch_id)
        # The first one alone, so a crash test can stop between "some" and "all".
        outcomes = [(first, self._commit_one(first))]
        faults.check("driver-after-first-commit", batch=batch_id)
        faults.check("commit-raise", batch=batch_id)
        if rest:
            with ThreadPoolExecutor(min(self.parallelism, len(rest))) as pool:
                outcomes += list(zip(rest, pool.map(self._commit_one, rest), strict=True))
        lost = [p for p, outcome in outcomes if outcome is Outcome.LOST]
        if lost:
            raise TransactionLostError(
                f"Batch {decision.batch_id} of query {decision.query_id} was decided but "
                f"{len(lost)} of its {len(parts)} transaction(s) were aborted instead of committed "
                f"({', '.join(p.id for p in lost)}); their records are not in the output. "
                + self.participants.lost_message(lost)
            )
        unknown = [p for p, outcome in outcomes if outcome is Outcome.UNKNOWN]
        if unknown:
            raise TransactionError(
                f"Cannot tell whether batch {decision.batch_id} of query {decision.query_id} committed: the outcome "
                f"of {len(unknown)} of its {len(parts)} decided transaction(s) can no longer be told. "
                + self.participants.unknown_outcome_message(unknown), retriable=False)

    def _commit_one(self, participant: Participant) -> Outcome:
        return self._retrying(lambda: self.participants.commit(participant),
                              f"Could not learn the outcome of committing {participant.id}", again=Outcome.RETRY)

    def _retrying(self, call: Callable[[], Any], failure: str, *, again: Any = None, then: str = _FINISHES) -> Any:
        """``call()`` until it answers something other than ``again``, retrying retriable
        errors, with backoff, for commit_timeout_s; then a retriable TransactionError that
        starts with ``failure``. A non-retriable error is raised as it is."""
        deadline = self._clock() + self.commit_timeout_s
        delay = 0.05
        last: Optional[BaseException] = None
        while True:
            try:
                answer = call()
                if again is None or answer is not again:
                    return answer
            except KafkaEosError as exc:
                if not exc.retriable:
                    raise
                if last is None:  # once per step: a restarting broker answers so for seconds
                    log.warning("%s yet (%s); retrying for up to %.0fs", failure, exc, deadline - self._clock())
                last = exc
            if self._clock() >= deadline:
                raise TransactionError(
                    f"{failure} within {self.commit_timeout_s:.0f}s (last error: {last}). {then}",
                    retriable=True) from last
            self._sleep(delay)
            delay = min(delay * 2, 2.0)

    def _progress_store(self) -> ProgressStore:
        if self.progress_store is None:
            raise TypeError("this sink's decisions carry progress but its committer has no progress_store")
        return self.progress_store

    def _fence(self, ids: Sequence[str]) -> None:
        if not ids:
            return
        with ThreadPoolExecutor(min(self.parallelism, len(ids))) as pool:
            list(pool.map(self._fence_one, ids))
