"""Offset ranges -> input partitions: ``[from, until)`` ranges, grouped into Spark tasks.

Pure logic (no Kafka, no Spark calls) so it is unit-tested on its own. The driver-side
reader asks Kafka for the earliest offsets, then :func:`plan_ranges` turns the batch's
start and end offsets into ranges, applying ``failOnDataLoss`` to partitions that
vanished, offsets that went backwards and offsets already deleted by retention,
:func:`split_ranges` cuts them by ``maxRecordsPerPartition`` / ``minPartitions`` (the
built-in's meaning), and :func:`group_ranges` packs the pieces into input partitions.

Every Spark task costs a Python worker hand-over on the read side and one on the write
side, and the exactly-once sink starts a transactional producer per task, so one task per
Kafka partition (the built-in's plan) makes a batch's cost grow with the partition count.
A grouped plan (the default) gives each task several ranges, read by one consumer:
about as many tasks as the driver-side reader process can use cores
(``targetPartitions``), or one per ``targetRecordsPerPartition`` offsets.
"""

from __future__ import annotations

import heapq
import logging
import math
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from pyspark.sql.datasource import InputPartition

from kafka_eos_ds.errors import ConfigError, DataLossError
from kafka_eos_ds.kafka.settings import ClientParams
from kafka_eos_ds.source.offsets import Offsets
from kafka_eos_ds.source.options import OffsetSpec, PartitionPlan, Position

if TYPE_CHECKING:
    from kafka_eos_ds.source.options import SourceOptions

log = logging.getLogger(__name__)

_FAIL_HINT = ("Set the source option failOnDataLoss=false to skip the missing offsets with a warning "
              "instead (the query then silently misses those records).")


@dataclass(frozen=True, order=True)
class OffsetRange:
    """Offsets ``[from_offset, until_offset)`` of one Kafka partition."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    @property
    def size(self) -> int:
        """Upper bound on the records in the range (markers and aborted records use offsets)."""
        return max(0, self.until_offset - self.from_offset)


@dataclass(frozen=True)
class ReadConfig:
    """What an executor needs to read any range of this source (pickled with each partition)."""

    client_conf: dict[str, str] = field(default_factory=dict)
    group_id: str = ""
    include_headers: bool = False
    fail_on_data_loss: bool = True
    poll_timeout_ms: int = 120_000
    batch_records: int = 10_000


@dataclass
class KafkaInputPartition(InputPartition):
    """One Spark input partition: its ranges (at most one per Kafka partition, sorted) and
    how to read them."""

    ranges: tuple[OffsetRange, ...]
    config: ReadConfig

    def __post_init__(self) -> None:
        # One consumer reads all the ranges: it can be at one offset per Kafka partition.
        partitions = [(r.topic, r.partition) for r in self.ranges]
        assert len(set(partitions)) == len(partitions), f"one range per Kafka partition: {self.ranges}"

    @property
    def size(self) -> int:
        return sum(r.size for r in self.ranges)


def report_data_loss(message: str, fail_on_data_loss: bool, warn: Callable[[str], None] = log.warning) -> None:
    """Raise DataLossError, or warn and let the caller skip ahead."""
    if fail_on_data_loss:
        raise DataLossError(f"{message} {_FAIL_HINT}")
    warn(f"{message} Skipping ahead because failOnDataLoss=false.")


def plan_ranges(start: Offsets, end: Offsets, earliest: Offsets, fail_on_data_loss: bool,
                warn: Callable[[str], None] = log.warning) -> list[OffsetRange]:
    """Non-empty ranges from ``start`` to ``end``.

    ``earliest`` holds the current earliest offset of every partition in ``end``.
    Partitions in ``end`` but not in ``start`` are new and start at their earliest offset.
    """
    for topic, partition in sorted(set(start) - set(end)):
        report_data_loss(f"Partition {topic}-{partition} (from offset {start[(topic, partition)]}) no longer "
                         "exists: its topic or partition was deleted.", fail_on_data_loss, warn)
    ranges = []
    for tp in sorted(end):
        topic, partition = tp
        until = end[tp]
        first = earliest.get(tp)
        if tp in start:
            begin = start[tp]
        else:
            begin = first if first is not None else 0
        if until < begin:
            report_data_loss(f"Offsets of {topic}-{partition} went backwards from {begin} to {until}: the topic "
                             "was probably deleted and re-created.", fail_on_data_loss, warn)
            continue
        if first is not None and begin < first:
            report_data_loss(f"Offsets {begin} to {min(first, until)} of {topic}-{partition} were deleted "
                             f"(retention or deleteRecords) before they were read; the earliest offset now is {first}.",
                             fail_on_data_loss, warn)
            begin = min(first, until)
        if until > begin:
            ranges.append(OffsetRange(topic, partition, begin, until))
    return ranges


def check_batch_bounds(start: Offsets, end: Offsets, starting: OffsetSpec, ending: OffsetSpec) -> None:
    """Refuse a batch read that starts a partition after its end.

    A streaming query's next range can go backwards when a topic is deleted and
    re-created (data loss, :func:`plan_ranges`); a batch read's bounds come from its
    options, so a start past the end is a wrong option, whatever ``failOnDataLoss`` says.
    Spark's built-in source refuses such a read too (it checks each resolved start
    against the resolved end); reading the partition as empty would hide the mistake."""
    inverted = sorted(tp for tp in end if tp in start and start[tp] > end[tp])
    if not inverted:
        return
    starting_option, ending_option = _option_name(starting, "starting"), _option_name(ending, "ending")
    where = "; ".join(f"{t}-{p} starts at offset {start[(t, p)]}, after its end offset {end[(t, p)]}"
                      for t, p in inverted)
    raise ConfigError(
        f"Cannot read: {where}. The start comes from the option '{starting_option}', the end from "
        f"'{ending_option}' (a partition's latest offset when that is 'latest'). Set '{starting_option}' at or "
        f"before the end, or '{ending_option}' at or after the start; offsets that were right once mean the "
        "topic was deleted and re-created since. failOnDataLoss does not apply: these are the read's own "
        "bounds, not offsets that vanished while a query ran.")


def _option_name(spec: OffsetSpec, side: str) -> str:
    if spec.kind is Position.TABLE:
        return f"{side}OffsetsFromTable"
    if spec.kind is Position.TIMESTAMP:
        return f"{side}Timestamp"
    if spec.kind is Position.TIMESTAMPS:
        return f"{side}OffsetsByTimestamp"
    return f"{side}Offsets"


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None = None,
                 max_records_per_partition: int | None = None) -> list[OffsetRange]:
    """Cut ranges so none exceeds ``max_records_per_partition`` and there are at least
    ``min_partitions`` pieces (large ranges are cut in proportion to their size)."""
    out = list(ranges)
    if max_records_per_partition:
        out = [piece for r in out for piece in _cut(r, math.ceil(r.size / max_records_per_partition))]
    if min_partitions and len(out) < min_partitions:
        total = sum(r.size for r in out)
        if total > 0:
            out = [piece for r in out for piece in _cut(r, max(1, math.ceil(r.size * min_partitions / total)))]
    return out


def _cut(r: OffsetRange, parts: int) -> list[OffsetRange]:
    parts = max(1, min(parts, r.size))
    if parts == 1:
        return [r]
    bounds = [r.from_offset + (r.size * i) // parts for i in range(parts + 1)]
    return [OffsetRange(r.topic, r.partition, a, b) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]


def default_parallelism() -> int:
    """The cores this process may use: the grouped plan's default task count.

    The driver-side reader runs in a Python process Spark starts on the driver; it gets
    no Spark configuration and no SparkContext (``spark.default.parallelism`` and the
    executors' cores cannot be asked), so the best it can know is the driver host's
    cores — Spark's ``defaultParallelism`` in ``local[*]`` mode. On a cluster, set
    ``targetPartitions`` (docs/source.md, "How to size the plan")."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def task_count(pieces: list[OffsetRange], options: "SourceOptions") -> int:
    """How many input partitions the pieces are packed into (before the capacity
    ``maxRecordsPerPartition`` may add some): never fewer than ``minPartitions``, never
    more than there are pieces."""
    if options.partition_plan is PartitionPlan.PER_KAFKA_PARTITION:
        return len(pieces)
    if options.target_records_per_partition is not None:
        wanted = math.ceil(sum(r.size for r in pieces) / options.target_records_per_partition)
    else:
        wanted = options.target_partitions or default_parallelism()
    return min(len(pieces), max(wanted, options.min_partitions or 1))


def group_ranges(pieces: list[OffsetRange], tasks: int,
                 max_records: int | None = None) -> list[tuple[OffsetRange, ...]]:
    """Pack ``pieces`` into about ``tasks`` groups of similar size (largest piece first,
    into the group holding the fewest offsets).

    A group never holds two pieces of one Kafka partition (its consumer reads one range
    per partition) nor, with ``max_records``, more offsets than that; a piece no group
    can take opens a new group. Each group's ranges are sorted; the groups are sorted by
    their first range, so the same input gives the same plan."""
    groups: list[list[OffsetRange]] = [[] for _ in range(min(tasks, len(pieces)))]
    held: list[set[tuple[str, int]]] = [set() for _ in groups]  # each group's Kafka partitions
    loads = [(0, i) for i in range(len(groups))]  # a heap of (offsets held, group index)
    for piece in sorted(pieces, key=lambda r: (-r.size, r)):
        tp = (piece.topic, piece.partition)
        skipped, chosen = [], None
        while loads:
            load, i = heapq.heappop(loads)
            skipped.append((load, i))
            if max_records is not None and load > 0 and load + piece.size > max_records:
                break  # the least loaded group is full for this piece: so is every other
            if tp not in held[i]:
                chosen = skipped.pop()
                break
        if chosen is None:
            chosen = (0, len(groups))
            groups.append([])
            held.append(set())
        load, i = chosen
        groups[i].append(piece)
        held[i].add(tp)
        heapq.heappush(loads, (load + piece.size, i))
        for entry in skipped:
            heapq.heappush(loads, entry)
    return sorted(tuple(sorted(g)) for g in groups if g)


def read_config(options: "SourceOptions") -> ReadConfig:
    return ReadConfig(
        client_conf=ClientParams(options.client_conf),
        group_id=options.group_id,
        include_headers=options.include_headers,
        fail_on_data_loss=options.fail_on_data_loss,
        poll_timeout_ms=options.poll_timeout_ms,
        batch_records=options.arrow_batch_records,
    )


def input_partitions(options: "SourceOptions", start: Offsets, end: Offsets,
                     earliest: Offsets) -> list[KafkaInputPartition]:
    """The batch's input partitions: planned, split, grouped, each with the read settings."""
    ranges = plan_ranges(start, end, earliest, options.fail_on_data_loss)
    pieces = split_ranges(ranges, options.min_partitions, options.max_records_per_partition)
    groups = group_ranges(pieces, task_count(pieces, options), options.max_records_per_partition)
    config = read_config(options)
    return [KafkaInputPartition(group, config) for group in groups]
