"""kafka_eos: exactly-once Kafka -> Spark -> Kafka on Spark's Python Data Source API.

After ``pip install kafka-eos-ds`` Spark discovers the source by itself
(``format("kafka_eos")``); :func:`register` does it explicitly, e.g. for a session
whose Python path does not hold the installed package's shim.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from kafka_eos_ds.errors import (
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

LOG_LEVEL_VARIABLE = "KAFKA_EOS_LOG_LEVEL"


def _log_level_from_environment() -> None:
    """``KAFKA_EOS_LOG_LEVEL=DEBUG`` (or INFO, ...): the package's log records at that level
    to standard error, with time and process. Set where the driver starts: the sink's
    commit runs in a Python worker Spark starts, which inherits the variable but no logging
    set up by the application (docs/troubleshooting.md, "Seeing what the sink does")."""
    level = os.environ.get(LOG_LEVEL_VARIABLE, "").strip().upper()
    if not level:
        return
    package = logging.getLogger(__name__)
    if not isinstance(logging.getLevelName(level), int):
        package.warning("%s=%r is not a logging level (DEBUG, INFO, WARNING, ERROR): ignored",
                        LOG_LEVEL_VARIABLE, level)
        return
    package.setLevel(level)
    if not package.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s pid %(process)d %(name)s %(levelname)s %(message)s"))
        package.addHandler(handler)


_log_level_from_environment()

FORMAT = "kafka_eos"


def register(spark: "SparkSession") -> None:
    """Register ``format("kafka_eos")`` and ``format("kafka_eos_file")`` (the exactly-once
    file sink) with this Spark session."""
    from kafka_eos_ds.datasource import KafkaEosDataSource
    from kafka_eos_ds.table_sink.datasource import KafkaEosFileDataSource

    for source in (KafkaEosDataSource, KafkaEosFileDataSource):
        try:
            spark.dataSource.register(source)
        except Exception as exc:
            # pyspark 4.0 and 4.1 refuse to re-register a name Spark already discovered
            # from the installed pyspark_* shim (later lines replace it): the format is
            # known to this session either way.
            if _error_condition(exc) != "DATA_SOURCE_ALREADY_EXISTS":
                raise


def _error_condition(exc: Exception) -> str | None:
    for getter in ("getCondition", "getErrorClass"):  # getErrorClass before pyspark 4.0's rename
        if hasattr(exc, getter):
            condition = getattr(exc, getter)()
            return str(condition) if condition is not None else None
    return None


__all__ = [
    "FORMAT",
    "register",
    "__version__",
    "KafkaEosError",
    "ConfigError",
    "KafkaClientError",
    "TransactionError",
    "TransactionFencedError",
    "TransactionLostError",
    "DataLossError",
]
