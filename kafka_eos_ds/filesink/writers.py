"""The Spark side of the file sink: stream and batch writers.

Built on :class:`~kafka_eos_ds.twophase.spark_writers.TwoPhaseSparkDriver`, like the
Kafka sink: recovery runs when the writer is first pickled (on the planner, before the
batch's tasks), commit and abort go through the same :class:`TwoPhaseCommitter`.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Any, Iterator, Mapping, Optional

from pyspark.sql.types import StructType

from kafka_eos_ds.errors import ConfigError
from kafka_eos_ds.filesink.config import FileSinkConfig, check_writable
from kafka_eos_ds.filesink.store import FileDecisionLog, FileParticipants
from kafka_eos_ds.filesink.task import FileCommitMessage, write_files
from kafka_eos_ds.twophase.committer import TwoPhaseCommitter
from kafka_eos_ds.twophase.protocol import DoneMark
from kafka_eos_ds.twophase.spark_writers import (
    BatchEntryPoints,
    BatchWriterBase,
    StreamEntryPoints,
    StreamWriterBase,
    TwoPhaseSparkDriver,
)


class _FileSinkDriver(TwoPhaseSparkDriver):
    """Config, recovery of the directory's leftovers, and the file sink's ports."""

    _message_type = FileCommitMessage

    def __init__(self, schema: StructType, options: Mapping[str, Any], overwrite: bool) -> None:
        if overwrite:
            raise ConfigError("The kafka_eos_file sink only adds files (mode 'append'); mode 'overwrite' is not "
                              "supported. Write to a new 'path' or empty the directory first.")
        self._config = FileSinkConfig.from_options(options)
        self._schema = schema
        self._mark: Optional[DoneMark] = None
        self.recovery_seconds: Optional[float] = None

    def _prepare(self) -> DoneMark:
        """Check the directory can be written, then finish or delete what earlier runs left."""
        check_writable(self._config.layout)
        with self._committer() as committer:
            return committer.recover()

    @contextlib.contextmanager
    def _committer(self) -> Iterator[TwoPhaseCommitter]:
        layout = self._config.layout
        # Renames are local and quick: no grace sweep is needed beyond a short one for
        # tasks still closing their files when a batch is aborted.
        yield TwoPhaseCommitter(FileDecisionLog(layout), FileParticipants(layout),
                                commit_timeout_s=self._config.commit_timeout_s, abort_grace_s=1.0)

    def _write(self, iterator: Iterator[Any], query: Optional[str], batch: Optional[int]) -> FileCommitMessage:
        return write_files(self._config, self.mark, iterator, self._schema, query, batch)


class FileStreamWriter(StreamEntryPoints, _FileSinkDriver, StreamWriterBase):
    """``df.writeStream.format("kafka_eos_file")``: exactly-once files for streaming queries.

    Each task writes one file per batch into ``DIR/_kafka_eos/in-progress``, pre-commits
    it by renaming it to ``DIR/_kafka_eos/pending``; the driver stores its decision in
    ``DIR/_kafka_eos/decision.json``, then renames every pending file of the batch to
    ``DIR/part-<batch>-<partition>-<query>.<ext>``. Options: docs/file-sink.md.

    Examples
    --------
    >>> (df.writeStream.format("kafka_eos_file").option("path", "/data/orders")
    ...    .option("checkpointLocation", "/ckpt/orders-files").start())
    """

    def __init__(self, schema: StructType, options: Mapping[str, Any], overwrite: bool = False) -> None:
        _FileSinkDriver.__init__(self, schema, options, False)


class FileBatchWriter(BatchEntryPoints, _FileSinkDriver, BatchWriterBase):
    """``df.write.format("kafka_eos_file").mode("append")``: all files appear at job commit.

    The job is one batch of the protocol under a fresh write id (its files are named
    ``part-00000-<partition>-<write id>.<ext>``).
    """

    def __init__(self, schema: StructType, options: Mapping[str, Any], overwrite: bool = False) -> None:
        _FileSinkDriver.__init__(self, schema, options, overwrite)
        self._write_id = f"w{uuid.uuid4().hex[:7]}"
