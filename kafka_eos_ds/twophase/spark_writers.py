"""The Spark half of any two-phase-commit sink: writer bases, task identity, recovery
on first pickling, and routing of commit/abort messages to a :class:`TwoPhaseCommitter`.

Spark calls a sink's writer in several processes (DESIGN §3): a planner builds the
writer and pickles it to the tasks; each task calls ``write``; for streaming queries a
*fresh* writer (``streamWriter()`` again, never pickled) runs ``commit``/``abort``; for
batch jobs the pickled planner's writer runs them. Recovery must happen before any
task gets the writer, and never in the commit process (it would fence the batch being
committed), so :class:`TwoPhaseSparkDriver` runs it when the writer is first pickled:
on the planner, once per batch, before the tasks exist (docs/decisions.md).

A sink subclasses :class:`TwoPhaseSparkDriver` with :class:`StreamEntryPoints` and
:data:`StreamWriterBase` (or :class:`BatchEntryPoints` and :data:`BatchWriterBase`) and
supplies ``_write`` (the task side), ``_prepare`` (checks, then recovery; returns the
:class:`~.protocol.DoneMark` the tasks get), ``_committer`` (a context manager yielding
a :class:`TwoPhaseCommitter` wired to its ports) and ``_message_type``.
"""

from __future__ import annotations

import time
from typing import ContextManager, List, Optional

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage

from kafka_eos_ds.twophase.committer import TwoPhaseCommitter
from kafka_eos_ds.twophase.protocol import DoneMark

try:  # pyspark >= 4.1: the task receives pyarrow.RecordBatch (4x faster than rows)
    from pyspark.sql.datasource import DataSourceArrowWriter as BatchWriterBase
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as StreamWriterBase
except ImportError:  # pyspark 4.0: rows
    BatchWriterBase, StreamWriterBase = DataSourceWriter, DataSourceStreamWriter  # type: ignore[misc]


def task_identity(default_query: Optional[str], default_batch: Optional[int]) -> tuple:
    """(query id, batch id, partition, attempt) of the running Spark task."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return default_query, default_batch, 0, 0
    batch = ctx.getLocalProperty("streaming.sql.batchId")
    query = ctx.getLocalProperty("sql.streaming.queryId")
    return (query or default_query, int(batch) if batch not in (None, "") else default_batch,
            ctx.partitionId(), ctx.attemptNumber())


class TwoPhaseSparkDriver:
    """Driver-side skeleton shared by the project's transactional sinks.

    Attributes
    ----------
    recovery_seconds : float or None
        How long recovery took on this writer (None until it ran).

    Notes
    -----
    Commit messages must be instances of ``_message_type`` with a ``query_id`` attribute
    and a ``participant()`` method returning a :class:`~.protocol.Participant`.
    """

    _message_type: type = WriterCommitMessage
    _mark: Optional[DoneMark] = None
    recovery_seconds: Optional[float] = None

    def __getstate__(self) -> dict:
        if self._mark is None:
            started = time.monotonic()
            self._mark = self._prepare()
            self.recovery_seconds = time.monotonic() - started
        return dict(self.__dict__)

    @property
    def mark(self) -> DoneMark:
        """What the tasks may skip (known after recovery; empty before)."""
        return self._mark or DoneMark()

    # -- hooks ----------------------------------------------------------------

    def _prepare(self) -> DoneMark:
        """Check the target, then finish or fence what earlier runs left."""
        raise NotImplementedError

    def _committer(self) -> ContextManager[TwoPhaseCommitter]:
        raise NotImplementedError

    def _two_phase(self) -> bool:
        """False when the sink runs without the protocol (e.g. at-least-once)."""
        return True

    def _progress(self, batch_id: int) -> Optional[dict]:
        """What batch ``batch_id`` consumed, to commit with it (None: nothing)."""
        return None

    # -- driver entry points ----------------------------------------------------

    def _commit(self, messages: List[Optional[WriterCommitMessage]], batch_id: int, query: Optional[str]) -> None:
        if not self._two_phase():
            return
        msgs = [m for m in messages if isinstance(m, self._message_type)]
        query = next((m.query_id for m in msgs if m.query_id), None) or query or ""
        progress = self._progress(batch_id)
        with self._committer() as committer:
            committer.commit(query, batch_id, [m.participant() for m in msgs], progress)

    def _abort(self, messages: List[Optional[WriterCommitMessage]], batch_id: int, query: Optional[str]) -> None:
        if not self._two_phase():
            return
        msgs = [m for m in messages if isinstance(m, self._message_type)]
        query = next((m.query_id for m in msgs if m.query_id), None) or query
        with self._committer() as committer:
            committer.abort(query, batch_id, [m.participant() for m in msgs])


class StreamEntryPoints:
    """Spark's streaming writer calls, routed to the driver's ``_write``/``_commit``/``_abort``.

    Batch and query ids come from the task context (``task_identity``)."""

    def write(self, iterator):
        return self._write(iterator, None, None)

    def commit(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        self._commit(messages, batchId, None)

    def abort(self, messages: List[Optional[WriterCommitMessage]], batchId: int) -> None:
        self._abort(messages, batchId, None)


class BatchEntryPoints:
    """A batch job is one batch (0) of the protocol under the writer's ``_write_id``."""

    _write_id: str

    def write(self, iterator):
        return self._write(iterator, self._write_id, 0)

    def commit(self, messages: List[Optional[WriterCommitMessage]]) -> None:
        self._commit(messages, 0, self._write_id)

    def abort(self, messages: List[Optional[WriterCommitMessage]]) -> None:
        self._abort(messages, 0, self._write_id)
