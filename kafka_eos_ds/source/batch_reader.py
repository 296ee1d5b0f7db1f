"""The batch reader: ``spark.read.format("kafka_eos")`` over ``[startingOffsets, endingOffsets)``."""

from __future__ import annotations

from typing import Any, Iterator, Sequence

from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from kafka_eos_ds.source.metadata import KafkaMetadata
from kafka_eos_ds.source.options import SourceOptions
from kafka_eos_ds.source.planning import check_batch_bounds, input_partitions
from kafka_eos_ds.source.positions import resolve
from kafka_eos_ds.source.reading import read_partition
from kafka_eos_ds.source.schema import check_schema


class KafkaBatchReader(DataSourceReader):
    """Batch reads of Kafka topics, drop-in for Spark's built-in ``spark.read.format("kafka")``.

    Takes the streaming reader's options (see :class:`KafkaStreamReader`) except the
    per-trigger ones, plus the range's end:

    Options
    -------
    startingOffsets : str
        ``earliest`` (default), ``group`` or JSON offsets (-2 = earliest). ``latest`` is refused.
    endingOffsets : str
        ``latest`` (default) or JSON offsets (-1 = latest). Under ``read_committed`` latest is
        the last stable offset.
    endingTimestamp, endingOffsetsByTimestamp
        End by record timestamp (epoch ms); partitions without a record that late end at latest.

    Examples
    --------
    >>> n = (spark.read.format("kafka_eos")
    ...      .option("kafka.bootstrap.servers", "localhost:9092")
    ...      .option("subscribe", "orders").load().count())
    """

    def __init__(self, schema: StructType, options: dict[str, str]) -> None:
        self.options = SourceOptions.from_spark(options, streaming=False)
        check_schema(schema, self.options.include_headers)

    def partitions(self) -> Sequence[InputPartition]:
        metadata = KafkaMetadata(self.options)
        try:
            parts = metadata.partitions()
            start = resolve(self.options.starting, parts, metadata, "startingOffsets")
            end = resolve(self.options.ending, parts, metadata, "endingOffsets")
            earliest = metadata.earliest(parts)
        finally:
            metadata.close()
        check_batch_bounds(start, end, self.options.starting, self.options.ending)
        return input_partitions(self.options, start, end, earliest)

    def read(self, partition: InputPartition) -> Iterator[Any]:  # type: ignore[override]
        return read_partition(partition)  # type: ignore[arg-type]
