"""The steps the committer's roles share (:mod:`.committing`, :mod:`.recovering`,
:mod:`.aborting`): fence, commit a decision's participants, finish a decision, abandon one.

Each calls the sink's ports through :class:`~.ports.Ports`, which apply the retry policy.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Generic, Sequence

from kafka_eos_ds.errors import TransactionError, TransactionLostError, TransactionOutcomeUnknownError
from kafka_eos_ds.twophase import faults
from kafka_eos_ds.twophase.ports import Ports
from kafka_eos_ds.twophase.protocol import ABANDONED, DONE, Decision, H, Instance, Outcome
from kafka_eos_ds.twophase.runtime import Pool

log = logging.getLogger(__name__)


class Steps(Generic[H]):
    """The shared steps over ``ports``; ``parallelism``: participants committed or
    aborted concurrently, in a pool of ``executor`` (:class:`~.runtime.Runtime`)."""

    def __init__(self, ports: Ports[H], parallelism: int,
                 executor: Callable[[int], Pool] = ThreadPoolExecutor) -> None:
        self.ports = ports
        self.parallelism = parallelism
        self.executor = executor

    def fence(self, ids: Sequence[str]) -> None:
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
        fences = self.ports.fences
        if fences is None:
            with self.executor(min(self.parallelism, len(ids))) as pool:
                list(pool.map(self.ports.participants.fence, ids))
            return
        targets = fences.observe(ids)
        if targets:
            self.claim_and_abort(targets)

    def claim_and_abort(self, targets: Sequence[Instance]) -> None:
        """Claim the step's decision writer, then abort the observed ``targets`` exactly
        (nothing if the claim fails: a newer step took the writer over)."""
        fences = self.ports.fences
        assert fences is not None
        fences.claim(targets)
        faults.check("driver-after-claim")
        with self.executor(min(self.parallelism, len(targets))) as pool:
            list(pool.map(self._abort_exact, targets))

    def _abort_exact(self, instance: Instance) -> None:
        fences = self.ports.fences
        assert fences is not None
        if not fences.abort_exact(instance):
            log.info("%s (%s) moved on before it could be aborted: not this step's to abort", instance.id,
                     instance.tag)

    def finish(self, key: str, decision: Decision[H]) -> None:
        """Commit what ``decision`` decided, publish it, record it done."""
        self.carry_legacy(decision)
        self.commit_all(decision, key)
        self.ports.publish(decision)
        self.ports.decisions.record_done(key, decision.with_state(DONE))

    def commit_all(self, decision: Decision[H], key: str | None = None) -> None:
        """Commit every participant, the first (which carries the progress) alone and first.
        ``key``: the decision's writer key, to record it abandoned (None: an operator
        finishing a decision, who is told instead)."""
        parts = list(decision.participants)
        if not parts:
            return
        first, rest = parts[0], parts[1:]
        commit = self.ports.participants.commit
        # The first one alone, so a crash test can stop between "some" and "all".
        outcomes = [(first, commit(first))]
        if outcomes[0][1] in (Outcome.LOST, Outcome.UNKNOWN) and self._never_started(decision):
            self._abandon_unstarted(key, decision)
        faults.check("driver-after-first-commit", batch=decision.batch_id)
        faults.check("commit-raise", batch=decision.batch_id)
        if rest:
            with self.executor(min(self.parallelism, len(rest))) as pool:
                outcomes += list(zip(rest, pool.map(commit, rest), strict=True))
        lost = [p for p, outcome in outcomes if outcome is Outcome.LOST]
        if lost:
            raise TransactionLostError(
                f"Batch {decision.batch_id} of {decision.query_id} was decided but "
                f"{len(lost)} of its {len(parts)} transaction(s) were aborted instead of committed "
                f"({', '.join(p.id for p in lost)}); their records are not in the output. "
                + self.ports.participants.lost_message(lost)
            )
        unknown = [p for p, outcome in outcomes if outcome is Outcome.UNKNOWN]
        if unknown:
            raise TransactionOutcomeUnknownError(
                f"Cannot tell whether batch {decision.batch_id} of query {decision.query_id} committed: the outcome "
                f"of {len(unknown)} of its {len(parts)} decided transaction(s) can no longer be told. "
                + self.ports.participants.unknown_outcome_message(unknown), retriable=False)

    def first_started(self, decision: Decision[H]) -> bool | None:
        """The progress store's answer to whether the first participant, which carried the
        decision's progress, committed (None: it cannot tell)."""
        first, progress, store = decision.participants[0], decision.progress, self.ports.progress
        assert progress is not None
        return store.started(progress, first)

    def _never_started(self, decision: Decision[H]) -> bool:
        """Whether the progress store knows that the first participant did not commit (a
        decision with progress only; None from the store, "cannot tell", is not "no")."""
        return decision.progress is not None and self.first_started(decision) is False

    def abandon(self, key: str, decision: Decision[H], also: Sequence[str] = ()) -> None:
        """Record ``decision`` abandoned, then fence its participants (and ``also``).
        Recorded first: fenced first, a crash in between would leave a decided batch
        whose first participant's start can no longer be told (its epoch moved on)."""
        self.ports.decisions.record_abandoned(key, decision.with_state(ABANDONED))
        self.fence(sorted({p.id for p in decision.participants} | set(also)))

    def _abandon_unstarted(self, key: str | None, decision: Decision[H]) -> None:
        """The first participant was aborted after the decision and never committed: keep
        the batch all or nothing. Committing the others would leave it partly visible for
        good, and a query that replaces this one after a lost checkpoint abandons a batch
        whose first participant did not commit (``recover``) and re-reads its input, the
        others' records included. So none is committed: the decision is abandoned
        (:meth:`abandon`), and the restarted query runs the batch again under a new
        decision."""
        first, progress = decision.participants[0], decision.progress
        assert progress is not None
        why = self.ports.progress.abandoned_message(progress, first)
        what = (f"Batch {decision.batch_id} of query {decision.query_id} was not committed: its first transaction "
                f"{first.id}, which carries the batch's progress, was aborted after the batch was decided, and "
                f"none of the batch's other transactions was committed. {why}")
        if key is None:
            raise TransactionError(f"{what} Not committing them either.", retriable=False)
        log.warning("abandoning batch %s of query %s: its first transaction %s was aborted after the decision",
                    decision.batch_id, decision.query_id, first.id)
        self.abandon(key, decision)
        raise TransactionError(f"{what} Nothing of the batch is visible: it is recorded abandoned, and restarting "
                               "the query runs it again (docs/troubleshooting.md, \"Batch N was not committed: its "
                               "first transaction was aborted after the decision\").", retriable=True)

    def carry_legacy(self, decision: Decision[H]) -> None:
        """Attach the progress of a decision written before progress was attached ahead of
        the decision (an older version's record: no ``progress_attached``); a no-op once
        the first participant has committed. A marked decision's progress is in its first
        participant already: attaching it again would only open a window for a driver that
        stalls inside the attachment and comes back after a newer driver committed the
        batch, to open a new transaction under the still-current epoch and move the
        group's offsets back (the schedule zombie-recovery-carry)."""
        if decision.progress is not None and not decision.progress_attached:
            self.carry(decision)

    def carry(self, decision: Decision[H]) -> None:
        first, progress = decision.participants[0], decision.progress
        assert progress is not None
        self.ports.progress.carry(progress, first)
        faults.check("driver-after-progress", batch=decision.batch_id)
