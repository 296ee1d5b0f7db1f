"""The two-phase-commit protocol's vocabulary: participants, decisions, and the ports a
concrete sink implements.

Nothing here knows Kafka. A sink plugs in with:

* a :class:`DecisionLog` — where the driver makes a commit decision durable *before*
  the first participant is committed, and where a restarted query reads it back;
* a :class:`Participants` port — commits one pre-committed participant on the driver,
  fences (aborts) a participant by id, and lists the ids of this sink still open;
* optionally a :class:`ProgressStore` — for sinks whose decisions carry what the batch
  consumed (the Kafka sink's ``sourceGroupId``);
* optionally :class:`Fences` — for sinks that can abort one exact instance of an id and
  claim their decision writer: every fence then validates before it acts (below);
* on the executors, a :class:`TaskTransaction` per task — write, ``pre_commit`` (make
  everything durable but invisible), or ``abort`` — run by :func:`~.task.run_task`, and
  a :class:`CommitMessage` that carries the task's :class:`Participant` to the driver.

Life cycle of a batch::

    tasks:  write ... -> pre_commit -> CommitMessage(Participant)
    driver: Participants.unfit(all)? -> DecisionLog.write(decided) -> Participants.commit(each)
            -> fence the sink's other open ids -> DecisionLog.write(done)
    fail:   abort -> Participants.fence(each not decided)
    restart: recover -> commit what was decided, fence every other open id

Fencing with :class:`Fences` (validate, then act exactly): the step's decision writer was
fenced and the log read when the step began; the step observes the exact instances open
under the ids it means to fence, claims its writer (a record committed by it, which fails
once a newer step has taken the writer over) and then aborts those instances only. A
decision a newer step writes after the claim names only instances begun after it, which
were not observed; one written before the claim fenced this writer, and the claim fails.
Without :class:`Fences`, ``Participants.fence`` aborts whatever is open under an id.
Another batch job's transactions (a job whose driver died) are fenced the same way, with
that job's decision writer shut out before the decisions are read (``Fences.shut_out``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Generic, Iterable, Mapping, Protocol, Sequence, TypeVar

if TYPE_CHECKING:
    from kafka_eos_ds.twophase.identity import WriteId


class DecisionState(str, enum.Enum):
    """Where a batch's decision stands."""

    DECIDED = "decided"  # commit all of its participants; not all are known committed yet
    DONE = "done"        # every participant committed
    # A decided batch of a query whose checkpoint was lost, none of which had become
    # visible: recovery aborted it, and the new query re-reads its input.
    ABANDONED = "abandoned"
    # A batch job's decision found partly aborted (a TransactionLostError said so): nothing
    # more can be done for it, and later writers need not stop on it again.
    LOST = "lost"
    # A batch job's decision some of whose transactions' outcome could no longer be told
    # (a TransactionOutcomeUnknownError said so, once): later writers need not stop on it.
    UNTOLD = "untold"


DECIDED = DecisionState.DECIDED
DONE = DecisionState.DONE
ABANDONED = DecisionState.ABANDONED


class Handle(Protocol):
    """What a sink needs to commit a participant from another process: a frozen value of
    the sink's own type (the Kafka sink's ``sink.messages.KafkaHandle``, the file sink's
    ``table_sink.handles.StagedFiles``), encoded as JSON only where a decision is written."""

    def to_json(self) -> dict[str, Any]:
        """The handle as stored in a decision (the sink's decoder reads it back)."""


# A sink's handle type: every port of one committer speaks the same one.
H = TypeVar("H", bound=Handle)
# Reads a participant's stored ``handle`` back (the sink's decoder, handed to ``from_json``).
Decode = Callable[[Mapping[str, Any]], H]


@dataclass(frozen=True)
class Participant(Generic[H]):
    """One pre-committed unit of work, as a task reports it to the driver.

    Attributes
    ----------
    id : str
        The participant's name in its sink (a transactional id, a pending file).
    partition, attempt : int
        The Spark task that produced it.
    records : int
        How many records it holds (0: nothing to commit, no transaction opened).
    handle : Handle
        What the sink needs to commit it from another process (:class:`Handle`): decoded
        once, where a task's message becomes a participant or a decision is read, and
        encoded once, where a decision is written.
    """

    id: str
    partition: int
    attempt: int
    records: int
    handle: H

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "partition": self.partition, "attempt": self.attempt, "records": self.records,
                "handle": self.handle.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], decode: Decode[H]) -> "Participant[H]":
        return cls(str(data["id"]), int(data["partition"]), int(data["attempt"]), int(data["records"]),
                   decode(data.get("handle") or {}))


@dataclass(frozen=True)
class Decision(Generic[H]):
    """The durable record of one write's outcome: ``decided`` (commit them all), ``done``,
    or ``abandoned``; one latest record per writer (see :mod:`.identity`).

    ``query_id``/``batch_id`` are the writer's app id and the write's version (a stream's
    query id and micro-batch id). ``progress`` (optional, JSON) is what the batch consumed,
    committed atomically with its first participant (the Kafka sink: the source group's
    end offsets). For writes inside ``foreachBatch``: ``write`` is the write's ordinal
    within its micro-batch, ``run`` the stream run that made it, ``writes`` how many
    writes of that micro-batch are committed over all runs (a re-run skips that many), and
    ``runs`` the last ordinal each run of the query reached in the micro-batch (two runs
    can take turns in one micro-batch: a zombie driver and its replacement).
    ``progress_attached``: the progress was attached to the first participant before the
    decision was written (every decision with progress written since); a record without
    it (written by an older version) may need it attached when it is finished.
    """

    query_id: str
    batch_id: int
    state: DecisionState
    participants: tuple[Participant[H], ...] = ()
    progress: Mapping[str, Any] | None = None
    write: int = 0
    run: str | None = None
    writes: int = 1
    runs: Mapping[str, int] = field(default_factory=dict)
    progress_attached: bool = False

    def same_batch(self, query_id: str, batch_id: int) -> bool:
        return self.query_id == query_id and self.batch_id == int(batch_id)

    def with_state(self, state: DecisionState) -> "Decision[H]":
        return replace(self, state=state)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"queryId": self.query_id, "batchId": self.batch_id, "state": self.state.value,
                               "transactions": [p.to_json() for p in self.participants]}
        if self.progress is not None:
            out["progress"] = dict(self.progress)
            if self.progress_attached:
                out["progressAttached"] = True
        if self.run is not None:
            out.update({"write": self.write, "run": self.run, "writes": self.writes, "runs": dict(self.runs)})
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any], decode: Decode[H]) -> "Decision[H]":
        """The decision stored as ``data``; ``decode`` reads each participant's handle."""
        return cls(str(data["queryId"]), int(data["batchId"]), DecisionState(str(data["state"])),
                   tuple(Participant.from_json(p, decode) for p in data.get("transactions") or ()),
                   data.get("progress"), int(data.get("write", 0)), data.get("run"), int(data.get("writes", 1)),
                   {str(k): int(v) for k, v in (data.get("runs") or {}).items()},
                   bool(data.get("progressAttached", False)))

    def ordinals(self) -> dict[str, int]:
        """The last ordinal each run reached in this micro-batch (foreachBatch writes; a
        record written before ``runs`` existed names only its own run)."""
        reached = dict(self.runs)
        if self.run is not None:
            reached[self.run] = self.write
        return reached


@dataclass(frozen=True)
class Instance:
    """One exact open instance of a participant id: ``id`` names the participant, ``tag``
    tells this instance apart from any later one under the same id (the Kafka sink: the
    producer id and epoch the transaction runs under)."""

    id: str
    tag: str


@dataclass(frozen=True)
class DoneMark:
    """"Batches up to ``batch_id`` of query ``query_id`` are decided": a re-run writes nothing.

    Handed to the tasks (it is part of the pickled writer). A task of that query whose
    batch id is <= ``batch_id`` drains its input and reports no participant.
    """

    query_id: str | None = None
    batch_id: int = -1

    def covers(self, query_id: str | None, batch_id: int | None) -> bool:
        return (self.query_id is not None and query_id == self.query_id
                and batch_id is not None and int(batch_id) <= self.batch_id)


class Outcome(enum.Enum):
    """What committing one participant turned out to be."""

    COMMITTED = "committed"  # committed now, or had been committed before
    LOST = "lost"            # known to be aborted (e.g. timed out): never becomes visible
    RETRY = "retry"          # not known yet (coordinator moving, broker down): try again
    UNKNOWN = "unknown"      # can no longer be told (the evidence is gone): fail loudly, never guess


class DecisionLog(Protocol[H]):
    """Where a sink's decisions are kept, one latest decision per writer key (Kafka: a
    compacted topic; files: a JSON file per writer). Keys are ``"<kind>:<app>"``
    (:attr:`.identity.WriteId.key`)."""

    def latest(self, key: str) -> Decision[H] | None:
        """The most recent decision of writer ``key``, or None if it never decided."""

    def latest_of(self, kind: str) -> Decision[H] | None:
        """The most recent decision of any writer of ``kind`` on this sink (for a stream:
        which query wrote last with this sink's ids), or None."""

    def unfinished(self, kind: str) -> list[tuple[str, Decision[H]]]:
        """``(key, decision)`` of every writer of ``kind`` whose latest decision is still
        ``decided`` (a job that stopped between its decision and its end)."""

    def write(self, key: str, decision: Decision[H]) -> None:
        """Store ``decision`` as writer ``key``'s latest, durably; returns only once a
        restarted query would read it. A ``done`` decision without participants that
        carries ``progress`` (a batch with no output) stores that progress in the same
        atomic write where the sink keeps progress apart (the Kafka sink: the group's
        offsets in the decision writer's transaction): a writer fenced since stores
        neither."""

    def forget(self, key: str) -> None:
        """Drop writer ``key``'s record (a finished job: nothing will ever ask for it)."""


class Participants(Protocol[H]):
    """The driver's hold on a sink's participants (Kafka: transactions; files: pending files)."""

    def commit(self, participant: Participant[H]) -> Outcome:
        """Commit one pre-committed participant (idempotent: committed twice is COMMITTED)."""

    def unfit(self, participants: Sequence[Participant[H]], time_needed_s: float) -> str | None:
        """Why some of ``participants`` cannot be committed any more, or None when all can.

        Asked before a batch is decided: each must still be open as its task left it
        (not aborted, not taken over by another writer) with at least ``time_needed_s``
        before it may be aborted by a timeout. The answer names the participants and
        the settings to change; None commits the batch."""

    def fence(self, participant_id: str) -> None:
        """Abort whatever is open under ``participant_id`` and shut out its writer."""

    def superseded(self, participant: Participant[H]) -> Sequence[str]:
        """Ids of earlier attempts that ``participant``'s task replaced (fenced at commit)."""

    def open_ids(self, write: "WriteId") -> Sequence[str]:
        """Ids of ``write``'s writer that hold open (uncommitted, unaborted) work right now
        (for a write inside foreachBatch: of every run of its stream)."""

    def lost_message(self, participants: Sequence[Participant[H]]) -> str:
        """Why decided participants can be lost and which settings to check (for the error)."""

    def unknown_outcome_message(self, participants: Sequence[Participant[H]]) -> str:
        """What is known of participants whose outcome cannot be told, and what the operator
        can check and do (for the error)."""


class ProgressStore(Protocol[H]):
    """Optional port for sinks whose decisions carry ``progress`` (what the batch consumed)."""

    def carry(self, progress: Mapping[str, Any], participant: Participant[H]) -> None:
        """Attach ``progress`` to ``participant`` so both commit atomically (a no-op if the
        participant is no longer open). A batch without participants stores its progress
        with its ``done`` record (:meth:`DecisionLog.write`)."""

    def started(self, progress: Mapping[str, Any], first: Participant[H]) -> bool | None:
        """Whether ``first``, which carried ``progress``, committed: True, False, or None
        when neither the participant nor the stored progress can tell."""

    def abandoned_message(self, progress: Mapping[str, Any], first: Participant[H]) -> str:
        """Why ``first`` (which ``started`` says never committed) was aborted after its
        decision, what shows it, and which settings to check (for the error)."""

    def unknown_message(self, progress: Mapping[str, Any], first: Participant[H]) -> str:
        """Why :meth:`started` could not tell, and what the operator can do (for the error)."""

    def resumes_before(self, progress: Mapping[str, Any], reached: bool = True) -> str | None:
        """Why a new query reading from where the stored progress says would re-read what
        ``progress`` says is already in the output (the stored progress is gone, expired,
        or behind ``progress`` anywhere), or None. ``reached`` False: the output ends
        before ``progress`` (an abandoned batch's), so only stored progress that is gone
        is wrong. ``{batch}`` in the answer is replaced by the batch."""


class Fences(Protocol):
    """Optional port: fence exact instances, after claiming the step's decision writer
    (module docstring). A sink without it is fenced by id (``Participants.fence``)."""

    def observe(self, ids: Sequence[str]) -> Sequence[Instance]:
        """The instances open under ``ids`` right now (none for an id with nothing open)."""

    def claim(self, targets: Sequence[Instance]) -> None:
        """Commit one record through this step's own decision writer, the one fenced when
        the step began: raise if a newer step has taken the writer over since (or the
        step lost it), and then nothing may be aborted."""

    def abort_exact(self, instance: Instance) -> bool:
        """Abort ``instance`` if it is still the one open under its id: True if aborted
        (now or before), False if the id moved on (begun again, or committed) since."""

    def abandoned(self, write: "WriteId") -> Sequence[Instance]:
        """The open instances of other batch jobs on this sink (not ``write``'s) that no
        job's commit could decide any more: each too near its own timeout for the least
        margin any job asks before it decides (``Participants.unfit``)."""

    def shut_out(self, instances: Sequence[Instance]) -> None:
        """Fence the decision writers of the writers ``instances`` belong to: a step of
        theirs that has not written its decision yet can write none from now on."""


class TaskTransaction(Protocol):
    """The executor side of a sink: one task attempt's work, run by :func:`~.task.run_task`."""

    def write_all(self, items: Iterable[Any]) -> int:
        """Write the task's input (opening the transaction at the first row); return the count."""

    def pre_commit(self) -> None:
        """Make what was written durable but invisible, ready for the driver to commit."""

    def abort(self) -> None:
        """Best effort: drop what was written (the driver fences the id anyway)."""


class CommitMessage(Protocol[H]):
    """What a task returns to Spark (a ``WriterCommitMessage``) for the driver's commit."""

    @property
    def write(self) -> "WriteId":
        """The write the task ran for (:mod:`.identity`): the driver commits under it."""

    def participant(self) -> Participant[H]:
        """The task's pre-committed work (``records`` 0: nothing to commit)."""
