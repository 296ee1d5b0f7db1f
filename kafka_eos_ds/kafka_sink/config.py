"""The sink's options and input columns, checked once on the driver before any write.

Everything a task needs is in :class:`SinkConfig` (frozen, picklable). Every mistake is
a ConfigError naming the option or column and the fix, raised before a record is sent.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Mapping

from pyspark.sql.types import ArrayType, BinaryType, DataType, IntegerType, StringType, StructType

from kafka_eos_ds.errors import ConfigError
from kafka_eos_ds.kafka.kafka_python import to_kafka_python
from kafka_eos_ds.kafka.settings import check_settings
from kafka_eos_ds.kafka_sink import transactional_ids
from kafka_eos_ds.kafka_sink.decision_log import DEFAULT_TOPIC
from kafka_eos_ds.options import Options
from kafka_eos_ds.storage import SUPPORTED, StorageOptions, readable


class Guarantee(str, enum.Enum):
    """The sink option ``deliveryGuarantee``."""

    EXACTLY_ONCE = "exactly_once"
    AT_LEAST_ONCE = "at_least_once"


EXACTLY_ONCE = Guarantee.EXACTLY_ONCE
AT_LEAST_ONCE = Guarantee.AT_LEAST_ONCE
DEFAULT_TRANSACTION_TIMEOUT_MS = 900_000  # the broker's default transaction.max.timeout.ms

# Producer keys the connector sets itself, with the reason given to the user.
OWNED = {
    "transactional.id": "the sink names its transactions from 'transactionalIdPrefix'.",
    "enable.idempotence": "the sink always enables idempotence (transactions need it).",
    "key.serializer": "keys are written as the 'key' column's bytes (cast it to string or binary).",
    "value.serializer": "values are written as the 'value' column's bytes (cast it to string or binary).",
    "transactional.id.prefix": "use the sink option 'transactionalIdPrefix'.",
}

_COLUMN_TYPES = {
    "value": "string or binary",
    "key": "string or binary",
    "topic": "string",
    "partition": "int",
    "headers": "array<struct<key: string, value: binary>>",
}


@dataclass(frozen=True)
class Columns:
    """Positions of the sink's columns in the input (-1: absent)."""

    value: int
    key: int = -1
    topic: int = -1
    partition: int = -1
    headers: int = -1


# The least 'commitTimeoutMs' a sink accepts: every job's commit asks at least
# commit_time_needed_s of it before it decides (participants.KafkaTransactions.abandoned).
MIN_COMMIT_TIMEOUT_MS = 1000


@dataclass(frozen=True)
class SinkConfig:
    producer: Mapping[str, str]  # a ClientParams: printed without its secrets
    topic: str | None
    guarantee: Guarantee
    prefix: str | None
    commit_log_topic: str
    transaction_timeout_ms: int
    columns: Columns
    source_group_id: str | None = None
    checkpoint: str | None = None
    idempotent: bool = True
    storage: StorageOptions = StorageOptions()  # how to read the checkpoint (Hadoop's fs.* names)
    adopt_checkpoint: bool = False  # take over a checkpoint another sink committed batches in
    commit_timeout_s: float = 120.0  # how long a driver step retries what may pass (a coordinator moving)

    @property
    def exactly_once(self) -> bool:
        return self.guarantee == EXACTLY_ONCE

    @classmethod
    def from_options(cls, raw: Mapping[str, Any], schema: StructType) -> "SinkConfig":
        opts = Options(raw)
        producer = opts.kafka_params(OWNED)
        guarantee = Guarantee(opts.get_choice("deliveryGuarantee", [g.value for g in Guarantee], EXACTLY_ONCE.value))
        prefix = opts.get("transactionalIdPrefix")
        prefix = prefix.strip() if prefix and prefix.strip() else None
        if guarantee == EXACTLY_ONCE:
            if prefix is None:
                raise ConfigError(
                    "deliveryGuarantee 'exactly_once' requires the option 'transactionalIdPrefix': a name unique "
                    "to this query and stable across its restarts, e.g. .option('transactionalIdPrefix', "
                    "'orders-etl'). Or set .option('deliveryGuarantee', 'at_least_once').")
            transactional_ids.check_prefix(prefix)
            acks = {k.lower(): v for k, v in producer.items()}.get("acks")
            if acks is not None and acks.strip().lower() not in ("all", "-1"):
                raise ConfigError(f"Kafka option 'kafka.acks' must be 'all' for exactly_once (got {acks!r}); "
                                  "remove it or set deliveryGuarantee 'at_least_once'.")
        timeout = _transaction_timeout(producer)
        idempotent = guarantee == EXACTLY_ONCE or _idempotence_fits(producer)
        # Every kafka.* key and value checked by librdkafka itself, without connecting.
        check_settings({**producer, "enable.idempotence": idempotent, **(
            {"transactional.id": "kafka-eos-settings-check", "transaction.timeout.ms": timeout}
            if guarantee == EXACTLY_ONCE else {})}, "producer")
        if guarantee == EXACTLY_ONCE:
            to_kafka_python(producer)  # the coordinator client's settings: refused now, not at the first batch
        topic = opts.get("topic")
        topic = topic.strip() if topic and topic.strip() else None
        columns = check_columns(schema, topic)
        group = (opts.get("sourceGroupId") or "").strip() or None
        if group is not None and guarantee != EXACTLY_ONCE:
            raise ConfigError("Option 'sourceGroupId' commits the source's offsets inside the sink's transactions; "
                              "it needs deliveryGuarantee 'exactly_once'. Remove one of them.")
        adopt = opts.get_bool("adoptCheckpoint", False)
        if adopt and guarantee != EXACTLY_ONCE:
            raise ConfigError("Option 'adoptCheckpoint' moves a checkpoint to the exactly-once sink; it needs "
                              "deliveryGuarantee 'exactly_once'. Remove one of them.")
        checkpoint = opts.get("checkpointLocation")
        if group is not None and checkpoint is not None and not readable(checkpoint):
            raise ConfigError(f"Option 'sourceGroupId' reads each batch's end offsets from the checkpoint, but the "
                              f"checkpointLocation's scheme cannot be read from Python; the sink reads {SUPPORTED}. "
                              "Use one of those, or remove 'sourceGroupId'.")
        commit_timeout_ms = opts.get_int("commitTimeoutMs", 120_000, minimum=MIN_COMMIT_TIMEOUT_MS) or 120_000
        return cls(producer, topic, guarantee, prefix, (opts.get("commitLogTopic") or DEFAULT_TOPIC).strip(),
                   timeout, columns, group, checkpoint, idempotent, StorageOptions.from_options(raw), adopt,
                   commit_timeout_ms / 1000)


def _idempotence_fits(producer: Mapping[str, str]) -> bool:
    """Whether at_least_once can write idempotently with the user's settings. As the Java
    producer (3.0+): idempotent by default, not when acks is not all, retries is 0 or
    more than 5 requests may be in flight, which Spark's built-in sink accepts."""
    lower = {k.lower(): str(v).strip().lower() for k, v in producer.items()}
    acks = lower.get("acks", lower.get("request.required.acks", "all"))
    retries = lower.get("retries", lower.get("message.send.max.retries", "1"))
    in_flight = lower.get("max.in.flight.requests.per.connection", lower.get("max.in.flight", "5"))
    try:
        return acks in ("all", "-1") and int(retries) != 0 and int(in_flight) <= 5
    except ValueError:
        return True  # not a number: librdkafka's check names the option


def _transaction_timeout(producer: dict[str, Any]) -> int:
    for key in list(producer):
        if key.lower() == "transaction.timeout.ms":
            value = producer.pop(key)
            try:
                ms = int(str(value).strip())
            except ValueError:
                ms = 0
            if ms <= 0:
                raise ConfigError(f"Kafka option 'kafka.transaction.timeout.ms' must be a positive number of "
                                  f"milliseconds, got {value!r}.")
            return ms
    return DEFAULT_TRANSACTION_TIMEOUT_MS


def _is(dtype: DataType, *kinds: type) -> bool:
    return isinstance(dtype, kinds)


def _headers_ok(dtype: DataType) -> bool:
    if not isinstance(dtype, ArrayType) or not isinstance(dtype.elementType, StructType):
        return False
    fields = {f.name: f.dataType for f in dtype.elementType.fields}
    return (set(fields) == {"key", "value"} and isinstance(fields["key"], StringType)
            and isinstance(fields["value"], BinaryType))


def check_columns(schema: StructType, topic_option: str | None) -> Columns:
    """Positions of value/key/topic/partition/headers; ConfigError naming a wrong one."""
    index = {f.name.lower(): i for i, f in enumerate(schema.fields)}
    types = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in index:
        raise ConfigError(
            f"The sink needs a 'value' column (string or binary); the input has {schema.fieldNames()}. "
            "Add one, e.g. df.selectExpr('CAST(x AS STRING) AS value').")
    checks = {
        "value": lambda t: _is(t, StringType, BinaryType),
        "key": lambda t: _is(t, StringType, BinaryType),
        "topic": lambda t: _is(t, StringType),
        "partition": lambda t: _is(t, IntegerType),
        "headers": _headers_ok,
    }
    for name, ok in checks.items():
        if name in types and not ok(types[name]):
            raise ConfigError(
                f"Column '{name}' must be {_COLUMN_TYPES[name]}, got {types[name].simpleString()}. "
                f"Cast it, e.g. selectExpr('CAST({name} AS {_cast_hint(name)}) AS {name}').")
    if topic_option is None and "topic" not in index:
        raise ConfigError("No topic to write to: set the option 'topic' or add a string column 'topic'.")
    return Columns(index["value"], index.get("key", -1), index.get("topic", -1), index.get("partition", -1),
                   index.get("headers", -1))


def _cast_hint(name: str) -> str:
    return {"partition": "INT", "topic": "STRING", "headers": "ARRAY<STRUCT<key: STRING, value: BINARY>>"}.get(
        name, "STRING")
