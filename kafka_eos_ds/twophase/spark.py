"""What every two-phase-commit sink needs from Spark: writer bases, the task's identity,
and the participants in a batch's commit messages.

Spark calls a sink's writer in several processes (docs/decisions.md): a planner builds the
writer and pickles it to the tasks; each task calls ``write``; for streaming queries a
*fresh* writer (``streamWriter()`` again, never pickled) runs ``commit``/``abort``; for
batch jobs the pickled planner's writer runs them. A sink's writers therefore run their
recovery in a named step, ``prepare_for_tasks()``, called when the writer is pickled:
on the planner, once per batch, before the tasks exist (docs/decisions.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional, cast

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage

from kafka_eos_ds.twophase.protocol import CommitMessage, Participant

try:  # pyspark >= 4.1: the task receives pyarrow.RecordBatch (4x faster than rows)
    from pyspark.sql.datasource import DataSourceArrowWriter as BatchWriterBase
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as StreamWriterBase
except ImportError:  # pyspark 4.0: rows
    BatchWriterBase, StreamWriterBase = DataSourceWriter, DataSourceStreamWriter  # type: ignore[misc, assignment]


@dataclass(frozen=True)
class TaskIdentity:
    """Which query, batch, partition and attempt the running Spark task is."""

    query: Optional[str]
    batch: Optional[int]
    partition: int
    attempt: int


def task_identity(default_query: Optional[str], default_batch: Optional[int]) -> TaskIdentity:
    """The running Spark task's identity; the defaults stand in for a batch write's."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return TaskIdentity(default_query, default_batch, 0, 0)
    batch = ctx.getLocalProperty("streaming.sql.batchId")
    query = ctx.getLocalProperty("sql.streaming.queryId")
    return TaskIdentity(query or default_query, int(batch) if batch not in (None, "") else default_batch,
                        ctx.partitionId(), ctx.attemptNumber())


def participants_of(messages: Iterable[Optional[WriterCommitMessage]], message_type: type,
                    default_query: Optional[str]) -> tuple[Optional[str], list[Participant]]:
    """The query id and the participants of a batch's commit messages (failed slots dropped)."""
    msgs = [cast(CommitMessage, m) for m in messages if isinstance(m, message_type)]
    query = next((m.query_id for m in msgs if m.query_id), None) or default_query
    return query, [m.participant() for m in msgs]
