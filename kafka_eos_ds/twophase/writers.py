"""Spark's writers for any sink on the protocol: one per Spark role, written once.

Spark calls a sink's writer in several processes (docs/dev/decisions.md):

* a planner builds the writer and pickles it to the tasks — for a stream once per
  micro-batch, before its tasks exist; the writer's recovery runs there, in
  :meth:`prepare_for_tasks`, called from ``__getstate__`` (the only hook Spark gives the
  driver side before the tasks), at most once per writer;
* each task calls ``write`` on its unpickled copy, in an executor's Python worker;
* ``commit``/``abort`` run on the driver: for a stream in a *fresh* writer (never pickled,
  so it never recovers and never fences the batch it is committing), for ``df.write`` in
  the planner's writer.

The writers only translate Spark's calls; what a sink does at each step is its
:class:`Sink` (the Kafka sink, the file sink). Which write a task belongs to is decided
once, on the task, by :func:`~.identity.identify`, and travels to the driver in the
commit messages: the driver commits under the tasks' identity, never its own guess.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, MutableMapping, Protocol, Sequence, cast

from pyspark.sql.datasource import DataSource, DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage

from kafka_eos_ds.errors import TransactionError
from kafka_eos_ds.twophase.identity import WriteId, WriteSpec, identify
from kafka_eos_ds.twophase.protocol import CommitMessage, DoneMark, Participant
from kafka_eos_ds.twophase.runtime import Runtime

try:  # pyspark >= 4.1: the task receives pyarrow.RecordBatch (4x faster than rows)
    from pyspark.sql.datasource import DataSourceArrowWriter as BatchWriterBase
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as StreamWriterBase
except ImportError:  # pyspark 4.0: rows
    BatchWriterBase, StreamWriterBase = DataSourceWriter, DataSourceStreamWriter  # type: ignore[misc, assignment]


@dataclass(frozen=True)
class Task:
    """The running Spark task: its write, partition and attempt."""

    write: WriteId
    partition: int
    attempt: int


def current_task(spec: WriteSpec) -> Task:
    """The running task, from Spark's TaskContext (outside a task: partition 0, attempt 0)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return Task(identify(spec, lambda _name: None), 0, 0)
    return Task(identify(spec, ctx.getLocalProperty), ctx.partitionId(), ctx.attemptNumber())


class Sink(Protocol):
    """What one sink does at each step of a write (composed into the writers below).

    Spark hands the tasks' messages back untyped, so the participants reach ``commit`` and
    ``abort`` as ``Participant[Any]``: each holds the handle its sink's message built."""

    @property
    def runtime(self) -> Runtime:
        """What the sink takes from its process (:mod:`.runtime`); it pickles by name."""

    @property
    def message_type(self) -> type:
        """The sink's WriterCommitMessage class (a :class:`~.protocol.CommitMessage`)."""

    def prepare(self, spec: WriteSpec) -> DoneMark:
        """On the planner, before the tasks: check the target and recover what the writer's
        earlier runs left; return what the tasks may skip."""

    def write(self, task: Task, mark: DoneMark, items: Iterator[Any]) -> WriterCommitMessage:
        """On an executor: one task's participant, pre-committed."""

    def commit(self, write: WriteId, participants: Sequence[Participant[Any] | None]) -> None:
        """On the driver: decide and commit the write."""

    def abort(self, write: WriteId | None, participants: Sequence[Participant[Any] | None],
              spec: WriteSpec) -> None:
        """On the driver: fence what an undecided write left (``write`` None: no task reported)."""


def messages_of(messages: Sequence[WriterCommitMessage | None], message_type: type,
                batch_id: int | None = None) -> tuple[WriteId | None, list[Participant[Any] | None]]:
    """The write the tasks ran for and their participants (failed slots as None).

    Every task of one write reports the same identity; a stream's must be the batch Spark
    commits. Anything else means the write's identity is not what the driver thinks, and
    committing it could commit the wrong thing: it fails loudly."""
    msgs = [cast("CommitMessage[Any]", m) for m in messages if isinstance(m, message_type)]
    writes = {m.write for m in msgs}
    if len(writes) > 1:
        raise TransactionError(f"The tasks of one write reported different identities ({sorted(map(str, writes))}); "
                               "nothing was committed.", retriable=False)
    write = next(iter(writes), None)
    if write is not None and batch_id is not None and write.version != int(batch_id):
        raise TransactionError(f"Spark commits batch {batch_id} but its tasks wrote batch {write.version}; "
                               "nothing was committed.", retriable=False)
    return write, [cast("CommitMessage[Any]", m).participant() if isinstance(m, message_type) else None
                   for m in messages]


class SinkDataSource(DataSource):
    """A data source whose sink's writers get ``runtime`` (:mod:`.runtime`). Spark builds it
    from the options alone: the sink's default runtime; a test hands in its own."""

    runtime: Runtime | None = None  # also where a data source is built without __init__

    def __init__(self, options: MutableMapping[str, str], runtime: Runtime | None = None) -> None:
        super().__init__(options)
        self.runtime = runtime

    def runtime_kwargs(self) -> dict[str, Any]:
        """The writer factories' ``runtime`` keyword (none: their default)."""
        return {} if self.runtime is None else {"runtime": self.runtime}


class _TwoPhaseWriter:
    """The calls every writer shares; ``spec`` is what is known before the tasks run."""

    def __init__(self, sink: Sink, spec: WriteSpec) -> None:
        self.sink = sink
        self.spec = spec
        self.mark: DoneMark | None = None

    def prepare_for_tasks(self) -> DoneMark:
        """Recover before the tasks: once per writer, on the planner (module docstring)."""
        if self.mark is None:
            self.mark = self.sink.prepare(self.spec)
        return self.mark

    def __getstate__(self) -> dict[str, Any]:
        self.prepare_for_tasks()  # pickled only on the planner, for the tasks (module docstring)
        return dict(self.__dict__)

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return self.sink.write(current_task(self.spec), self.mark or DoneMark(), iterator)


class TwoPhaseStreamWriter(_TwoPhaseWriter, StreamWriterBase):
    """``writeStream.format(...)`` of a sink on the protocol: each micro-batch one write."""

    def __init__(self, sink: Sink) -> None:
        super().__init__(sink, WriteSpec(streaming=True))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        write, participants = messages_of(messages, self.sink.message_type, batchId)
        if write is not None:
            self.sink.commit(write, participants)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        write, participants = messages_of(messages, self.sink.message_type, batchId)
        self.sink.abort(write, participants, self.spec)


class TwoPhaseBatchWriter(_TwoPhaseWriter, BatchWriterBase):
    """``df.write.format(...)``: one write, whose identity its tasks tell (:mod:`.identity`)."""

    def __init__(self, sink: Sink, options: Any) -> None:
        super().__init__(sink, WriteSpec.for_batch(options.get, sink.runtime.uuid4().hex))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        write, participants = messages_of(messages, self.sink.message_type)
        if write is not None:
            self.sink.commit(write, participants)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        write, participants = messages_of(messages, self.sink.message_type)
        self.sink.abort(write, participants, self.spec)
