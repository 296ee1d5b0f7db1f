"""Source options: built once from Spark's option map, checked all at once, then frozen.

Option names and meanings follow Spark's built-in Kafka source so that moving from
``format("kafka")`` to ``format("kafka_eos")`` changes nothing else; what differs is listed
in ``docs/source.md``. Every mistake is a :class:`~kafka_eos_ds.errors.ConfigError` naming
the option and the fix, raised on the driver before any task runs.
"""

from __future__ import annotations

import enum
import hashlib
import logging
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from kafka_eos_ds.errors import ConfigError
from kafka_eos_ds.kafka.settings import ClientParams, check_settings
from kafka_eos_ds.options import Options
from kafka_eos_ds.source import offsets as offsets_json
from kafka_eos_ds.source.offsets import Offsets
from kafka_eos_ds.storage import StorageOptions

# Client keys the source sets itself; the value is the reason given to the user.
OWNED_KAFKA_KEYS = {
    "auto.offset.reset": "the source sets it. Use the source option 'startingOffsets' "
                         "('earliest', 'latest', 'group' or JSON) instead.",
    "enable.auto.commit": "the Spark checkpoint tracks offsets; the source commits the consumed "
                          "offsets to the consumer group itself (option 'commitOffsetsToGroup').",
    "enable.auto.offset.store": "the source tracks offsets itself.",
    "enable.partition.eof": "the source needs partition EOF events to end a range.",
    "key.deserializer": "keys are always returned as binary; cast or parse them with DataFrame operations.",
    "value.deserializer": "values are always returned as binary; cast or parse them with DataFrame operations.",
    "interceptor.classes": "records must reach Spark unchanged.",
    "group.instance.id": "the source never joins its consumer group; static membership does not apply.",
}

log = logging.getLogger(__name__)

# Options only a streaming read uses; a batch read ignores them with a warning, as the
# built-in source does.
STREAMING_ONLY = ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay")

DEFAULT_GROUP_ID_PREFIX = "kafka-eos-source"
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000
_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|min|h|d)?\s*$", re.IGNORECASE)
_UNIT_MS = {None: 1, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


class SubscriptionKind(str, enum.Enum):
    """How the topics are named; the value is the option that names them."""

    SUBSCRIBE = "subscribe"
    PATTERN = "subscribePattern"
    ASSIGN = "assign"


class PartitionPlan(str, enum.Enum):
    """How a batch's offset ranges become Spark input partitions (option 'partitionPlan')."""

    GROUPED = "grouped"                        # ranges packed into about targetPartitions tasks
    PER_KAFKA_PARTITION = "perKafkaPartition"  # the built-in's plan: one task per range


class Position(str, enum.Enum):
    """Where a range starts or ends."""

    EARLIEST = "earliest"
    LATEST = "latest"
    GROUP = "group"            # the consumer group's committed offsets
    OFFSETS = "offsets"        # explicit offsets per partition (may hold -2/-1)
    TIMESTAMP = "timestamp"    # one epoch-ms for every partition
    TIMESTAMPS = "timestamps"  # epoch-ms per partition
    TABLE = "table"            # where a kafka_eos_file table ends (startingOffsetsFromTable)


@dataclass(frozen=True)
class Subscription:
    """What to read: a topic list, a topic regex, or fixed topic-partitions."""

    kind: SubscriptionKind
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[tuple[str, int], ...] = ()

    def describe(self) -> str:
        if self.kind is SubscriptionKind.SUBSCRIBE:
            return "subscribe=" + ",".join(sorted(self.topics))
        if self.kind is SubscriptionKind.PATTERN:
            return f"subscribePattern={self.pattern}"
        return "assign=" + offsets_json.dumps({tp: 0 for tp in self.assigned})


@dataclass(frozen=True)
class OffsetSpec:
    """Where a range starts or ends: a named position, explicit offsets, or timestamps."""

    kind: Position
    offsets: Offsets = field(default_factory=dict)  # OFFSETS (may hold -2/-1) or TIMESTAMPS
    timestamp: int | None = None  # TIMESTAMP: one epoch-ms for every partition
    # What to do when no record has a timestamp >= the one asked for: "error" or "latest".
    strategy: str = "error"
    table: str | None = None  # TABLE: the table's path
    storage: StorageOptions | None = None  # TABLE: how to reach its store (repr without secrets)


@dataclass(frozen=True)
class SourceOptions:
    """Every source setting, validated. Picklable; executors get the parts they need."""

    client_conf: dict[str, str]  # a ClientParams: printed without its secrets
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    group_id: str
    commit_offsets_to_group: bool = True
    fail_on_data_loss: bool = True
    include_headers: bool = False
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    partition_plan: PartitionPlan = PartitionPlan.GROUPED
    target_partitions: int | None = None  # None: the cores the driver-side reader sees
    target_records_per_partition: int | None = None
    poll_timeout_ms: int = 120_000
    arrow_batch_records: int = 10_000

    @property
    def read_committed(self) -> bool:
        return self.client_conf.get("isolation.level", "read_committed") == "read_committed"

    @classmethod
    def from_spark(cls, raw: Mapping[str, Any], *, streaming: bool) -> "SourceOptions":
        opts = Options(raw)
        client_conf = _client_conf(opts)
        subscription = _subscription(opts)
        starting = _starting(opts, streaming, raw)
        ending = _ending(opts, streaming)
        if not streaming:
            for name in STREAMING_ONLY:
                if name in opts:
                    log.warning("Option '%s' applies to streaming reads only; this batch read ignores it.", name)
            opts = Options({k: v for k, v in raw.items() if str(k).lower() not in
                            {n.lower() for n in STREAMING_ONLY}})
        max_per = opts.get_int("maxOffsetsPerTrigger", minimum=1)
        min_per = opts.get_int("minOffsetsPerTrigger", minimum=1)
        delay = _duration_ms(opts, "maxTriggerDelay", DEFAULT_MAX_TRIGGER_DELAY_MS)
        if max_per is not None and min_per is not None and min_per > max_per:
            raise ConfigError(f"Option 'minOffsetsPerTrigger' ({min_per}) must not exceed "
                              f"'maxOffsetsPerTrigger' ({max_per}).")
        named_group = client_conf.pop("group.id", None)
        group_id = named_group or _derived_group_id(opts, subscription)
        return cls(
            client_conf=client_conf,
            subscription=subscription,
            starting=starting,
            ending=ending,
            group_id=group_id,
            # A group the user named (kafka.group.id) is theirs: its offsets move only when asked.
            commit_offsets_to_group=opts.get_bool("commitOffsetsToGroup", named_group is None),
            fail_on_data_loss=opts.get_bool("failOnDataLoss", True),
            include_headers=opts.get_bool("includeHeaders", False),
            max_offsets_per_trigger=max_per,
            min_offsets_per_trigger=min_per,
            max_trigger_delay_ms=delay,
            min_partitions=opts.get_int("minPartitions", minimum=1),
            max_records_per_partition=opts.get_int("maxRecordsPerPartition", minimum=1),
            **_partition_plan(opts),
            poll_timeout_ms=opts.get_int("kafkaConsumer.pollTimeoutMs", 120_000, minimum=1) or 120_000,
            arrow_batch_records=opts.get_int("arrowBatchRecords", 10_000, minimum=1) or 10_000,
        )


def _partition_plan(opts: Options) -> dict[str, Any]:
    """'partitionPlan', 'targetPartitions', 'targetRecordsPerPartition' (docs/source.md,
    "How to size the plan"): one way to size a grouped plan, none for the built-in's."""
    sizing = [name for name in ("targetPartitions", "targetRecordsPerPartition") if name in opts]
    # Grouped by default: one task per Kafka partition costs every task a worker hand-over
    # and a transaction, measured slower at every partition count tried (docs/dev/decisions.md,
    # "The source plans by work"); the built-in's plan stays one option away.
    chosen = (opts.get("partitionPlan") or PartitionPlan.GROUPED.value).strip()
    plan = next((p for p in PartitionPlan if p.value.lower() == chosen.lower()), None)
    if plan is None:
        raise ConfigError(f"Option 'partitionPlan' must be '{PartitionPlan.GROUPED.value}' (Kafka partitions packed "
                          f"into about 'targetPartitions' tasks) or '{PartitionPlan.PER_KAFKA_PARTITION.value}' (one "
                          f"task per Kafka partition, as the built-in); got {chosen!r}.")
    target = opts.get_int("targetPartitions", minimum=1)
    per_task = opts.get_int("targetRecordsPerPartition", minimum=1)
    if plan is PartitionPlan.PER_KAFKA_PARTITION and sizing:
        raise ConfigError(f"Option '{sizing[0]}' sizes a grouped plan, but 'partitionPlan' is "
                          f"'{PartitionPlan.PER_KAFKA_PARTITION.value}' (one task per Kafka partition): remove one "
                          "of them.")
    if len(sizing) > 1:
        raise ConfigError("Options 'targetPartitions' and 'targetRecordsPerPartition' both size the plan (a task "
                          "count, or offsets per task): keep one of them.")
    return {"partition_plan": plan, "target_partitions": target, "target_records_per_partition": per_task}


def _client_conf(opts: Options) -> dict[str, str]:
    conf = opts.kafka_params(owned=OWNED_KAFKA_KEYS)
    conf = {(k.lower() if k.lower() in ("group.id", "isolation.level", "bootstrap.servers") else k): v
            for k, v in conf.items()}
    isolation = conf.get("isolation.level", "read_committed").strip().lower()
    if isolation not in ("read_committed", "read_uncommitted"):
        raise ConfigError(f"Option 'kafka.isolation.level' must be read_committed or read_uncommitted; "
                          f"got {isolation!r}.")
    conf["isolation.level"] = isolation
    check_settings(conf, "consumer")
    return ClientParams(conf)


def _subscription(opts: Options) -> Subscription:
    given = [kind for kind in SubscriptionKind if kind.value in opts]
    if len(given) != 1:
        what = "none" if not given else ", ".join(kind.value for kind in given)
        raise ConfigError("Exactly one of the options 'subscribe', 'subscribePattern', 'assign' must be "
                          f"set (got {what}): e.g. .option('subscribe', 'topicA,topicB').")
    kind = given[0]
    value = (opts.get(kind.value) or "").strip()
    if kind is SubscriptionKind.SUBSCRIBE:
        topics = tuple(sorted({t.strip() for t in value.split(",") if t.strip()}))
        if not topics:
            raise ConfigError("Option 'subscribe' must list at least one topic, e.g. 'topicA,topicB'.")
        return Subscription(kind, topics=topics)
    if kind is SubscriptionKind.PATTERN:
        if not value:
            raise ConfigError("Option 'subscribePattern' must be a non-empty Java/Python regex, e.g. 'orders-.*'.")
        try:
            re.compile(value)
        except re.error as exc:
            raise ConfigError(f"Option 'subscribePattern' is not a valid regex ({exc}): {value!r}.") from None
        return Subscription(kind, pattern=value)
    parsed = _parse_assign(value)
    return Subscription(kind, assigned=tuple(sorted(parsed)))


def _parse_assign(value: str) -> dict[tuple[str, int], int]:
    import json

    example = '{"topicA": [0, 1], "topicB": [2, 4]}'
    try:
        data = json.loads(value)
        if not isinstance(data, dict) or not all(isinstance(parts, list) for parts in data.values()):
            raise ValueError("not an object of lists")
        out = {(str(t), int(p)): 0 for t, parts in data.items() for p in parts}
    except (ValueError, TypeError):
        raise ConfigError(f"Option 'assign' must be JSON like {example}; got {value!r}.") from None
    if not out:
        raise ConfigError(f"Option 'assign' must name at least one partition, e.g. {example}.")
    return out


def _strategy(opts: Options) -> str:
    return opts.get_choice("startingOffsetsByTimestampStrategy", ("error", "latest"), "error")


def _starting(opts: Options, streaming: bool, raw: Mapping[str, Any]) -> OffsetSpec:
    if "startingOffsetsFromTable" in opts:
        table = opts.require("startingOffsetsFromTable", "Name the path of the kafka_eos_file table to resume.")
        given = [n for n in ("startingOffsets", "startingTimestamp", "startingOffsetsByTimestamp") if n in opts]
        if given:
            raise ConfigError(f"Option 'startingOffsetsFromTable' and '{given[0]}' both say where to start; "
                              "keep one of them.")
        return OffsetSpec(Position.TABLE, table=table, storage=StorageOptions.from_options(raw))
    # Same precedence as Spark's built-in source: global timestamp, per-partition
    # timestamps, then offsets.
    if "startingTimestamp" in opts:
        stamp = opts.get_int("startingTimestamp", minimum=0)
        return OffsetSpec(Position.TIMESTAMP, timestamp=stamp, strategy=_strategy(opts))
    if "startingOffsetsByTimestamp" in opts:
        stamps = offsets_json.parse_timestamps("startingOffsetsByTimestamp",
                                               opts.get("startingOffsetsByTimestamp") or "")
        return OffsetSpec(Position.TIMESTAMPS, offsets=stamps, strategy=_strategy(opts))
    default = "latest" if streaming else "earliest"
    text = (opts.get("startingOffsets") or default).strip()
    lowered = text.lower()
    if lowered in ("earliest", "latest", "group"):
        if lowered == "latest" and not streaming:
            raise ConfigError("Option 'startingOffsets' cannot be 'latest' for a batch read (it would read "
                              "nothing); use 'earliest', 'group' or JSON offsets.")
        return OffsetSpec(Position(lowered))
    offsets = offsets_json.parse_option("startingOffsets", text, allow_latest=streaming)
    return OffsetSpec(Position.OFFSETS, offsets=offsets)


def _ending(opts: Options, streaming: bool) -> OffsetSpec:
    names = ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp")
    if streaming:
        for name in names:
            if name in opts:
                raise ConfigError(f"Option '{name}' is for batch reads (spark.read) only; a streaming "
                                  "query reads until it is stopped (use Trigger.AvailableNow to stop at "
                                  "the offsets available at start).")
        return OffsetSpec(Position.LATEST)
    if "endingTimestamp" in opts:
        return OffsetSpec(Position.TIMESTAMP, timestamp=opts.get_int("endingTimestamp", minimum=0), strategy="latest")
    if "endingOffsetsByTimestamp" in opts:
        stamps = offsets_json.parse_timestamps("endingOffsetsByTimestamp", opts.get("endingOffsetsByTimestamp") or "")
        return OffsetSpec(Position.TIMESTAMPS, offsets=stamps, strategy="latest")
    text = (opts.get("endingOffsets") or "latest").strip()
    if text.lower() == "latest":
        return OffsetSpec(Position.LATEST)
    if text.lower() in ("earliest", "group"):
        raise ConfigError(f"Option 'endingOffsets' cannot be {text!r}; use 'latest' or JSON offsets.")
    return OffsetSpec(Position.OFFSETS, offsets=offsets_json.parse_option("endingOffsets", text, allow_earliest=False))


def _duration_ms(opts: Options, name: str, default: int) -> int:
    text = opts.get(name)
    if text is None:
        return default
    match = _DURATION.match(text)
    if not match:
        raise ConfigError(f"Option '{name}' must be a duration like '30s', '15m', '1h' or milliseconds; "
                          f"got {text!r}.")
    return int(match.group(1)) * _UNIT_MS[(match.group(2) or "").lower() or None]


def _derived_group_id(opts: Options, subscription: Subscription) -> str:
    # Stable across restarts (so lag tools follow one group), distinct per subscription.
    prefix = (opts.get("groupIdPrefix") or DEFAULT_GROUP_ID_PREFIX).strip()
    if not prefix:
        raise ConfigError("Option 'groupIdPrefix' must not be empty.")
    digest = hashlib.sha256(subscription.describe().encode()).hexdigest()[:12]
    return f"{prefix}-{digest}"


def admission_control_available() -> bool:
    """Whether this pyspark passes read limits to Python sources (4.2 and later).

    Older lines call ``latestOffset()`` with no start and no limit; the stream reader then
    applies ``maxOffsetsPerTrigger``/``minOffsetsPerTrigger`` itself (docs/source.md)."""
    try:
        from pyspark.sql.streaming.datasource import ReadMaxRows, ReadMinRows  # noqa: F401
    except ImportError:
        return False
    return True
