"""Planning by work: Kafka partition ranges grouped into fewer Spark tasks, each read by one
consumer with every partition's records in offset order (docs/source.md, "How to size the plan")."""

from __future__ import annotations

import pickle
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message, TopicPartition

from kafka_eos_ds.errors import ConfigError
from kafka_eos_ds.source import planning
from kafka_eos_ds.source.options import PartitionPlan, SourceOptions
from kafka_eos_ds.source.planning import (
    KafkaInputPartition,
    OffsetRange,
    ReadConfig,
    group_ranges,
    input_partitions,
)
from kafka_eos_ds.source.reading import _RangeReader
from tests.source_fakes import FakeMetadata, reader


def options(**opts: str) -> SourceOptions:
    return SourceOptions.from_spark({"kafka.bootstrap.servers": "h:1", "subscribe": "t", **opts}, streaming=True)


def plan(sizes: dict[int, int], cores: int = 2, **opts: str) -> list[KafkaInputPartition]:
    """The input partitions of a batch reading ``sizes[p]`` offsets of partition p of topic t,
    planned grouped unless ``opts`` say otherwise."""
    opts = {"partitionPlan": "grouped", **opts}
    end = {("t", p): n for p, n in sizes.items()}
    start = {tp: 0 for tp in end}
    planning_cores = planning.default_parallelism
    planning.default_parallelism = lambda: cores  # type: ignore[assignment]
    try:
        return input_partitions(options(**opts), start, end, start)
    finally:
        planning.default_parallelism = planning_cores  # type: ignore[assignment]


def covered(parts: list[KafkaInputPartition]) -> list[OffsetRange]:
    return sorted(r for p in parts for r in p.ranges)


# -- the plan -------------------------------------------------------------------------

def test_a_grouped_plan_without_a_size_packs_a_batch_into_as_many_tasks_as_the_reader_sees_cores():
    parts = plan({p: 100 for p in range(64)}, cores=2)
    assert len(parts) == 2
    assert [p.size for p in parts] == [3200, 3200]
    assert covered(parts) == [OffsetRange("t", p, 0, 100) for p in range(64)]


def test_ranges_are_bin_packed_by_size_largest_first():
    groups = group_ranges([OffsetRange("t", p, 0, n) for p, n in enumerate([70, 10, 30, 40, 20, 30])], 2)
    assert sorted(sum(r.size for r in g) for g in groups) == [100, 100]
    # Each group's ranges in topic, partition order; the groups by their first range.
    assert all(list(g) == sorted(g) for g in groups) and groups == sorted(groups)


def test_the_plan_is_the_same_for_the_same_input():
    sizes = {p: 10 + (p * 7) % 13 for p in range(20)}
    assert plan(sizes, cores=3) == plan(dict(reversed(list(sizes.items()))), cores=3)


def test_target_partitions_sets_the_task_count():
    assert len(plan({p: 10 for p in range(8)}, targetPartitions="3")) == 3


def test_target_records_per_partition_sizes_the_tasks_by_offsets():
    parts = plan({p: 100 for p in range(8)}, targetRecordsPerPartition="250")
    assert len(parts) == 4 and {p.size for p in parts} == {200}
    # A range larger than the target is not split by it (maxRecordsPerPartition splits).
    assert [p.size for p in plan({0: 1000}, targetRecordsPerPartition="10")] == [1000]


def test_the_builtin_plan_is_one_task_per_kafka_partition():
    parts = plan({p: 10 for p in range(8)}, cores=2, partitionPlan="perKafkaPartition")
    assert [p.ranges for p in parts] == [(OffsetRange("t", p, 0, 10),) for p in range(8)]
    assert options(partitionPlan="PERKAFKAPARTITION").partition_plan is PartitionPlan.PER_KAFKA_PARTITION


def test_more_tasks_than_partitions_gives_one_task_per_partition():
    parts = plan({0: 5, 1: 7}, targetPartitions="16")
    assert [p.ranges for p in parts] == [(OffsetRange("t", 0, 0, 5),), (OffsetRange("t", 1, 0, 7),)]


def test_one_partition_is_one_task_and_empty_ranges_are_not_planned():
    assert [p.ranges for p in plan({0: 9, 1: 0, 2: 0}, cores=4)] == [(OffsetRange("t", 0, 0, 9),)]
    assert plan({0: 0, 1: 0}) == []
    assert group_ranges([], 4) == []


def test_min_partitions_splits_as_the_builtin_and_is_never_grouped_below():
    # Two partitions, at least 6 tasks: the ranges are cut in proportion (the built-in's
    # minPartitions), and grouping keeps at least 6.
    parts = plan({0: 100, 1: 200}, cores=1, minPartitions="6")
    assert len(parts) == 6
    assert covered(parts)[0] == OffsetRange("t", 0, 0, 50)
    # Few partitions, many cores: as before, one task per piece.
    assert len(plan({0: 100}, cores=8, minPartitions="3")) == 3


def test_max_records_per_partition_bounds_every_task_as_in_the_builtin():
    parts = plan({p: 60 for p in range(10)}, cores=2, maxRecordsPerPartition="100")
    assert max(p.size for p in parts) <= 100
    assert sum(p.size for p in parts) == 600
    # A range above the bound is split, and its pieces are not packed back together.
    parts = plan({0: 250}, cores=1, maxRecordsPerPartition="100")
    assert sorted(p.size for p in parts) == [83, 83, 84]


def test_a_task_never_holds_two_pieces_of_one_kafka_partition():
    pieces = [OffsetRange("t", 0, 0, 10), OffsetRange("t", 0, 10, 20), OffsetRange("t", 1, 0, 5)]
    groups = group_ranges(pieces, 1)
    assert len(groups) == 2
    assert all(len({(r.topic, r.partition) for r in g}) == len(g) for g in groups)
    with pytest.raises(AssertionError, match="one range per Kafka partition"):
        KafkaInputPartition((pieces[0], pieces[1]), ReadConfig())


def test_the_input_partition_pickles_with_its_ranges():
    part = KafkaInputPartition((OffsetRange("a", 0, 1, 2), OffsetRange("b", 3, 4, 9)), ReadConfig({"x": "y"}, "g"))
    assert pickle.loads(pickle.dumps(part)) == part and part.size == 6


def test_the_stream_reader_plans_grouped_tasks():
    meta = FakeMetadata({("t", p): 10 for p in range(6)})
    parts = reader(meta, targetPartitions="2").partitions({"t": {str(p): 0 for p in range(6)}},
                                                          {"t": {str(p): 10 for p in range(6)}})
    assert len(parts) == 2 and sum(p.size for p in parts) == 60


def test_the_default_task_count_is_the_cores_this_process_may_use():
    import os

    assert planning.default_parallelism() == len(os.sched_getaffinity(0))


# -- the options ----------------------------------------------------------------------

@pytest.mark.parametrize("opts, message", [
    ({"targetPartitions": "0"}, "Option 'targetPartitions' must be >= 1"),
    ({"targetRecordsPerPartition": "many"}, "Option 'targetRecordsPerPartition' must be a whole number"),
    ({"partitionPlan": "fewest"}, "Option 'partitionPlan' must be 'grouped' .* or 'perKafkaPartition'"),
    ({"targetPartitions": "2", "targetRecordsPerPartition": "10"},
     "Options 'targetPartitions' and 'targetRecordsPerPartition' both size the plan"),
    ({"partitionPlan": "perKafkaPartition", "targetPartitions": "2"},
     "Option 'targetPartitions' sizes a grouped plan, but 'partitionPlan' is 'perKafkaPartition'"),
])
def test_plan_options_are_checked_naming_the_option(opts, message):
    with pytest.raises(ConfigError, match=message):
        options(**opts)


@pytest.mark.parametrize("opts, plan", [
    ({}, PartitionPlan.GROUPED),
    ({"partitionPlan": "grouped"}, PartitionPlan.GROUPED),
    ({"targetRecordsPerPartition": "1000"}, PartitionPlan.GROUPED),
    ({"partitionPlan": "perKafkaPartition"}, PartitionPlan.PER_KAFKA_PARTITION),
])
def test_the_grouped_plan_is_the_default_and_the_builtins_plan_a_setting(opts, plan):
    assert options(**opts).partition_plan is plan


def test_plan_options_apply_to_batch_reads_too():
    batch = SourceOptions.from_spark({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "targetPartitions": "5"},
                                     streaming=False)
    assert batch.target_partitions == 5 and batch.partition_plan is PartitionPlan.GROUPED


# -- reading several ranges with one consumer -----------------------------------------

def msg(partition: int, offset: int, topic: str = "t") -> Message:
    return Message(topic=topic, partition=partition, offset=offset, key=b"k", value=f"{partition}:{offset}".encode(),
                   timestamp=(1, 1_700_000_000_000))


def event(partition: int, offset: int, code: int) -> Message:
    return Message(topic="t", partition=partition, offset=offset, error=KafkaError(code))


class Consumer:
    """Hands out scripted ``consume()`` results; ``position`` per partition follows the last
    record handed out (or ``moves``, for trailing markers); records every assign and pause."""

    def __init__(self, script: list[list[Message]], moves: dict[int, int] | None = None,
                 low: int = 0) -> None:
        self.script = list(script)
        self.moves = dict(moves or {})
        self.low = low
        self.next: dict[tuple[str, int], int] = {}
        self.assigned: list[list[tuple[str, int, int]]] = []
        self.paused: list[tuple[str, int]] = []

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.assigned.append([(tp.topic, tp.partition, tp.offset) for tp in partitions])
        self.next.update({(tp.topic, tp.partition): tp.offset for tp in partitions})

    def pause(self, partitions: list[TopicPartition]) -> None:
        self.paused += [(tp.topic, tp.partition) for tp in partitions]

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        batch = self.script.pop(0) if self.script else []
        for m in batch:
            if m.error() is None:
                self.next[(m.topic(), m.partition())] = m.offset() + 1
        if not self.script:
            self.next.update({("t", p): o for p, o in self.moves.items()})
        return batch

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self.next.get((tp.topic, tp.partition), -1001))
                for tp in partitions]

    def get_watermark_offsets(self, partition: TopicPartition, timeout: float = -1,
                              cached: bool = False) -> tuple[int, int]:
        return self.low, 1_000


def read(consumer: Consumer, ranges: list[OffsetRange], **config: Any) -> list[dict]:
    settings = ReadConfig(poll_timeout_ms=2_000, **config)
    return [row for b in _RangeReader(consumer, ranges, settings).batches() for row in b.to_pylist()]


def test_one_consumer_reads_every_range_keeping_each_partitions_order():
    script = [[msg(0, 5), msg(0, 6), msg(1, 0)], [msg(1, 1), msg(0, 7), msg(1, 2), msg(1, 3)], [msg(0, 8)]]
    consumer = Consumer(script)
    rows = read(consumer, [OffsetRange("t", 0, 5, 9), OffsetRange("t", 1, 0, 3)])
    assert consumer.assigned == [[("t", 0, 5), ("t", 1, 0)]]
    assert [(r["partition"], r["offset"]) for r in rows] == [(0, 5), (0, 6), (1, 0), (1, 1), (0, 7), (1, 2), (0, 8)]
    assert [r["value"] for r in rows] == [f"{r['partition']}:{r['offset']}".encode() for r in rows]
    # Partition 1 reached its end first (offset 3 is beyond it): paused, its record dropped.
    assert consumer.paused == [("t", 1)]


def test_records_of_a_finished_partition_still_queued_are_dropped():
    script = [[msg(0, 0), msg(1, 0)], [msg(0, 1), msg(0, 2), msg(1, 1)]]
    rows = read(Consumer(script), [OffsetRange("t", 0, 0, 1), OffsetRange("t", 1, 0, 2)])
    assert [(r["partition"], r["offset"]) for r in rows] == [(0, 0), (1, 0), (1, 1)]


def test_each_range_ends_by_position_never_by_counting():
    # Partition 0 ends in markers (its position moves to 10, no record), partition 1 by a
    # partition-EOF event at its end; both have gaps (aborted records, markers).
    script = [[msg(0, 2), msg(1, 4)], [event(1, 9, KafkaError._PARTITION_EOF)]]
    rows = read(Consumer(script, moves={0: 10}), [OffsetRange("t", 0, 0, 10), OffsetRange("t", 1, 0, 9)])
    assert [(r["partition"], r["offset"]) for r in rows] == [(0, 2), (1, 4)]


def test_batches_mix_partitions_and_topics_with_the_right_columns():
    script = [[msg(0, 0, "a"), msg(3, 7, "b"), msg(0, 1, "a")]]
    consumer = Consumer(script)
    settings = ReadConfig(poll_timeout_ms=2_000, batch_records=2)
    batches = list(_RangeReader(consumer, [OffsetRange("a", 0, 0, 2), OffsetRange("b", 3, 7, 8)], settings).batches())
    assert [b.num_rows for b in batches] == [3]  # filled up to the whole of the last consume()
    assert [(r["topic"], r["partition"], r["offset"]) for r in batches[0].to_pylist()] == [
        ("a", 0, 0), ("b", 3, 7), ("a", 0, 1)]


def test_offsets_deleted_in_one_partition_skip_ahead_there_only():
    # Partition 1's offsets 0-3 are gone (earliest now 4); partition 0 goes on where it was.
    script = [[msg(0, 0), event(1, 0, KafkaError._AUTO_OFFSET_RESET)], [msg(1, 4), msg(0, 1), msg(1, 5)]]
    consumer = Consumer(script, low=4)
    rows = read(consumer, [OffsetRange("t", 0, 0, 2), OffsetRange("t", 1, 0, 6)], fail_on_data_loss=False)
    assert consumer.assigned[-1] == [("t", 0, 1), ("t", 1, 4)]
    assert [(r["partition"], r["offset"]) for r in rows] == [(0, 0), (1, 4), (0, 1), (1, 5)]


def test_a_stalled_read_names_every_unfinished_partition():
    from kafka_eos_ds.errors import KafkaClientError

    settings = ReadConfig(poll_timeout_ms=1)
    reader_ = _RangeReader(Consumer([[msg(0, 0)]]), [OffsetRange("t", 0, 0, 1), OffsetRange("t", 1, 0, 5)], settings)
    with pytest.raises(KafkaClientError, match=r"reading t-1 at offset 0 \(range ends at 5\)"):
        list(reader_.batches())


def test_the_plan_options_are_in_the_docs_option_table():
    from pathlib import Path

    table = [line for line in (Path(__file__).resolve().parents[1] / "docs" / "source.md").read_text().splitlines()
             if line.startswith("| `")]
    for name in ("partitionPlan", "targetPartitions", "targetRecordsPerPartition", "minPartitions",
                 "maxRecordsPerPartition"):
        assert any(line.startswith(f"| `{name}` |") for line in table), name
    assert any(line.startswith("| `partitionPlan` | `grouped`, `perKafkaPartition` |") for line in table)


@pytest.mark.parametrize("seed", range(20))
def test_grouping_keeps_every_piece_once_within_the_rules(seed):
    import random

    rng = random.Random(seed)
    pieces = [OffsetRange(rng.choice("ab"), p, o, o + rng.randint(1, 500))
              for p in range(rng.randint(1, 40)) for o in rng.sample(range(0, 10_000, 1000), rng.randint(1, 3))]
    pieces = sorted(set(pieces))
    tasks, cap = rng.randint(1, 50), rng.choice([None, 600, 2000])
    groups = group_ranges(pieces, tasks, cap)
    assert sorted(r for g in groups for r in g) == pieces
    assert len(groups) >= min(tasks, len(pieces))
    assert all(len({(r.topic, r.partition) for r in g}) == len(g) for g in groups)
    assert cap is None or all(sum(r.size for r in g) <= cap for g in groups)
    if cap is None and len(groups) == tasks <= len({(r.topic, r.partition) for r in pieces}):
        # Largest first into the least loaded: no group exceeds the mean by more than a piece.
        mean = sum(r.size for r in pieces) / tasks
        assert max(sum(r.size for r in g) for g in groups) <= mean + max(r.size for r in pieces)
