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
  cannot abort what a newer driver decided meanwhile (:meth:`.steps.Steps.fence`);
* a decided participant that turns out aborted fails loudly (TransactionLostError), and
  so does one whose outcome can no longer be told (TransactionError, never a guess).

It calls only the ports declared in :mod:`.protocol`; nothing here knows Kafka. The
work is split by role, as Flink's Kafka committer is: :mod:`.committing` (decide ->
commit -> done), :mod:`.recovering` (recovery, the abandon path, other jobs' leftovers),
:mod:`.aborting` (the abort sweep), over the steps they share (:mod:`.steps`) and the
ports with their retry policy (:mod:`.ports`); a failed batch write's message is
:mod:`.outcome_messages`.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Generic, Iterable, Mapping

from kafka_eos_ds.twophase.aborting import Aborting
from kafka_eos_ds.twophase.committing import Committing
from kafka_eos_ds.twophase.identity import WriteId
from kafka_eos_ds.twophase.ports import Ports, Retry
from kafka_eos_ds.twophase.protocol import (
    DECIDED,
    Decision,
    DecisionLog,
    DoneMark,
    Fences,
    H,
    Participant,
    Participants,
    ProgressStore,
)
from kafka_eos_ds.twophase.recovering import Recovering
from kafka_eos_ds.twophase.runtime import Pool
from kafka_eos_ds.twophase.steps import Steps


class TwoPhaseCommitter(Generic[H]):
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
        ``{prefix}:s{run}-{partition}-{attempt}``, every run's recovered together): then
        another stream's decision is either the query this one replaces or a conflict
        (:func:`~.recovery.stream_target`). A sink whose streams stage apart (the file
        sink) gives False.
    fences : Fences, optional
        Exact fencing (validate, then act): when given, every fence observes the exact
        instances, claims the step's decision writer, then aborts those instances only.
        Without it, ``participants.fence`` aborts whatever is open under each id.
    publish : callable, optional
        What the sink does once every participant of a decision is committed and before
        the decision is recorded done (the file sink: register the batch's partitions in
        a metastore). It must be idempotent: a restart that finishes the decision runs it
        again, so a crash between the last commit and ``done`` never skips it.
    sleep, clock, executor : callable, optional
        The process's: a sink hands in its runtime's (:class:`~.runtime.Runtime`).
    """

    def __init__(self, decisions: DecisionLog[H], participants: Participants[H], *,
                 progress_store: ProgressStore[H] | None = None, commit_timeout_s: float = 120.0,
                 parallelism: int = 8, abort_grace_s: float = 3.0, time_needed_s: float = 15.0,
                 streams_share_ids: bool = True, publish: Callable[[Decision[H]], None] | None = None,
                 fences: Fences | None = None, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic,
                 executor: Callable[[int], Pool] = ThreadPoolExecutor) -> None:
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
        self._executor = executor

    # The roles are built for each call from the attributes above, which callers read
    # (and tests replace): a role holds no state of its own.

    def _steps(self) -> Steps[H]:
        retry = Retry(self.commit_timeout_s, self._sleep, self._clock)
        ports = Ports(self.decisions, self.participants, self.progress_store, self.fences, self.publish, retry)
        return Steps(ports, self.parallelism, self._executor)

    def _recovering(self, steps: Steps[H]) -> Recovering[H]:
        return Recovering(steps, self.streams_share_ids)

    # -- before the tasks (the planner) ------------------------------------------

    def recover(self, write: WriteId, known_query: bool = True) -> DoneMark:
        """Finish the writer's unfinished decision, fence its other open ids; return the
        done mark its tasks get. Only for writers whose tasks re-open the ids of earlier
        runs (:attr:`~.identity.WriteId.recovers_before_tasks`). For a stream,
        ``known_query`` False (its id could not be read from the checkpoint) acts on the
        sink's latest stream decision, whoever's."""
        return self._recovering(self._steps()).recover(write, known_query)

    def commit_decided(self, decision: Decision[H]) -> None:
        """Commit ``decision``'s participants (with its progress) and nothing else: no
        decision is written, nothing is fenced. For an operator finishing what a stopped
        driver decided (the writer's own next step records it done)."""
        assert decision.state == DECIDED, decision
        steps = self._steps()
        steps.carry_legacy(decision)
        steps.commit_all(decision)

    # -- after the tasks ----------------------------------------------------------

    def commit(self, write: WriteId, messages: Iterable[Participant[H] | None],
               progress: Mapping[str, Any] | None = None) -> None:
        """Commit a write; ``progress`` (what a stream's batch consumed) commits with its
        first participant."""
        steps = self._steps()
        Committing(steps, self._recovering(steps), self.time_needed_s, self.streams_share_ids).commit(
            write, messages, progress)

    def abort(self, write: WriteId | None, messages: Iterable[Participant[H] | None],
              fallback: WriteId | None = None) -> None:
        """Fence what an undecided write left open; a decided one is left to recovery.
        ``write`` None: no task reported; ``fallback`` names the ids its tasks would use."""
        Aborting(self._steps(), self.abort_grace_s, self._sleep, self._clock).abort(write, messages, fallback)
