"""The executor's range reader on scripted consumers: columns, gaps, range ends, batches, GC."""

from __future__ import annotations

import gc
from typing import Any, Iterator

import pytest
from confluent_kafka import KafkaError, Message, TopicPartition

from kafka_eos_ds.source.planning import OffsetRange, ReadConfig
from kafka_eos_ds.source.reading import _RangeReader


class ScriptedConsumer:
    """Hands out the scripted ``consume()`` results in order (at most ``num_messages`` at a
    time); ``position`` follows the last offset handed out."""

    def __init__(self, script: list[list[Message]], position_after: int | None = None) -> None:
        self.script = list(script)
        self.position_after = position_after
        self.next_offset = 0
        self.gc_during_consume: list[bool] = []

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.next_offset = partitions[0].offset

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        self.gc_during_consume.append(gc.isenabled())
        batch = self.script.pop(0) if self.script else []
        if len(batch) > num_messages:  # like librdkafka's queue: the rest waits for the next call
            batch, rest = batch[:num_messages], batch[num_messages:]
            self.script.insert(0, rest)
        records = [m for m in batch if m.error() is None]
        if records:
            self.next_offset = records[-1].offset() + 1
        elif not self.script and self.position_after is not None:
            self.next_offset = self.position_after  # trailing markers: the position moves on
        return batch

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(p.topic, p.partition, self.next_offset) for p in partitions]


def msg(offset: int, key: bytes | None = b"k", value: bytes | None = b"v", ts: tuple = (1, 1_700_000_000_123),
        headers: Any = None) -> Message:
    return Message(topic="t", partition=3, offset=offset, key=key, value=value, timestamp=ts, headers=headers)


def read(script: list[list[Message]], start: int, until: int, batch_records: int = 10_000,
         include_headers: bool = False, position_after: int | None = None) -> list[Any]:
    consumer = ScriptedConsumer(script, position_after)
    config = ReadConfig(batch_records=batch_records, include_headers=include_headers, poll_timeout_ms=2_000)
    return list(_RangeReader(consumer, [OffsetRange("t", 3, start, until)], config).batches())


def rows(batches: list[Any]) -> list[dict]:
    return [row for b in batches for row in b.to_pylist()]


def test_columns_match_the_builtin_schema_and_values():
    import datetime as dt

    out = rows(read([[msg(10, key=None, ts=(1, 1_000)), msg(11, value=None, ts=(2, 2_500)),
                      msg(12, ts=(0, -1))]], 10, 13))
    assert [r["offset"] for r in out] == [10, 11, 12]
    assert [(r["key"], r["value"]) for r in out] == [(None, b"v"), (b"k", None), (b"k", b"v")]
    assert {(r["topic"], r["partition"]) for r in out} == {("t", 3)}
    # librdkafka 0 none / 1 create / 2 log-append -> Spark -1 / 0 / 1; ms -> UTC timestamps
    assert [r["timestampType"] for r in out] == [0, 1, -1]
    assert out[0]["timestamp"] == dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=dt.timezone.utc)
    assert out[1]["timestamp"] == dt.datetime(1970, 1, 1, 0, 0, 2, 500_000, tzinfo=dt.timezone.utc)


def test_offsets_with_gaps_come_from_each_record():
    # Aborted records and transaction markers occupy offsets 2, 3 and 6.
    out = rows(read([[msg(0), msg(1), msg(4), msg(5)], [msg(7)]], 0, 8))
    assert [r["offset"] for r in out] == [0, 1, 4, 5, 7]


def test_records_at_or_beyond_until_are_cut_and_reading_stops():
    # Offset 7 is a transaction marker, so asking for the 2 offsets left returns 8 and 9.
    consumer_script = [[msg(5), msg(6)], [msg(8), msg(9)], [msg(10)]]
    out = rows(read(consumer_script, 5, 9))
    assert [r["offset"] for r in out] == [5, 6, 8]


def test_a_range_ending_in_markers_ends_when_the_position_passes_until():
    out = rows(read([[msg(0), msg(1)], []], 0, 4, position_after=4))
    assert [r["offset"] for r in out] == [0, 1]


def test_partition_eof_at_until_ends_the_range():
    eof = Message(topic="t", partition=3, offset=3, error=KafkaError(KafkaError._PARTITION_EOF))
    out = rows(read([[msg(0), msg(1), eof]], 0, 3))
    assert [r["offset"] for r in out] == [0, 1]


def test_batches_are_filled_across_consume_calls_up_to_batch_records():
    script = [[msg(i) for i in range(j, j + 3)] for j in range(0, 12, 3)]
    batches = read(script, 0, 12, batch_records=5)
    assert [b.num_rows for b in batches] == [5, 5, 2]
    assert [r["offset"] for r in rows(batches)] == list(range(12))


def test_headers_keep_order_repeats_and_nulls():
    out = rows(read([[msg(0, headers=[("a", b"1"), ("a", None), ("b", b"2")]), msg(1)]], 0, 2,
                    include_headers=True))
    assert out[0]["headers"] == [{"key": "a", "value": b"1"}, {"key": "a", "value": None},
                                 {"key": "b", "value": b"2"}]
    assert out[1]["headers"] is None


def _gc_states(consumer: ScriptedConsumer, batches: Iterator[Any]) -> list[bool]:
    seen = []
    for _ in batches:
        seen.append(gc.isenabled())
    return seen


def test_the_collector_pauses_while_reading_and_runs_while_spark_holds_a_batch():
    assert gc.isenabled()
    consumer = ScriptedConsumer([[msg(0), msg(1)], [msg(2), msg(3)]])
    reader = _RangeReader(consumer, [OffsetRange("t", 3, 0, 4)], ReadConfig(batch_records=2))
    assert _gc_states(consumer, reader.batches()) == [True, True]
    assert consumer.gc_during_consume and not any(consumer.gc_during_consume)
    assert gc.isenabled()


def test_the_collector_is_back_after_an_error_and_stays_off_if_it_was_off():
    bad = Message(topic="t", partition=3, offset=0, error=KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED,
                                                                     fatal=True))
    reader = _RangeReader(ScriptedConsumer([[bad]]), [OffsetRange("t", 3, 0, 4)], ReadConfig())
    with pytest.raises(Exception, match="failed"):
        list(reader.batches())
    assert gc.isenabled()
    gc.disable()
    try:
        consumer = ScriptedConsumer([[msg(0)]])
        assert _gc_states(consumer, _RangeReader(consumer, [OffsetRange("t", 3, 0, 1)], ReadConfig()).batches()) \
            == [False]
        assert not gc.isenabled()
    finally:
        gc.enable()
