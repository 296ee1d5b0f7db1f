"""The ``kafka_eos`` data source: wiring only.

Reading is in :mod:`kafka_eos_ds.source`, writing in :mod:`kafka_eos_ds.kafka_sink`; this
class only hands Spark's options to them. Options are checked when Spark asks for a
reader or writer, on the driver, before any task runs.
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from kafka_eos_ds.twophase.writers import SinkDataSource


class KafkaEosDataSource(SinkDataSource):
    """Exactly-once Kafka source and sink for Spark (drop-in for ``format("kafka")``).

    Options
    -------
    Source and sink take the option names of Spark's built-in Kafka connector
    (``kafka.bootstrap.servers``, ``subscribe``, ``startingOffsets``, ``topic``, ...)
    plus ``transactionalIdPrefix`` and ``deliveryGuarantee`` for the sink.
    See ``docs/source.md`` and ``docs/sink.md`` for the full tables.

    Examples
    --------
    >>> df = (spark.readStream.format("kafka_eos")
    ...       .option("kafka.bootstrap.servers", "localhost:9092")
    ...       .option("subscribe", "in").load())
    >>> q = (df.writeStream.format("kafka_eos")
    ...      .option("kafka.bootstrap.servers", "localhost:9092")
    ...      .option("topic", "out")
    ...      .option("transactionalIdPrefix", "orders-etl")
    ...      .option("checkpointLocation", "/tmp/ckpt").start())

    A test hands the sink its own ``runtime`` (:mod:`kafka_eos_ds.kafka_sink.runtime`).
    """

    @classmethod
    def name(cls) -> str:
        return "kafka_eos"

    def schema(self) -> StructType:
        from kafka_eos_ds.source import source_schema

        return source_schema(self.options)

    def reader(self, schema: StructType) -> DataSourceReader:
        from kafka_eos_ds.source import KafkaBatchReader

        return KafkaBatchReader(schema, dict(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from kafka_eos_ds.source import KafkaStreamReader

        return KafkaStreamReader(schema, dict(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from kafka_eos_ds.kafka_sink import batch_writer

        return batch_writer(schema, self.options, overwrite, **self.runtime_kwargs())

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from kafka_eos_ds.kafka_sink import stream_writer

        return stream_writer(schema, self.options, **self.runtime_kwargs())
