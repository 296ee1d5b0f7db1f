"""Spark's entry points of the Kafka sink: the stream and batch writers.

Each writer defines Spark's calls itself and hands them to a
:class:`~.driver.KafkaSinkDriver`:

* ``prepare_for_tasks()`` — check the topic and recover (finish a decided batch, abort
  leftovers); called from ``__getstate__``, because Spark pickles the writer only on the
  planner, once per batch, to ship it to the tasks (docs/decisions.md, "Sink recovery
  is a named step run when the writer is pickled");
* ``write()`` — on an executor, one task's transaction (:mod:`.task_writer`);
* ``commit()`` / ``abort()`` — on the driver, in a fresh writer (never pickled, so it
  never recovers and never fences the batch it is committing).
"""

from __future__ import annotations

import uuid
from typing import Any, Iterator, Mapping, Optional

from pyspark.sql.datasource import WriterCommitMessage
from pyspark.sql.types import StructType

from kafka_eos_ds.errors import ConfigError
from kafka_eos_ds.options import Options
from kafka_eos_ds.sink.config import SinkConfig
from kafka_eos_ds.sink.driver import KafkaSinkDriver
from kafka_eos_ds.twophase.protocol import DoneMark
from kafka_eos_ds.twophase.spark import BatchWriterBase, StreamWriterBase


def _driver(schema: StructType, options: Mapping[str, Any]) -> KafkaSinkDriver:
    config = SinkConfig.from_options(options, schema)
    timeout_ms = Options(options).get_int("commitTimeoutMs", 120_000, minimum=1000) or 120_000
    return KafkaSinkDriver(config, timeout_ms / 1000)


class KafkaStreamWriter(StreamWriterBase):
    """``df.writeStream.format("kafka_eos")``: exactly-once Kafka sink for streaming queries.

    Each task writes its rows in a Kafka transaction and pre-commits it; the driver makes
    the commit decision durable in the commit-log topic, then commits every transaction
    of the batch. Options and columns: docs/sink.md.

    Examples
    --------
    >>> (df.selectExpr("key", "value").writeStream.format("kafka_eos")
    ...    .option("kafka.bootstrap.servers", "localhost:9092").option("topic", "out")
    ...    .option("transactionalIdPrefix", "orders-etl")
    ...    .option("checkpointLocation", "/ckpt/orders-etl").start())
    """

    def __init__(self, schema: StructType, options: Mapping[str, Any], overwrite: bool = False) -> None:
        self._driver = _driver(schema, options)

    def prepare_for_tasks(self) -> DoneMark:
        """Check the topic and recover; once per batch, on the planner, before its tasks."""
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


class KafkaBatchWriter(BatchWriterBase):
    """``df.write.format("kafka_eos")``: all task transactions commit at job commit.

    The job is batch 0 of the protocol under a fresh write id; options as for streaming.
    """

    def __init__(self, schema: StructType, options: Mapping[str, Any], overwrite: bool = False) -> None:
        if overwrite:
            # As the built-in sink: Kafka topics are appended to, never replaced.
            raise ConfigError("Save mode 'overwrite' is not supported by kafka_eos (a Kafka topic cannot be "
                              "replaced); use mode('append').")
        self._driver = _driver(schema, options)
        if self._driver.config.source_group_id is not None:
            raise ConfigError("Option 'sourceGroupId' applies to streaming queries (it commits each micro-batch's "
                              "source offsets); remove it for df.write.")
        self._write_id = f"write-{uuid.uuid4()}"

    def prepare_for_tasks(self) -> DoneMark:
        """Check the topic and recover; on the planner, before the job's tasks."""
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
