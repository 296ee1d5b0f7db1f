"""Reading Kafka: offsets -> planning -> reading (executor) -> lag commit.

``options`` (SourceOptions, validated once) -> ``metadata``/``positions`` (driver asks Kafka
for partitions and offsets) -> ``offsets`` (canonical JSON for Spark's offset log) ->
``planning`` (``[from, until)`` ranges -> input partitions) -> ``reading`` (executor:
range -> Arrow batches) -> ``group_commit`` (consumed offsets -> consumer group).
"""

from __future__ import annotations

from kafka_eos_ds.source.batch_reader import KafkaBatchReader
from kafka_eos_ds.source.schema import source_schema
from kafka_eos_ds.source.stream_reader import KafkaStreamReader

__all__ = ["source_schema", "KafkaStreamReader", "KafkaBatchReader"]
