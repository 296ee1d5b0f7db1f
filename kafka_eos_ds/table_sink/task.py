"""The executor side of the file sink: Arrow batches -> one file per partition -> pending.

A task of batch N splits its rows by partition (:mod:`.partitions`; one file when the
table is not partitioned) and writes each partition's rows to a file of its own:

* on a store that renames (local, HDFS): ``_kafka_eos/<writer>/in-progress/<id>.<stamp>[.<k>].<ext>``
  (created exclusively at the partition's first row, so an empty task creates nothing);
  pre-commit closes each file durably and moves it to ``.../pending/...`` (:mod:`.layout`)
  with a rename that never replaces a file (a hard link on a local disk, HDFS's rename2
  without overwrite): from then on the file survives any crash but no reader of DIR sees
  it, and a recovery that fenced the attempt meanwhile makes the move fail;
* on S3: a multipart upload at the file's final key (:mod:`.uploads`), whose last part
  pre-commit sends.

The commit message names every file and where the driver puts it (:mod:`.handles`),
and the number of the writer's decision log read before any file was staged (``read``):
the planner's, or, when the planner cannot name the writer (a ``df.write`` inside
``foreachBatch``, a batch job), the task's own, read before its first file. The commit
decides right after it, so a fence that listed a file of the write and claimed the log
refuses the write undecided (:mod:`.decision_log`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from pyspark.sql.datasource import WriterCommitMessage

from kafka_eos_ds.table_sink.config import FileSinkConfig
from kafka_eos_ds.table_sink.decision_log import FileDecisionLog
from kafka_eos_ds.table_sink.encoding import record_batches
from kafka_eos_ds.table_sink.handles import FileParticipant, StagedFile, StagedFiles
from kafka_eos_ds.table_sink.layout import FileId
from kafka_eos_ds.table_sink.runtime import DEFAULT, TableRuntime
from kafka_eos_ds.table_sink.staging import TaskFile, staging_of
from kafka_eos_ds.twophase.identity import WriteId
from kafka_eos_ds.twophase.protocol import DoneMark, Participant
from kafka_eos_ds.twophase.task import already_decided, run_task
from kafka_eos_ds.twophase.writers import Task


@dataclass
class FileCommitMessage(WriterCommitMessage):
    """One task's pre-committed files (``records`` 0: no file; :mod:`.handles`)."""

    write: WriteId
    file_id: str
    partition: int
    attempt: int
    records: int
    files: tuple[StagedFile, ...] = ()
    read: int | None = None  # the writer's decision number read before staging (module docstring)

    def participant(self) -> FileParticipant:
        return Participant(self.file_id, self.partition, self.attempt, self.records, StagedFiles(self.files, self.read))


def write_files(config: FileSinkConfig, task: Task, mark: DoneMark, items: Iterable[Any],
                schema: Any, read: int | None = None, runtime: TableRuntime = DEFAULT) -> FileCommitMessage:
    """One task: its rows in one file per partition, pre-committed; the message for the
    driver. ``read``: the writer's decision number the planner read (None: the task reads
    it before its first file), passed on to the commit; ``runtime``: the sink's."""
    fid = FileId.of(task.write, task.partition, task.attempt)
    pid = staging_of(config.store(runtime)).participant_id(fid)
    empty = FileCommitMessage(task.write, pid, task.partition, task.attempt, 0)
    if already_decided(mark, task, items):
        return empty
    files = TaskFiles(config, fid, schema, read, runtime)
    records = run_task(files, items, task)
    if records == 0:
        return empty
    return FileCommitMessage(task.write, pid, task.partition, task.attempt, records,
                             tuple(files.staged()), read=files.read)


class TaskFiles:
    """One task attempt's files, one per partition (a :class:`~kafka_eos_ds.twophase.TaskTransaction`).
    ``read``: the writer's decision number read before the first file (module docstring);
    ``runtime``: the sink's, whose store and stamp the files get."""

    def __init__(self, config: FileSinkConfig, fid: FileId, schema: Any, read: int | None = None,
                 runtime: TableRuntime = DEFAULT) -> None:
        self.config = config
        self.fid = fid
        self.schema = schema
        self.read = read
        self.store = config.store(runtime)
        self.staging = staging_of(self.store)
        self.stamp = runtime.stamp()
        self._files: dict[str, TaskFile] = {}  # partition directory -> its file

    def write_all(self, items: Iterable[Any]) -> int:
        records = 0
        for batch in record_batches(items, self.schema):
            for directory, rows in self.config.partitioning.split(batch):
                if rows.num_rows:
                    self._file(directory).write_batch(rows)
                    records += rows.num_rows
        return records

    def pre_commit(self) -> None:
        for file in self._files.values():
            file.pre_commit()

    def abort(self) -> None:
        for file in self._files.values():
            file.abort()

    def staged(self) -> list[StagedFile]:
        return [file.staged() for file in self._files.values()]

    def _file(self, directory: str) -> TaskFile:
        file = self._files.get(directory)
        if file is None:
            if self.read is None:
                # Before anything of the write exists here (a file, an S3 upload): a fence
                # that lists it claims a number above this one, which refuses the commit.
                self.read = FileDecisionLog(self.config.layout, self.store).highest(self.fid.writer)
            k = len(self._files) if self.config.partitioning.columns else None
            file = self.staging.open(self.config, self.fid, directory, self.stamp, k)
            self._files[directory] = file
        return file
