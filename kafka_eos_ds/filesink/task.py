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

The commit message names every file and where the driver puts it.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
from dataclasses import dataclass
from pathlib import PurePath
from typing import IO, Any, Callable, Iterable, Iterator, Optional

from pyspark.sql.datasource import WriterCommitMessage

from kafka_eos_ds.errors import TransactionError
from kafka_eos_ds.filesink.config import FileSinkConfig
from kafka_eos_ds.filesink.handles import StagedFile, handle_of
from kafka_eos_ds.filesink.layout import FileId, new_stamp
from kafka_eos_ds.storage import RenameStore
from kafka_eos_ds.storage.local import LocalStore
from kafka_eos_ds.twophase.identity import WriteId
from kafka_eos_ds.twophase.protocol import DoneMark, Participant
from kafka_eos_ds.twophase.task import already_decided, run_task
from kafka_eos_ds.twophase.writers import Task


@dataclass
class FileCommitMessage(WriterCommitMessage):
    """One task's pre-committed files (``records`` 0: no file). ``pending``/``final``: the
    one file of an unpartitioned task on a store that renames; ``files``: otherwise
    (:mod:`.handles`)."""

    write: WriteId
    file_id: str
    partition: int
    attempt: int
    records: int
    pending: str = ""  # relative to the sink directory
    final: str = ""
    files: tuple[dict[str, Any], ...] = ()

    def participant(self) -> Participant:
        handle = {"files": list(self.files)} if self.files else {"pending": self.pending, "final": self.final}
        return Participant(self.file_id, self.partition, self.attempt, self.records, handle)


def write_files(config: FileSinkConfig, task: Task, mark: DoneMark, items: Iterable[Any],
                schema: Any) -> FileCommitMessage:
    """One task: its rows in one file per partition, pre-committed; the message for the driver."""
    store = config.store()
    fid = FileId.of(task.write, task.partition, task.attempt)
    # On S3 every attempt of a task uploads to the same keys: the id is the task's (:mod:`.layout`).
    pid = str(fid) if store.renames else str(fid.of_task())
    if already_decided(mark, task, items):
        return FileCommitMessage(task.write, pid, task.partition, task.attempt, 0)
    files = _TaskFiles(config, fid, schema)
    records = run_task(files, items, task)
    if records == 0:
        return FileCommitMessage(task.write, pid, task.partition, task.attempt, 0)
    handle = handle_of(files.staged())
    if "files" in handle:
        return FileCommitMessage(task.write, pid, task.partition, task.attempt, records,
                                 files=tuple(handle["files"]))
    return FileCommitMessage(task.write, pid, task.partition, task.attempt, records, handle["pending"],
                             handle["final"])


class _TaskFiles:
    """One task attempt's files, one per partition (a :class:`~kafka_eos_ds.twophase.TaskTransaction`)."""

    def __init__(self, config: FileSinkConfig, fid: FileId, schema: Any) -> None:
        self.config = config
        self.fid = fid
        self.schema = schema
        self.store = config.store()
        self.stamp = new_stamp()
        self._writers: dict[str, _Writer] = {}

    def write_all(self, items: Iterable[Any]) -> int:
        records = 0
        for batch in _record_batches(items, self.schema):
            for directory, rows in self.config.partitioning.split(batch):
                if rows.num_rows:
                    self._writer(directory).write_batch(rows)
                    records += rows.num_rows
        return records

    def pre_commit(self) -> None:
        for writer in self._writers.values():
            writer.pre_commit()

    def abort(self) -> None:
        for writer in self._writers.values():
            writer.abort()

    def staged(self) -> list[StagedFile]:
        layout = self.config.layout
        out = []
        for directory, writer in self._writers.items():
            if isinstance(writer, _FileWriter):
                out.append(StagedFile(layout.relative(layout.final(self.fid, directory)),
                                      layout.relative(PurePath(writer.pending)), directory, writer.records))
            else:
                assert isinstance(writer.output, _UploadOutput)
                out.append(writer.output.staged(directory, writer.records,
                                                layout.relative(layout.upload(self.fid, directory))))
        return out

    def _writer(self, directory: str) -> "_Writer":
        writer = self._writers.get(directory)
        if writer is None:
            layout = self.config.layout
            k = len(self._writers) if self.config.partitioning.columns else None
            if self.store.renames:
                writer = _FileWriter(self.config.file_format, layout.in_progress(self.fid, self.stamp, k),
                                     layout.pending(self.fid, self.stamp, k), self.schema, self.store)  # type: ignore[arg-type]
            else:
                from kafka_eos_ds.filesink.uploads import UploadOutput

                key = str(layout.upload(self.fid, directory))
                output = UploadOutput(self.store, key, self.config.part_size, str(self.fid))  # type: ignore[arg-type]
                writer = _Writer(self.config.file_format, lambda: output, self.schema)
                writer.output = output
            self._writers[directory] = writer
        return writer


_UploadOutput: Any = None  # set on first use (uploads imports boto3 only for S3 tables)


class _Writer:
    """One file being written: Arrow batches encoded as Parquet or JSON lines into the
    output ``open_output()`` gives at the first row; ``pre_commit`` finishes it."""

    def __init__(self, file_format: str, open_output: Callable[[], IO[bytes]], schema: Any) -> None:
        self.file_format = file_format
        self.spark_schema = schema
        self.records = 0
        self.output: Any = None
        self._open_output = open_output
        self._file: Any = None
        self._parquet: Any = None

    def write_all(self, items: Iterable[Any]) -> int:
        for batch in _record_batches(items, self.spark_schema):
            self.write_batch(batch)
        return self.records

    def write_batch(self, batch: Any) -> None:
        if batch.num_rows == 0:
            return
        if self._file is None:
            self._file = self._open_output()
        if self.file_format == "parquet":
            import pyarrow.parquet as pq

            if self._parquet is None:
                self._parquet = pq.ParquetWriter(self._file, batch.schema)
            self._parquet.write_batch(batch)
        else:
            lines = (json.dumps(row, default=_json_value, ensure_ascii=False) for row in batch.to_pylist())
            self._file.write(("\n".join(lines) + "\n").encode("utf-8"))
        self.records += batch.num_rows

    def pre_commit(self) -> None:
        self._close(finish=True)

    def abort(self) -> None:
        self._close(finish=False)

    def _close(self, finish: bool) -> None:
        parquet, self._parquet = self._parquet, None
        file, self._file = self._file, None
        try:
            if parquet is not None:
                parquet.close()  # writes the footer; leaves our file object open
        finally:
            if file is not None:
                file.close() if finish else file.discard()


class _FileWriter(_Writer):
    """A file on a store that renames: created at ``path`` (in-progress) at the first row,
    renamed to ``pending`` at pre-commit."""

    def __init__(self, file_format: str, path: PurePath, pending: PurePath, schema: Any,
                 store: Optional[RenameStore] = None) -> None:
        self.store: RenameStore = store or LocalStore()
        self.path = path
        self.pending = pending
        super().__init__(file_format, lambda: self.store.create(str(path)), schema)

    def pre_commit(self) -> None:
        super().pre_commit()
        # Fails if a recovery fenced (deleted) this attempt meanwhile: a zombie stops here.
        try:
            self.store.rename(str(self.path), str(self.pending))
        except FileExistsError:
            # Staged names are unique per attempt (:mod:`.layout`): only a broken stamp gets here.
            raise TransactionError(f"Cannot pre-commit '{self.path}': '{self.pending}' is already pre-committed by "
                                   "another writer. This attempt fails and Spark retries it; recovery deletes its "
                                   "file.", retriable=True) from None

    def abort(self) -> None:
        opened = self._file is not None
        try:
            super().abort()
        finally:
            if opened:  # never delete a file this attempt did not create
                self.store.delete(str(self.path))


def _record_batches(items: Iterable[Any], spark_schema: Any) -> Iterator[Any]:
    """Spark's Arrow batches as they come; rows (pyspark 4.0) gathered into batches."""
    rows: list[dict[str, Any]] = []
    for item in items:
        if hasattr(item, "num_columns"):
            yield item
        else:
            rows.append(item.asDict(recursive=True) if hasattr(item, "asDict") else item)
            if len(rows) >= 10_000:
                yield _to_batch(rows, spark_schema)
                rows = []
    if rows:
        yield _to_batch(rows, spark_schema)


def _to_batch(rows: list[dict[str, Any]], spark_schema: Any) -> Any:
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    return pa.RecordBatch.from_pylist(rows, schema=to_arrow_schema(spark_schema))


def _json_value(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")  # as Spark's JSON writer does
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    raise TypeError(f"cannot write {type(value).__name__} as JSON")
