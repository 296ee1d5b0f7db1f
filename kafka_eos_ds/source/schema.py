"""The rows the source produces: the built-in Kafka source's schema, in Spark and in Arrow.

``key, value, topic, partition, offset, timestamp, timestampType`` and, with
``includeHeaders``, ``headers array<struct<key: string, value: binary>>`` — every field
nullable, exactly as Spark's built-in source declares them. pyspark 4.3 compares the
Arrow schema of each yielded batch with the one it derives from this StructType
(timestamps as microseconds in UTC, nullability included), so the Arrow schema is derived
from the same StructType with pyspark's own converter rather than written by hand.
"""

from __future__ import annotations

import inspect
from functools import lru_cache
from typing import Any, Mapping

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from kafka_eos_ds.errors import ConfigError
from kafka_eos_ds.options import Options

HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))


def kafka_schema(include_headers: bool) -> StructType:
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


def source_schema(options: Mapping[str, Any]) -> StructType:
    """The schema for these options (only ``includeHeaders`` matters)."""
    return kafka_schema(Options(options).get_bool("includeHeaders", False))


def check_schema(given: StructType, include_headers: bool) -> None:
    """Refuse a user-specified schema: the Kafka source's schema is fixed."""
    expected = kafka_schema(include_headers)
    if given is not None and given != expected:
        raise ConfigError(
            "The kafka_eos source has a fixed schema and cannot be given another one; remove "
            f".schema(...) (expected {expected.simpleString()}, got {given.simpleString()})."
        )


@lru_cache(maxsize=2)
def arrow_schema(include_headers: bool) -> Any:
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = kafka_schema(include_headers)
    if "timezone" in inspect.signature(to_arrow_schema).parameters:  # pyspark >= 4.1
        return to_arrow_schema(schema, timezone="UTC")
    # pyspark 4.0 names the same choice differently (UTC-adjusted timestamps).
    return to_arrow_schema(schema, timestamp_utc=True)  # type: ignore[call-arg]
