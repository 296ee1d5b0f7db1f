"""The recovery and commit policy: pure decisions, no I/O.

Every function takes what the driver knows (the writer's latest decision, the ids still
open, the write at hand) and returns what to do. The I/O lives in :mod:`.committer`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Generic, Iterable, Mapping, Sequence

from kafka_eos_ds.errors import TransactionError
from kafka_eos_ds.twophase.identity import Kind, WriteId
from kafka_eos_ds.twophase.protocol import ABANDONED, DECIDED, DONE, Decision, DoneMark, H, Participant


@dataclass(frozen=True)
class RecoveryContext(Generic[H]):
    """What recovery knows: the decision to act on (the writer's latest, or for a stream
    that takes over a sink the latest of the query that wrote before it), the ids still
    open in the writer's families, and the id of the query recovering (None if unknown)."""

    latest: Decision[H] | None
    open_ids: Sequence[str] = ()
    query_id: str | None = None


@dataclass(frozen=True)
class RecoveryPlan(Generic[H]):
    """``finish``: decided participants to commit; ``fence``: leftover ids to abort;
    ``mark``: what the tasks of the next batch may skip.

    ``only_if_started``: finish the decision only if its first participant is already
    committed, and otherwise abandon it (abort all of it). Set for a decided batch that
    carries its progress and belongs to another query: that query's checkpoint is gone,
    and the new query started where the progress says — after the batch if the first
    participant (which carries the progress) committed, before it if not.
    """

    finish: Decision[H] | None
    fence: tuple[str, ...]
    mark: DoneMark
    only_if_started: bool = False


def plan_recovery(ctx: RecoveryContext[H]) -> RecoveryPlan[H]:
    """Finish an unfinished decision; abort every other open id of the writer.

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


def output_before(decision: Decision[H]) -> bool:
    """Whether the output holds batches of ``decision``'s query that its progress store
    must remember for a query replacing it (:meth:`.ProgressStore.resumes_before`): up to a
    done batch, or up to the batch before an abandoned one, unless that one was the
    query's first (nothing of the query is in the output then)."""
    if decision.progress is None:
        return False
    return decision.state == DONE or (decision.state == ABANDONED and decision.batch_id > 0)


def stream_target(own: Decision[H] | None, sink_latest: Decision[H] | None, query_id: str) -> Decision[H] | None:
    """The decision a stream's recovery acts on: its own latest, or — for a query that has
    never decided on this sink — the latest of the query that wrote before it (a query
    whose checkpoint was lost and that this one replaces).

    Two streams on one ``transactionalIdPrefix`` share its transactional ids and would
    abort each other's work; a stream that decided before and finds another query's
    decision after its own therefore stops (TransactionError, not retriable) before any
    task writes, naming both."""
    if sink_latest is None or sink_latest.query_id == query_id:
        return own
    if own is not None:
        raise TransactionError(
            f"Query {query_id} and query {sink_latest.query_id} both write with this sink's transactional ids "
            f"(the latter decided batch {sink_latest.batch_id} after this query's batch {own.batch_id}): two "
            "queries must not share a 'transactionalIdPrefix'. Stop one of them, or give it its own prefix.",
            retriable=False)
    return sink_latest


def check_checkpoint(decision: Decision[H] | None, committed: int, planned_batch: Callable[[], int],
                     planned_offsets: Callable[[int], Mapping[str, Any]]) -> None:
    """Refuse (TransactionError, not retriable) to go on when Spark plans a batch the sink
    wrote other than the sink wrote it, before the tasks (whose done mark would make them
    drop its input): the checkpoint's offset log no longer holds the query's latest decided
    batch (an older checkpoint restored, offset-log entries deleted), or holds it with other
    end offsets than the decision recorded (``offsets/N`` rewritten). ``committed``: the
    latest batch in Spark's commit log; ``planned_batch``/``planned_offsets``: the offset
    log's latest batch and a batch's end offsets, read only when the latest decision is
    past ``committed`` (after a restart; never in the steady state)."""
    if decision is None or decision.state not in (DECIDED, DONE) or decision.batch_id <= committed:
        return
    planned = planned_batch()
    if planned < decision.batch_id:
        raise TransactionError(
            f"Batch {decision.batch_id} of query {decision.query_id} is {decision.state.value} in the sink, but the "
            f"checkpoint's offset log ends at batch {planned}: an older copy of the checkpoint was restored, or "
            f"entries of its offset log were deleted. Spark would plan the batches up to {decision.batch_id} "
            f"again, with other offsets, and the sink would take them for written. {_REPLANNED}", retriable=False)
    if (decision.progress or {}).get("offsets") is not None:
        _check_offsets(decision, planned_offsets(decision.batch_id))


_REPLANNED = ("Nothing is written. Put the checkpoint back as it was when the batch was written, or start a new query "
              "(a new checkpointLocation) from the end offsets the sink recorded (docs/troubleshooting.md, \"Batch N "
              "was written with other offsets than the checkpoint plans\").")


def _check_offsets(decision: Decision[H], planned: Mapping[str, Any] | None) -> None:
    """Refuse the batch of ``decision`` planned with end offsets ``planned`` when the
    decision recorded others (nothing to compare: nothing refused)."""
    recorded = (decision.progress or {}).get("offsets")
    if recorded is None or planned is None or _offsets(recorded) == _offsets(planned):
        return
    raise TransactionError(
        f"Batch {decision.batch_id} of query {decision.query_id} was written with the source's end offsets "
        f"{_offsets(recorded)}, but the checkpoint's offsets/{decision.batch_id} now ends at {_offsets(planned)}: "
        f"the offset log was rewritten, or an older checkpoint restored, after the batch was written. {_REPLANNED}",
        retriable=False)


def _offsets(offsets: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """``{"topic": {"partition": offset}}`` with the keys as JSON gives them back."""
    return {str(t): {str(p): int(o) for p, o in parts.items()} for t, parts in offsets.items()}


@dataclass(frozen=True)
class CommitPlan(Generic[H]):
    """What committing a write does: ``noop``; or commit ``decision``'s participants (after
    first finishing ``earlier``, an unfinished decision of this writer); ``skip``: the
    write was already committed by an earlier run, so its participants are aborted and
    ``decision`` (with no participants) only records that this run got past it."""

    noop: bool
    decision: Decision[H] | None = None
    earlier: Decision[H] | None = None
    write_decision: bool = True
    skip: bool = False


def to_commit(participants: Iterable[Participant[H] | None]) -> tuple[Participant[H], ...]:
    """The participants with work to commit (empty tasks and failed slots dropped), in order."""
    return tuple(sorted((p for p in participants if p is not None and p.records > 0),
                        key=lambda p: (p.partition, p.attempt)))


def plan_commit(latest: Decision[H] | None, query_id: str, batch_id: int,
                participants: Iterable[Participant[H] | None],
                progress: Mapping[str, Any] | None = None) -> CommitPlan[H]:
    """A stream's micro-batch. Idempotent per batch: a batch already done is a no-op; a
    batch already decided is finished with the participants *recorded* in its decision,
    never with new ones.

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
        if progress is not None:
            _check_offsets(latest, progress.get("offsets"))
        if latest.state == DONE:
            return CommitPlan(noop=True)
        return CommitPlan(noop=False, decision=latest, write_decision=False)
    earlier = latest if latest is not None and latest.state == DECIDED else None
    decision = Decision(query_id, int(batch_id), DECIDED, to_commit(participants), progress)
    return CommitPlan(noop=False, decision=decision, earlier=earlier)


def plan_write(own: Decision[H] | None, write: WriteId, participants: Iterable[Participant[H] | None],
               progress: Mapping[str, Any] | None = None) -> CommitPlan[H]:
    """Any write: dispatch on its kind (:mod:`.identity`)."""
    if write.kind is Kind.STREAM:
        return plan_commit(own, write.app, write.version, participants, progress)
    parts = to_commit(participants)
    earlier = own if own is not None and own.state == DECIDED else None
    if write.kind is Kind.APP:
        return _plan_app(own, earlier, write, parts)
    if write.kind is Kind.FOREACH:
        return _plan_foreach(own, earlier, write, parts)
    # A job: its own writer, decided once.
    return CommitPlan(noop=False, decision=Decision(write.app, write.version, DECIDED, parts), earlier=earlier)


def check_app_version(own: Decision[H] | None, write: WriteId) -> None:
    """Refuse an app write (``txnAppId``) whose ``txnVersion`` is below the app's latest
    (TransactionError, not retriable), before any task writes.

    Only the latest version of an app is kept, and a re-run of a write is a run of that
    version (Spark running the last micro-batch again); a lower version is the app's
    numbering starting again, most often ``txnVersion=batch_id`` after the stream's
    checkpoint was reset. Taken for written, each of those writes would add nothing
    until the numbers caught up: their rows lost without a word."""
    if own is None or write.version >= own.batch_id:
        return
    raise TransactionError(
        f"Refusing the write of txnAppId {write.app!r} at txnVersion {write.version}: version {own.batch_id} of "
        f"this txnAppId is already {own.state.value}, and only the latest version can be run again (adding "
        "nothing). A lower version is not a re-run: after the stream's checkpoint was reset (batch ids start at "
        "0 again) give the write a new 'txnAppId'; a version written before needs no run. Nothing of this write "
        "is committed. See docs/troubleshooting.md, \"Refusing the write of txnAppId A at txnVersion N\".",
        retriable=False)


def _plan_app(own: Decision[H] | None, earlier: Decision[H] | None, write: WriteId,
              parts: tuple[Participant[H], ...]) -> CommitPlan[H]:
    """``txnAppId``/``txnVersion``, as Delta Lake reads them: the app's latest version run
    again is already written, and the write adds nothing (its tasks' work, if they wrote
    any, is aborted); a version below it is refused (:func:`check_app_version`). A
    decided, unfinished write of the same version is finished with its recorded
    participants."""
    check_app_version(own, write)
    if own is not None and write.version == own.batch_id:
        if own.state == DECIDED:
            return CommitPlan(noop=False, decision=own, write_decision=False)
        return CommitPlan(noop=False, decision=Decision(write.app, write.version, DONE), earlier=earlier,
                          write_decision=False, skip=True)
    return CommitPlan(noop=False, decision=Decision(write.app, write.version, DECIDED, parts), earlier=earlier)


def _plan_foreach(own: Decision[H] | None, earlier: Decision[H] | None, write: WriteId,
                  parts: tuple[Participant[H], ...]) -> CommitPlan[H]:
    """A ``df.write`` inside ``foreachBatch``: the k-th write of micro-batch N in this run.

    The function of a micro-batch runs its writes one after the other, in the same order
    when Spark runs the micro-batch again after a restart. So: the first write of N in a
    run is ordinal 0, each next one in the same run the ordinal after the one that run
    reached last; ``writes`` counts the writes of N committed over all runs, and a write
    whose ordinal is below it was committed by an earlier run: it adds nothing (its
    transactions are aborted). Each run's ordinal is kept per run in every record of N
    (``runs``), not read off the latest record alone: a zombie driver and its replacement
    can take turns in one micro-batch, and the zombie's record must not reset the other
    run's count. An earlier micro-batch than the latest decided one is refused, as for a
    stream (only a driver that fell behind gets there)."""
    n, run = write.version, write.run or ""
    if own is not None and n < own.batch_id:
        raise TransactionError(
            f"Refusing a write of micro-batch {n} of query {write.app} inside foreachBatch: micro-batch "
            f"{own.batch_id} already wrote. Another driver of this query has moved past it; this one must stop.")
    if own is None or n > own.batch_id:
        reached, committed = {}, 0
    else:
        reached, committed = own.ordinals(), own.writes
    ordinal = reached[run] + 1 if run in reached else 0
    runs = {**reached, run: ordinal}
    if ordinal < committed:
        done: Decision[H] = Decision(write.app, n, DONE, (), write=ordinal, run=run, writes=committed, runs=runs)
        return CommitPlan(noop=False, decision=done, earlier=earlier, skip=True)
    decided = Decision(write.app, n, DECIDED, parts, write=ordinal, run=run, writes=ordinal + 1, runs=runs)
    return CommitPlan(noop=False, decision=decided, earlier=earlier)


def plan_abort(latest: Decision[H] | None, query_id: str | None, batch_id: int,
               participants: Iterable[Participant[H] | None], superseded: Iterable[str] = (),
               open_ids: Iterable[str] = ()) -> tuple[str, ...]:
    """Ids to fence when Spark aborts a write.

    A decided write is left alone (recovery finishes it). Everything else the writer has
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
