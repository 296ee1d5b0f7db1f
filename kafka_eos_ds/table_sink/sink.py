"""The file sink's steps, composed into the protocol's writers (:mod:`kafka_eos_ds.twophase.writers`).

:class:`FileSink` wires the sink's two ports — :class:`~.decision_log.FileDecisionLog`
and :class:`~.participants.FileParticipants` — into a
:class:`~kafka_eos_ds.twophase.TwoPhaseCommitter`:

* ``prepare`` (planner): the directory can be written (probed once per process), and the
  metastore table exists, if one is named; a stream, or an app write (``txnAppId``),
  finishes what its earlier runs decided and deletes what they staged; each step's
  transient failures are retried;
* ``write`` (executor): :func:`~.task.write_files`;
* ``commit``/``abort`` (driver): under the identity the tasks reported; once a batch's
  files are final, :mod:`.publishing` announces it (``_SUCCESS`` markers, metastore
  partitions).
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Mapping, Sequence

from pyspark.sql.datasource import WriterCommitMessage
from pyspark.sql.types import StructType

from kafka_eos_ds.errors import ConfigError, StorageError, TransactionError
from kafka_eos_ds.storage import Store
from kafka_eos_ds.storage.checkpoint import Checkpoint
from kafka_eos_ds.table_sink.config import FileSinkConfig, check_writable
from kafka_eos_ds.table_sink.decision_log import FileDecisionLog
from kafka_eos_ds.table_sink.handles import FileCommitter, FileParticipant
from kafka_eos_ds.table_sink.layout import writer_dir
from kafka_eos_ds.table_sink.progress import RecordedProgress, batch_offsets
from kafka_eos_ds.table_sink.publishing import prepare_table, publisher, register_partitions
from kafka_eos_ds.table_sink.runtime import DEFAULT, TableRuntime
from kafka_eos_ds.table_sink.staging import staging_of
from kafka_eos_ds.table_sink.takeover import clean_superseded, finish_other_streams, takes_over
from kafka_eos_ds.table_sink.task import FileCommitMessage, write_files
from kafka_eos_ds.twophase.committer import TwoPhaseCommitter
from kafka_eos_ds.twophase.identity import Kind, WriteId, WriteSpec
from kafka_eos_ds.twophase.protocol import DoneMark
from kafka_eos_ds.twophase.retrying import NOTHING_DECIDED, retrying
from kafka_eos_ds.twophase.writers import Task, TwoPhaseBatchWriter, TwoPhaseStreamWriter


class FileSink:
    """One ``format("kafka_eos_file")`` directory's steps; picklable (it travels to the tasks).
    ``runtime``: the process's clock, uuids, thread pool and ``os`` (:mod:`.runtime`)."""

    message_type = FileCommitMessage

    def __init__(self, config: FileSinkConfig, schema: StructType, runtime: TableRuntime = DEFAULT) -> None:
        self.config = config
        self.schema = schema
        self.runtime = runtime
        # The writer's decision number the planner's recovery ended at: the tasks hand it
        # to the commit, whose decision must come right after it (FileDecisionLog). None
        # when the planner cannot name the writer: each task reads it before staging.
        self.read: int | None = None

    def prepare(self, spec: WriteSpec) -> DoneMark:
        # Each step's transient failure (S3 throttling, a NameNode failing over, a metastore
        # restarting) is retried, as the Kafka sink's set-up is: none of them is the user's.
        self._retry(lambda: check_writable(self.config.layout, self.store()), "Could not write to 'path'")
        self._retry(lambda: prepare_table(self.config, self.schema, self.store()), "Could not reach the Hive metastore")
        if spec.streaming:
            try:
                query = self._retry(Checkpoint.at(self.config.checkpoint, self.config.storage).query_id,
                                    "Could not read the checkpoint")
            except ConfigError:
                query = None
            if query is None:
                # Without the query's id its staging cannot be found: its tasks then write
                # under new names (a re-run of a decided batch is still caught at commit).
                return DoneMark()
            decisions = FileDecisionLog(self.config.layout, self.store())
            committer = self._committer(decisions)
            if self._retry(lambda: decisions.latest(f"{Kind.STREAM.value}:{query}"),
                           "Could not read the sink's decisions") is None:
                # Each step of it is idempotent (a committed file is found committed, a
                # publish adds nothing twice): retried whole.
                self._retry(lambda: self._finish_other_streams(committer, query),
                            "Could not finish the table's other streams")
            return self._recover(decisions, WriteId(Kind.STREAM, query, -1))
        planned = spec.planned()
        return self._recover(FileDecisionLog(self.config.layout, self.store()), planned) \
            if planned is not None else DoneMark()

    def _recover(self, decisions: FileDecisionLog, write: WriteId) -> DoneMark:
        mark = self._committer(decisions).recover(write)
        self.read = decisions.number(write.key)
        return mark

    def write(self, task: Task, mark: DoneMark, items: Iterator[Any]) -> WriterCommitMessage:
        return write_files(self.config, task, mark, items, self.schema, self.read, self.runtime)

    def commit(self, write: WriteId, participants: Sequence[FileParticipant | None]) -> None:
        # Each task's number was read before its files were staged (by the planner, or by
        # the task itself): the lowest was read before any file of the write.
        read = min((p.handle.read for p in participants if p is not None and p.handle.read is not None), default=None)
        pinned = {writer_dir(write.key): int(read)} if read is not None else {}
        committer = self._committer(FileDecisionLog(self.config.layout, self.store(), pinned))
        progress, first = None, False
        if write.kind is Kind.STREAM:
            progress = batch_offsets(self.config.checkpoint, self.config.storage, write.version)
            first = takes_over(committer, write.key)
        self._register_partitions(write, [p for p in participants if p is not None])
        committer.commit(write, participants, progress)
        if first:  # the query's first batch on the table is done: it has taken the table over
            clean_superseded(committer, self.config.layout, self.store(), write.app, progress)

    def _register_partitions(self, write: WriteId, participants: Sequence[FileParticipant]) -> None:
        """The batch's partitions in the metastore before its decision: a refusal then
        refuses the batch undecided (Spark aborts it), never one whose files are final."""
        try:
            self._retry(lambda: register_partitions(self.config, self.store(), participants),
                        f"Could not register the partitions of batch {write.version}")
        except StorageError as exc:
            if exc.retriable:
                raise
            raise TransactionError(f"Batch {write.version} of {write.key} was not committed: {exc}. Nothing of the "
                                   "batch is visible. Make the metastore accept these partition values (e.g. its "
                                   "'hive.metastore.partition.name.whitelist.pattern') or change 'partitionBy'; "
                                   "restarting the query (or running the write again) runs the batch again "
                                   "(docs/troubleshooting.md, \"Batch N was not committed: the Hive metastore refused "
                                   "its partitions\").") from exc

    def abort(self, write: WriteId | None, participants: Sequence[FileParticipant | None],
              spec: WriteSpec) -> None:
        fallback = None if spec.streaming else WriteId(Kind.JOB, spec.job or "", 0, job=spec.job)
        self._committer().abort(write, participants, fallback)

    def store(self) -> Store:
        """The store holding the directory (the config's, on this sink's runtime)."""
        return self.config.store(self.runtime)

    def _retry(self, call: Callable[[], Any], failure: str) -> Any:
        return retrying(call, failure, self.config.commit_timeout_s, then=NOTHING_DECIDED, sleep=self.runtime.sleep,
                        clock=self.runtime.clock)

    def _committer(self, decisions: FileDecisionLog | None = None) -> FileCommitter:
        """One driver step's committer; its decision log (one per step) also guards every
        deletion of a staged file (FileDecisionLog.claim)."""
        layout, store, rt = self.config.layout, self.store(), self.runtime
        decisions = decisions or FileDecisionLog(layout, store)
        participants = staging_of(store).participants(layout, decisions)
        # A short grace sweep is enough for tasks still closing their files when a write
        # is aborted. Streams stage apart (their own writer directory): several may write
        # one directory.
        return TwoPhaseCommitter(decisions, participants,
                                 commit_timeout_s=self.config.commit_timeout_s, abort_grace_s=1.0,
                                 streams_share_ids=False, publish=publisher(self.config, store),
                                 progress_store=RecordedProgress(), sleep=rt.sleep, clock=rt.clock,
                                 executor=rt.executor)

    def _finish_other_streams(self, committer: FileCommitter, query: str) -> None:
        """A new query's first batch: commit, once, what the table's other streams decided
        and never recorded done (:mod:`.takeover`)."""
        finish_other_streams(committer, self.config.layout, self.store(), query)


def stream_writer(schema: StructType, options: Mapping[str, Any],
                  runtime: TableRuntime = DEFAULT) -> TwoPhaseStreamWriter:
    """``df.writeStream.format("kafka_eos_file")``: exactly-once files for streaming queries.

    Each task writes one file per batch into ``DIR/_kafka_eos/<writer>/in-progress``,
    pre-commits it by renaming it to ``.../pending``; the driver stores its decision in
    ``DIR/_kafka_eos/<writer>/decisions/``, then renames every pending file of the
    batch to ``DIR/part-<batch>-<partition>-<query>.<ext>``. Options: docs/file-sink.md.
    """
    return TwoPhaseStreamWriter(FileSink(FileSinkConfig.from_options(options, schema), schema, runtime))


def batch_writer(schema: StructType, options: Mapping[str, Any], overwrite: bool,
                 runtime: TableRuntime = DEFAULT) -> TwoPhaseBatchWriter:
    """``df.write.format("kafka_eos_file").mode("append")``: all files appear at job commit
    (inside foreachBatch: under the stream's micro-batch, see docs/file-sink.md)."""
    if overwrite:
        raise ConfigError("The kafka_eos_file sink only adds files (mode 'append'); mode 'overwrite' is not "
                          "supported. Write to a new 'path' or empty the directory first.")
    return TwoPhaseBatchWriter(FileSink(FileSinkConfig.from_options(options, schema), schema, runtime), options)
