"""The recovery and commit policy: pure decisions, no I/O.

Every function takes what the driver knows (the latest decision, the ids still open,
the batch at hand) and returns what to do. The I/O lives in :mod:`.committer`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional, Sequence

from kafka_eos_ds.errors import TransactionError
from kafka_eos_ds.twophase.protocol import ABANDONED, DECIDED, DONE, Decision, DoneMark, Participant


@dataclass(frozen=True)
class RecoveryContext:
    """What recovery knows: the sink's latest decision, the ids it still has open, and
    the id of the query recovering (None if unknown)."""

    latest: Optional[Decision]
    open_ids: Sequence[str] = ()
    query_id: Optional[str] = None


@dataclass(frozen=True)
class RecoveryPlan:
    """``finish``: decided participants to commit; ``fence``: leftover ids to abort;
    ``mark``: what the tasks of the next batch may skip.

    ``only_if_started``: finish the decision only if its first participant is already
    committed, and otherwise abandon it (abort all of it). Set for a decided batch that
    carries its progress and belongs to another query: that query's checkpoint is gone,
    and the new query started where the progress says — after the batch if the first
    participant (which carries the progress) committed, before it if not.
    """

    finish: Optional[Decision]
    fence: tuple[str, ...]
    mark: DoneMark
    only_if_started: bool = False


def plan_recovery(ctx: RecoveryContext) -> RecoveryPlan:
    """Finish an unfinished decision; abort every other open id of the sink.

    An id that is part of the unfinished decision is never fenced: fencing it would
    abort a transaction the driver promised to commit.
    """
    latest = ctx.latest
    finish = latest if latest is not None and latest.state == DECIDED else None
    keep = {p.id for p in finish.participants} if finish else set()
    fence = tuple(sorted({i for i in ctx.open_ids if i not in keep}))
    mark = DoneMark(latest.query_id, latest.batch_id) if latest is not None and latest.state != ABANDONED \
        else DoneMark()
    # A decision of another query (its checkpoint was lost) that carries the progress.
    foreign = (finish is not None and ctx.query_id is not None and finish.query_id != ctx.query_id
               and finish.progress is not None)
    return RecoveryPlan(finish, fence, mark, only_if_started=foreign)


@dataclass(frozen=True)
class CommitPlan:
    """What ``commit(messages, batch)`` does: ``noop``, or commit ``decision``'s participants
    (after first finishing ``earlier``, an unfinished decision of another batch)."""

    noop: bool
    decision: Optional[Decision] = None
    earlier: Optional[Decision] = None
    write_decision: bool = True


def to_commit(participants: Iterable[Optional[Participant]]) -> tuple[Participant, ...]:
    """The participants with work to commit (empty tasks and failed slots dropped), in order."""
    return tuple(sorted((p for p in participants if p is not None and p.records > 0),
                        key=lambda p: (p.partition, p.attempt)))


def plan_commit(latest: Optional[Decision], query_id: str, batch_id: int,
                participants: Iterable[Optional[Participant]],
                progress: Optional[Mapping[str, Any]] = None) -> CommitPlan:
    """Idempotent per batch: a batch already done is a no-op; a batch already decided is
    finished with the participants *recorded* in its decision, never with new ones.

    A batch older than the query's latest decision is refused (TransactionError, not
    retriable): only a driver that fell behind (a zombie resuming an old commit) gets
    here, and its decision would overwrite the newer one, so recovery would no longer
    see the newer batch and fence it after its output became visible.
    """
    if latest is not None and latest.query_id == query_id and int(batch_id) < latest.batch_id:
        raise TransactionError(
            f"Refusing to commit batch {batch_id} of query {query_id}: batch {latest.batch_id} of the same query "
            f"is already {latest.state.value}. Another driver of this query has moved past this batch (a driver "
            "that was presumed dead and resumed?); this one must stop. Its transactions are left open and are "
            "aborted by the running query's next recovery or abort.")
    if latest is not None and latest.same_batch(query_id, batch_id) and latest.state != ABANDONED:
        if latest.state == DONE:
            return CommitPlan(noop=True)
        return CommitPlan(noop=False, decision=latest, write_decision=False)
    earlier = latest if latest is not None and latest.state == DECIDED else None
    decision = Decision(query_id, int(batch_id), DECIDED, to_commit(participants), progress)
    return CommitPlan(noop=False, decision=decision, earlier=earlier)


def plan_abort(latest: Optional[Decision], query_id: Optional[str], batch_id: int,
               participants: Iterable[Optional[Participant]], superseded: Iterable[str] = (),
               open_ids: Iterable[str] = ()) -> tuple[str, ...]:
    """Ids to fence when Spark aborts a batch.

    A decided batch is left alone (recovery finishes it). Everything else the sink has
    open is fenced: the messages' participants, the attempts they superseded, and any
    other open id (a task killed mid-write when its stage was cancelled reports no
    message) — except the participants of an unfinished decision.
    """
    keep = {p.id for p in latest.participants} if latest is not None and latest.state == DECIDED else set()
    if latest is not None and query_id is not None and latest.same_batch(query_id, batch_id):
        # Decided (or done): its participants are committed or about to be; only
        # strays outside the decision may go.
        return tuple(sorted(set(open_ids) - keep))
    ids = {p.id for p in participants if p is not None and p.records > 0}
    ids.update(superseded)
    ids.update(open_ids)
    return tuple(sorted(ids - keep))
