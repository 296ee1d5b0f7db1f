"""Starting/ending positions (``OffsetSpec``) -> concrete offsets for the current partitions.

Runs on the driver. Follows Spark's built-in source: explicit JSON offsets and
per-partition timestamps must name exactly the partitions the subscription covers; ``-2``
and ``-1`` mean earliest and latest; a timestamp resolves to the first offset whose
record timestamp is >= it. Beyond the built-in, ``group`` starts from the source's
consumer group's committed offsets and, per partition without one, at the earliest offset;
``startingOffsetsFromTable`` starts where a kafka_eos_file table ends (the end offsets its
streams' decisions recorded), per partition it never read at the earliest offset.
"""

from __future__ import annotations

from typing import Any, Iterable

from kafka_eos_ds.errors import ConfigError
from kafka_eos_ds.source.metadata import KafkaMetadata
from kafka_eos_ds.source.offsets import EARLIEST, LATEST, Offsets, TopicPartitionKey
from kafka_eos_ds.source.options import OffsetSpec, Position


def resolve(spec: OffsetSpec, partitions: Iterable[TopicPartitionKey], metadata: KafkaMetadata,
            option: str) -> Offsets:
    """Offsets for ``partitions`` as ``spec`` (from option ``option``) says."""
    tps = set(partitions)
    if spec.kind is Position.EARLIEST:
        return metadata.earliest(tps)
    if spec.kind is Position.LATEST:
        return metadata.latest(tps)
    if spec.kind is Position.GROUP:
        committed = metadata.committed(tps)
        missing = {tp for tp, off in committed.items() if off is None} | (tps - set(committed))
        earliest = metadata.earliest(missing)
        return {tp: (c if (c := committed.get(tp)) is not None else earliest[tp]) for tp in tps}
    if spec.kind is Position.TABLE:
        # Where the table ends (kafka_eos_ds.table_sink.progress); a partition no batch of the
        # table read from starts at the earliest offset, as with 'group'.
        from kafka_eos_ds.table_sink.progress import table_end

        assert spec.table is not None
        ends = table_end(spec.table, dict(spec.storage.settings) if spec.storage else {})
        earliest = metadata.earliest(tp for tp in tps if tp not in ends)
        return {tp: ends[tp] if tp in ends else earliest[tp] for tp in tps}
    if spec.kind is Position.OFFSETS:
        _same_partitions(option, set(spec.offsets), tps)
        wanted = dict(spec.offsets)
        earliest = metadata.earliest(tp for tp, off in wanted.items() if off == EARLIEST)
        latest = metadata.latest(tp for tp, off in wanted.items() if off == LATEST)
        return {tp: earliest.get(tp, latest.get(tp, off)) if off < 0 else off for tp, off in wanted.items()}
    if spec.kind is Position.TIMESTAMP:
        assert spec.timestamp is not None  # a TIMESTAMP position always has one
        return _by_time({tp: spec.timestamp for tp in tps}, spec.strategy, metadata, option)
    if spec.kind is Position.TIMESTAMPS:
        _same_partitions(option, set(spec.offsets), tps)
        return _by_time(dict(spec.offsets), spec.strategy, metadata, option)
    raise ConfigError(f"Option '{option}': unknown position kind {spec.kind!r}.")


def _same_partitions(option: str, named: set[Any], current: set[Any]) -> None:
    if named != current:
        def show(tps: set[Any]) -> str:
            return ", ".join(f"{t}-{p}" for t, p in sorted(tps)) or "none"

        raise ConfigError(
            f"Option '{option}' must name exactly the partitions the subscription covers. Missing: "
            f"{show(current - named)}; not covered by the subscription or not existing: {show(named - current)}."
        )


def _by_time(stamps: dict[Any, int], strategy: str, metadata: KafkaMetadata, option: str) -> Offsets:
    found = metadata.for_times(stamps)
    unmatched = sorted(tp for tp, off in found.items() if off is None)
    if unmatched and strategy == "error":
        names = ", ".join(f"{t}-{p} (timestamp {stamps[(t, p)]})" for t, p in unmatched)
        raise ConfigError(
            f"Option '{option}': no record at or after the requested timestamp in {names}. Set "
            "startingOffsetsByTimestampStrategy=latest to start those partitions at the latest offset."
        )
    latest = metadata.latest(unmatched)
    return {tp: (off if off is not None else latest[tp]) for tp, off in found.items()}
