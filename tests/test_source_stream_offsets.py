"""The stream reader's offset decisions with Spark's read limits (pyspark 4.2+) and a fake
Kafka: AvailableNow caps, admission control, new partitions, canonical JSON,
picklability. No Spark session, no Kafka. The reader's own limits for older pyspark
lines are in test_source_own_limits.py."""

from __future__ import annotations

import json
import pickle

import pytest

from tests.source_fakes import FakeMetadata, reader

try:
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows
except ImportError:  # pyspark < 4.2: Spark passes no read limits to Python sources
    pytestmark = pytest.mark.skip(reason="pyspark < 4.2 has no read limits for Python sources; "
                                         "test_source_own_limits.py covers this line")


def test_initial_and_latest_offsets_are_canonical_json():
    meta = FakeMetadata({("t", 10): 5, ("t", 2): 7})
    r = reader(meta)
    start = r.initialOffset()
    assert json.dumps(start) == '{"t": {"2": 0, "10": 0}}'
    end = r.latestOffset(start, ReadAllAvailable())
    assert json.dumps(end) == '{"t": {"2": 7, "10": 5}}'


def test_no_new_data_returns_the_same_text():
    meta = FakeMetadata({("t", 0): 5})
    r = reader(meta)
    end = r.latestOffset({"t": {"0": 5}}, ReadAllAvailable())
    assert json.dumps(end) == json.dumps({"t": {"0": 5}})


def test_max_offsets_per_trigger_and_read_all_available():
    meta = FakeMetadata({("t", 0): 100, ("t", 1): 300})
    r = reader(meta, maxOffsetsPerTrigger="40")
    assert r.getDefaultReadLimit() == ReadMaxRows(40)
    assert r.latestOffset({"t": {"0": 0, "1": 0}}, ReadMaxRows(40)) == {"t": {"0": 10, "1": 30}}
    # ReadAllAvailable means: ignore the limit (Spark's Trigger.Once style).
    assert r.latestOffset({"t": {"0": 0, "1": 0}}, ReadAllAvailable()) == {"t": {"0": 100, "1": 300}}


def test_available_now_stops_at_the_target_and_ignores_later_partitions():
    meta = FakeMetadata({("t", 0): 10})
    r = reader(meta)
    r.prepareForTriggerAvailableNow()
    meta.latest_offsets = {("t", 0): 50, ("t", 1): 9}
    meta.earliest_offsets = {("t", 0): 0, ("t", 1): 0}
    assert r.latestOffset({"t": {"0": 0}}, ReadAllAvailable()) == {"t": {"0": 10}}
    assert r.latestOffset({"t": {"0": 10}}, ReadAllAvailable()) == {"t": {"0": 10}}


def test_available_now_with_max_offsets_reads_in_several_batches():
    meta = FakeMetadata({("t", 0): 100})
    r = reader(meta, maxOffsetsPerTrigger="30")
    r.prepareForTriggerAvailableNow()
    ends, start = [], {"t": {"0": 0}}
    while True:
        end = r.latestOffset(start, ReadAllAvailable())
        if end == start:
            break
        ends.append(end["t"]["0"])
        start = end
    assert ends == [30, 60, 90, 100]


def test_min_offsets_hold_back_until_the_delay(monkeypatch):
    meta = FakeMetadata({("t", 0): 10})
    r = reader(meta, minOffsetsPerTrigger="50", maxTriggerDelay="60s")
    assert r.getDefaultReadLimit() == ReadMinRows(50)
    assert r.latestOffset({"t": {"0": 0}}, ReadMinRows(50)) == {"t": {"0": 0}}
    r._last_batch_at -= 61  # the delay has passed
    assert r.latestOffset({"t": {"0": 0}}, ReadMinRows(50)) == {"t": {"0": 10}}
    meta.latest_offsets = {("t", 0): 70}
    assert r.latestOffset({"t": {"0": 10}}, ReadMinRows(50)) == {"t": {"0": 70}}


def test_new_partitions_join_from_earliest():
    meta = FakeMetadata({("t", 0): 5, ("t", 1): 8}, {("t", 0): 0, ("t", 1): 3})
    r = reader(meta)
    assert r.latestOffset({"t": {"0": 5}}, ReadAllAvailable()) == {"t": {"0": 5, "1": 8}}
    parts = r.partitions({"t": {"0": 5}}, {"t": {"0": 5, "1": 8}})
    assert [(g.partition, g.from_offset, g.until_offset) for p in parts for g in p.ranges] == [(1, 3, 8)]


def test_group_commit_follows_completed_batches_once():
    meta = FakeMetadata({("t", 0): 5})
    r = reader(meta)
    r.latestOffset({"t": {"0": 2}}, ReadAllAvailable())  # the batch ending at 2 is complete
    r.commit({"t": {"0": 2}})                             # Spark's commit of the same batch: no repeat
    r.latestOffset({"t": {"0": 5}}, ReadAllAvailable())
    assert meta.commits == [{("t", 0): 2}, {("t", 0): 5}]
    quiet = FakeMetadata({("t", 0): 5})
    off = reader(quiet, commitOffsetsToGroup="false")
    off.latestOffset({"t": {"0": 2}}, ReadAllAvailable())
    assert quiet.commits == []


def test_pickled_reader_carries_no_driver_clients():
    r = reader(FakeMetadata({("t", 0): 1}))
    copy = pickle.loads(pickle.dumps(r))
    assert copy._metadata is None and copy.options == r.options
