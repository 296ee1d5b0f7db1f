"""Spark's entry points of the file sink: the stream and batch writers.

As in the Kafka sink (:mod:`kafka_eos_ds.sink.writers`), each writer defines Spark's
calls itself and hands them to a :class:`~.driver.FileSinkDriver`; recovery is the named
step ``prepare_for_tasks()``, run when Spark pickles the writer for the tasks (on the
planner, once per batch; docs/decisions.md).
"""

from __future__ import annotations

import uuid
from typing import Any, Iterator, Mapping, Optional

from pyspark.sql.datasource import WriterCommitMessage
from pyspark.sql.types import StructType

from kafka_eos_ds.errors import ConfigError
from kafka_eos_ds.filesink.config import FileSinkConfig
from kafka_eos_ds.filesink.driver import FileSinkDriver
from kafka_eos_ds.twophase.protocol import DoneMark
from kafka_eos_ds.twophase.spark import BatchWriterBase, StreamWriterBase


def _driver(schema: StructType, options: Mapping[str, Any], overwrite: bool) -> FileSinkDriver:
    if overwrite:
        raise ConfigError("The kafka_eos_file sink only adds files (mode 'append'); mode 'overwrite' is not "
                          "supported. Write to a new 'path' or empty the directory first.")
    return FileSinkDriver(FileSinkConfig.from_options(options), schema)


class FileStreamWriter(StreamWriterBase):
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
        self._driver = _driver(schema, options, False)

    def prepare_for_tasks(self) -> DoneMark:
        """Check the directory and recover; once per batch, on the planner, before its tasks."""
        return self._driver.prepare_for_tasks()

    def __getstate__(self) -> dict:
        self.prepare_for_tasks()  # pickled only on the planner, for the tasks (module docstring)
        return dict(self.__dict__)

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return self._driver.write(iterator)

    def commit(self, messages: list[Optional[WriterCommitMessage]], batchId: int) -> None:
        self._driver.commit(messages, batchId)

    def abort(self, messages: list[Optional[WriterCommitMessage]], batchId: int) -> None:
        self._driver.abort(messages, batchId)


class FileBatchWriter(BatchWriterBase):
    """``df.write.format("kafka_eos_file").mode("append")``: all files appear at job commit.

    The job is batch 0 of the protocol under a fresh write id (its files are named
    ``part-00000-<partition>-<write id>.<ext>``).
    """

    def __init__(self, schema: StructType, options: Mapping[str, Any], overwrite: bool = False) -> None:
        self._driver = _driver(schema, options, overwrite)
        self._write_id = f"w{uuid.uuid4().hex[:7]}"

    def prepare_for_tasks(self) -> DoneMark:
        """Check the directory and recover; on the planner, before the job's tasks."""
        return self._driver.prepare_for_tasks()

    def __getstate__(self) -> dict:
        self.prepare_for_tasks()  # pickled only on the planner, for the tasks (module docstring)
        return dict(self.__dict__)

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return self._driver.write(iterator, self._write_id, 0)

    def commit(self, messages: list[Optional[WriterCommitMessage]]) -> None:
        self._driver.commit(messages, 0, self._write_id)

    def abort(self, messages: list[Optional[WriterCommitMessage]]) -> None:
        self._driver.abort(messages, 0, self._write_id)
