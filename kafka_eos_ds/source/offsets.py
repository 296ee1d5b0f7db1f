"""Kafka offsets as Spark sees them: canonical JSON ``{"topic": {"partition": offset}}``.

Spark stores a source's offsets in its checkpoint as JSON text and decides whether a new
micro-batch exists by comparing the text of the latest offset with the text of the last
one. Two equal offsets written with a different key order look different and produce an
empty batch on every trigger, so every offset this source hands to Spark goes through
:func:`to_json`, which orders topics by name and partitions by number and uses string
keys and plain ints only.

Inside the source, offsets are ``dict[(topic, partition), offset]`` (:data:`Offsets`).
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from kafka_eos_ds.errors import ConfigError

TopicPartitionKey = tuple[str, int]
Offsets = dict[TopicPartitionKey, int]

# Sentinels in startingOffsets / endingOffsets JSON, as in Spark's built-in source.
EARLIEST = -2
LATEST = -1


def to_json(offsets: Mapping[TopicPartitionKey, int]) -> dict[str, dict[str, int]]:
    """The canonical JSON-ready dict for Spark: sorted topics, partitions by number."""
    out: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(offsets):
        out.setdefault(topic, {})[str(partition)] = int(offsets[(topic, partition)])
    return out


def from_json(data: Any) -> Offsets:
    """Read offsets back from Spark (a dict, or its JSON text)."""
    if isinstance(data, str):
        data = json.loads(data)
    if not isinstance(data, Mapping):
        raise ValueError(f"Kafka offsets must be a JSON object, got {type(data).__name__}")
    out: Offsets = {}
    for topic, partitions in data.items():
        if not isinstance(partitions, Mapping):
            raise ValueError(f"offsets of topic {topic!r} must be an object of partition -> offset")
        for partition, offset in partitions.items():
            out[(str(topic), int(partition))] = int(offset)
    return out


def dumps(offsets: Mapping[TopicPartitionKey, int]) -> str:
    """Canonical JSON text (what Spark writes to the offset log)."""
    return json.dumps(to_json(offsets))


def parse_option(name: str, text: str, *, allow_earliest: bool = True, allow_latest: bool = True) -> Offsets:
    """Parse a per-partition JSON option (``startingOffsets``, ``endingOffsets``).

    ``-2`` means earliest and ``-1`` latest, as in Spark's built-in source; where one of
    them makes no sense (latest as a batch start, earliest as a batch end) it is refused.
    """
    example = '{"topicA": {"0": 23, "1": -2}, "topicB": {"0": -1}}'
    try:
        data = json.loads(text)
        offsets = from_json(data)
    except (ValueError, TypeError) as exc:
        raise ConfigError(
            f"Option '{name}' must be 'earliest', 'latest' or JSON like {example}; got {text!r} ({exc})."
        ) from None
    for (topic, partition), offset in offsets.items():
        if offset < EARLIEST:
            raise ConfigError(f"Option '{name}': offset {offset} for {topic}-{partition} is invalid; "
                              "use an offset >= 0, -2 (earliest) or -1 (latest).")
        if offset == EARLIEST and not allow_earliest:
            raise ConfigError(f"Option '{name}': -2 (earliest) is not allowed here ({topic}-{partition}).")
        if offset == LATEST and not allow_latest:
            raise ConfigError(f"Option '{name}': -1 (latest) is not allowed here ({topic}-{partition}).")
    return offsets


def parse_timestamps(name: str, text: str) -> dict[TopicPartitionKey, int]:
    """Parse ``{"topic": {"partition": epoch_millis}}`` (startingOffsetsByTimestamp etc.)."""
    example = '{"topicA": {"0": 1700000000000}}'
    try:
        stamps = from_json(json.loads(text))
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"Option '{name}' must be JSON like {example}; got {text!r} ({exc}).") from None
    for (topic, partition), stamp in stamps.items():
        if stamp < 0:
            raise ConfigError(f"Option '{name}': timestamp {stamp} for {topic}-{partition} must be >= 0 (ms).")
    return stamps
