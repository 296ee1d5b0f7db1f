"""Planning: ranges per partition, splits, new and vanished partitions, data loss."""

from __future__ import annotations

import pickle

import pytest

from kafka_eos_ds.errors import DataLossError
from kafka_eos_ds.source.planning import (
    KafkaInputPartition,
    OffsetRange,
    ReadConfig,
    plan_ranges,
    split_ranges,
)
from kafka_eos_ds.source.stream_reader import limit_offsets


def test_one_range_per_partition_and_empty_ranges_dropped():
    start = {("t", 0): 5, ("t", 1): 9}
    end = {("t", 0): 10, ("t", 1): 9}
    assert plan_ranges(start, end, {("t", 0): 0, ("t", 1): 0}, True) == [OffsetRange("t", 0, 5, 10)]


def test_new_partitions_start_at_earliest():
    start = {("t", 0): 5}
    end = {("t", 0): 5, ("t", 1): 30}
    assert plan_ranges(start, end, {("t", 0): 0, ("t", 1): 12}, True) == [OffsetRange("t", 1, 12, 30)]


def test_deleted_partition_is_data_loss():
    with pytest.raises(DataLossError, match=r"t-1 \(from offset 4\).*failOnDataLoss=false"):
        plan_ranges({("t", 0): 1, ("t", 1): 4}, {("t", 0): 2}, {("t", 0): 0}, True)
    warnings = []
    assert plan_ranges({("t", 0): 1, ("t", 1): 4}, {("t", 0): 2}, {("t", 0): 0}, False, warnings.append) == [
        OffsetRange("t", 0, 1, 2)]
    assert "t-1" in warnings[0] and "Skipping ahead" in warnings[0]


def test_offsets_going_backwards_is_data_loss():
    with pytest.raises(DataLossError, match="t-0 went backwards from 50 to 3"):
        plan_ranges({("t", 0): 50}, {("t", 0): 3}, {("t", 0): 0}, True)
    assert plan_ranges({("t", 0): 50}, {("t", 0): 3}, {("t", 0): 0}, False, lambda m: None) == []


def test_offsets_lost_to_retention():
    with pytest.raises(DataLossError, match="Offsets 10 to 40 of t-0 were deleted"):
        plan_ranges({("t", 0): 10}, {("t", 0): 100}, {("t", 0): 40}, True)
    assert plan_ranges({("t", 0): 10}, {("t", 0): 100}, {("t", 0): 40}, False, lambda m: None) == [
        OffsetRange("t", 0, 40, 100)]


def test_split_by_max_records_per_partition():
    pieces = split_ranges([OffsetRange("t", 0, 0, 10)], max_records_per_partition=4)
    assert pieces == [OffsetRange("t", 0, 0, 3), OffsetRange("t", 0, 3, 6), OffsetRange("t", 0, 6, 10)]


def test_split_to_min_partitions_in_proportion():
    ranges = [OffsetRange("t", 0, 0, 90), OffsetRange("t", 1, 0, 10)]
    pieces = split_ranges(ranges, min_partitions=10)
    assert len([p for p in pieces if p.partition == 0]) == 9
    assert len([p for p in pieces if p.partition == 1]) == 1
    assert sum(p.size for p in pieces) == 100
    # Contiguous, no gaps or overlaps.
    p0 = [p for p in pieces if p.partition == 0]
    assert all(a.until_offset == b.from_offset for a, b in zip(p0, p0[1:], strict=False))


def test_split_never_makes_empty_pieces():
    assert split_ranges([OffsetRange("t", 0, 0, 2)], min_partitions=8) == [
        OffsetRange("t", 0, 0, 1), OffsetRange("t", 0, 1, 2)]
    assert split_ranges([], min_partitions=4) == []


def test_input_partition_pickles():
    part = KafkaInputPartition((OffsetRange("t", 0, 1, 2),), ReadConfig({"bootstrap.servers": "h"}, "g"))
    assert pickle.loads(pickle.dumps(part)) == part


def test_limit_offsets_proportional_and_exact():
    start = {("t", 0): 0, ("t", 1): 100}
    latest = {("t", 0): 300, ("t", 1): 200}
    end = limit_offsets(start, latest, 100)
    assert end == {("t", 0): 75, ("t", 1): 125}
    assert limit_offsets(start, latest, 1000) == latest
    odd = limit_offsets({("t", 0): 0, ("t", 1): 0, ("t", 2): 0}, {("t", 0): 10, ("t", 1): 10, ("t", 2): 10}, 10)
    assert sum(odd.values()) == 10 and all(v <= 10 for v in odd.values())


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_a_batch_read_starting_after_its_end_is_refused_naming_the_offsets_and_options(monkeypatch, fail_on_data_loss):
    """Spark's built-in source refuses a batch read whose start is past its end, whatever
    failOnDataLoss says; reading it as a deleted topic (and, with failOnDataLoss=false,
    as an empty partition) would hide a wrong option."""
    from kafka_eos_ds.errors import ConfigError
    from kafka_eos_ds.source import KafkaBatchReader, batch_reader, source_schema
    from tests.source_fakes import FakeMetadata

    meta = FakeMetadata({("t", 0): 100, ("t", 1): 100})
    meta.close = lambda: None
    monkeypatch.setattr(batch_reader, "KafkaMetadata", lambda options: meta)
    options = {"kafka.bootstrap.servers": "h:1", "subscribe": "t", "failOnDataLoss": fail_on_data_loss,
               "startingOffsets": '{"t": {"0": 200, "1": 0}}'}
    with pytest.raises(ConfigError) as info:
        KafkaBatchReader(source_schema(options), options).partitions()
    text = str(info.value)
    assert "t-0 starts at offset 200, after its end offset 100" in text and "t-1" not in text
    assert "'startingOffsets'" in text and "'endingOffsets'" in text and "failOnDataLoss does not apply" in text
    # A start at the end reads nothing, as the built-in does.
    options["startingOffsets"] = '{"t": {"0": 100, "1": 0}}'
    planned = KafkaBatchReader(source_schema(options), options).partitions()
    assert [r.partition for p in planned for r in p.ranges] == [1]
