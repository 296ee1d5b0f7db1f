"""Auto-registration shim for ``format("kafka_eos_file")`` (the exactly-once file sink):
Spark registers top-level ``pyspark_*`` modules that define ``DefaultSource``.
"""

from kafka_eos_ds.table_sink.datasource import KafkaEosFileDataSource as DefaultSource

__all__ = ["DefaultSource"]
