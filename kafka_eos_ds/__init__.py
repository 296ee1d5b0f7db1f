"""kafka_eos: exactly-once Kafka -> Spark -> Kafka on Spark's Python Data Source API.

After ``pip install kafka-eos-ds`` Spark discovers the source by itself
(``format("kafka_eos")``); :func:`register` does it explicitly, e.g. for a session
whose Python path does not hold the installed package's shim.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kafka_eos_ds.errors import (
    BrokerError,
    ConfigError,
    DataLossError,
    KafkaClientError,
    KafkaEosError,
    TransactionError,
    TransactionFencedError,
    TransactionLostError,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__version__ = "0.1.0"

FORMAT = "kafka_eos"


def register(spark: "SparkSession") -> None:
    """Register ``format("kafka_eos")`` and ``format("kafka_eos_file")`` (the exactly-once
    file sink) with this Spark session."""
    from kafka_eos_ds.datasource import KafkaEosDataSource
    from kafka_eos_ds.filesink.datasource import KafkaEosFileDataSource

    spark.dataSource.register(KafkaEosDataSource)
    spark.dataSource.register(KafkaEosFileDataSource)


__all__ = [
    "FORMAT",
    "register",
    "__version__",
    "KafkaEosError",
    "ConfigError",
    "BrokerError",
    "KafkaClientError",
    "TransactionError",
    "TransactionFencedError",
    "TransactionLostError",
    "DataLossError",
]
