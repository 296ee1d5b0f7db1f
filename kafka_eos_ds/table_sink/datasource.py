"""The ``kafka_eos_file`` data source: an exactly-once file sink (write only)."""

from __future__ import annotations

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter
from pyspark.sql.types import StructType

from kafka_eos_ds.twophase.writers import SinkDataSource


class KafkaEosFileDataSource(SinkDataSource):
    """Exactly-once Parquet / JSON-lines files from Spark, on the project's two-phase commit.

    Options
    -------
    path : str
        Output directory: a local path or a ``file:`` URI (required).
    fileFormat : {"parquet", "jsonl"}
        File format (default parquet).
    commitTimeoutMs : int
        How long the driver retries a commit before failing the batch (default 120000).

    Examples
    --------
    >>> q = (df.writeStream.format("kafka_eos_file").option("path", "/data/out")
    ...      .option("checkpointLocation", "/ckpt/out").start())
    >>> df.write.format("kafka_eos_file").mode("append").save("/data/out")

    A test hands the sink its own ``runtime`` (:mod:`kafka_eos_ds.table_sink.runtime`).
    """

    @classmethod
    def name(cls) -> str:
        return "kafka_eos_file"

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from kafka_eos_ds.table_sink.sink import batch_writer

        return batch_writer(schema, self.options, overwrite, **self.runtime_kwargs())

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from kafka_eos_ds.table_sink.sink import stream_writer

        return stream_writer(schema, self.options, **self.runtime_kwargs())
