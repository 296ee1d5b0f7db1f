"""The executor side of the file sink: Arrow batches -> one in-progress file -> pending.

A task of batch N writes its rows to ``_kafka_eos/<writer>/in-progress/<id>.<ext>``
(opened at the first row, so an empty task creates nothing). Pre-commit closes the file,
fsyncs it, moves it to ``_kafka_eos/<writer>/pending/<id>.<ext>`` (a hard link, then the
in-progress name is removed: unlike a rename, the link fails if that pending name exists)
and fsyncs the directory (:mod:`.layout`): from then on the file survives any crash but no
reader of DIR sees it. The commit message names the pending file, its inode, and the final
name the driver will rename it to.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from pyspark.sql.datasource import WriterCommitMessage

from kafka_eos_ds.errors import TransactionError
from kafka_eos_ds.filesink.config import FileSinkConfig
from kafka_eos_ds.filesink.layout import FileId, fsync_dir
from kafka_eos_ds.twophase.identity import WriteId
from kafka_eos_ds.twophase.protocol import DoneMark, Participant
from kafka_eos_ds.twophase.task import already_decided, run_task
from kafka_eos_ds.twophase.writers import Task


@dataclass
class FileCommitMessage(WriterCommitMessage):
    """One task's pre-committed file (``records`` 0: no file)."""

    write: WriteId
    file_id: str
    partition: int
    attempt: int
    records: int
    pending: str = ""  # relative to the sink directory
    final: str = ""
    inode: int = 0  # of the pending file: the commit knows its own file by it

    def participant(self) -> Participant:
        handle: dict[str, Any] = {"pending": self.pending, "final": self.final}
        if self.inode:
            handle["inode"] = self.inode
        return Participant(self.file_id, self.partition, self.attempt, self.records, handle)


def write_files(config: FileSinkConfig, task: Task, mark: DoneMark, items: Iterable[Any],
                schema: Any) -> FileCommitMessage:
    """One task: its rows in one in-progress file, renamed to pending; the message for the driver."""
    fid = FileId.of(task.write, task.partition, task.attempt)
    if already_decided(mark, task, items):
        return FileCommitMessage(task.write, str(fid), task.partition, task.attempt, 0)
    layout = config.layout
    layout.ensure(fid.writer)
    writer = _FileWriter(config.file_format, layout.in_progress(fid), layout.pending(fid), schema)
    records = run_task(writer, items, task)
    if records == 0:
        return FileCommitMessage(task.write, str(fid), task.partition, task.attempt, 0)
    return FileCommitMessage(task.write, str(fid), task.partition, task.attempt, records,
                             layout.relative(writer.pending), layout.relative(layout.final(fid)), inode=writer.inode)


class _FileWriter:
    """One task's in-progress file (a :class:`~kafka_eos_ds.twophase.TaskTransaction`);
    created at the first row, renamed to ``pending`` at pre-commit."""

    def __init__(self, file_format: str, path: Path, pending: Path, schema: Any) -> None:
        self.file_format = file_format
        self.path = path
        self.pending = pending
        self.spark_schema = schema
        self.records = 0
        self.inode = 0
        self._file: Any = None
        self._parquet: Any = None

    def write_all(self, items: Iterable[Any]) -> int:
        rows: list[dict[str, Any]] = []
        for item in items:
            if hasattr(item, "num_columns"):
                self._write_batch(item)
            else:  # pyspark 4.0 hands rows
                rows.append(item.asDict(recursive=True) if hasattr(item, "asDict") else item)
                if len(rows) >= 10_000:
                    self._write_rows(rows)
                    rows = []
        if rows:
            self._write_rows(rows)
        return self.records

    def _write_rows(self, rows: list[dict[str, Any]]) -> None:
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema

        self._write_batch(pa.RecordBatch.from_pylist(rows, schema=to_arrow_schema(self.spark_schema)))

    def _write_batch(self, batch: Any) -> None:
        if batch.num_rows == 0:
            return
        if self._file is None:
            # Exclusive create: a leftover writer of the same id (its old run's worker
            # still alive) makes this attempt fail and be retried under a new id, rather
            # than two writers sharing one file.
            self._file = open(self.path, "xb")  # noqa: SIM115 (open across write calls; closed by _close)
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
        self._close(sync=True)
        # A link, not a rename: a rename would silently replace a pending file of the same
        # id. Attempt numbers restart per driver run and stage attempt, so a zombie of this
        # id could replace the live attempt's pending file, or stage a stray one next to
        # the final file the driver already made of it. The link also fails when a recovery
        # fenced (deleted) this attempt meanwhile: a zombie stops here.
        try:
            os.link(self.path, self.pending)
        except FileExistsError:
            raise TransactionError(
                f"Cannot pre-commit '{self.path.name}': another writer of the same id already pre-committed "
                f"'{self.pending}' (a zombie attempt of an earlier run or stage attempt). This attempt fails and "
                "Spark retries it; recovery deletes its file.", retriable=True) from None
        self.inode = self.pending.stat().st_ino
        self.path.unlink()
        fsync_dir(self.pending.parent)

    def abort(self) -> None:
        opened = self._file is not None
        try:
            self._close(sync=False)
        finally:
            if opened:  # never delete a file this attempt did not create
                self.path.unlink(missing_ok=True)

    def _close(self, sync: bool) -> None:
        parquet, self._parquet = self._parquet, None
        file, self._file = self._file, None
        try:
            if parquet is not None:
                parquet.close()  # writes the footer; leaves our file object open
            if file is not None and sync:
                file.flush()
                os.fsync(file.fileno())
        finally:
            if file is not None:
                file.close()


def _json_value(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")  # as Spark's JSON writer does
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    raise TypeError(f"cannot write {type(value).__name__} as JSON")
