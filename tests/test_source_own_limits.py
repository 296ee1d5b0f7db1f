"""The stream reader's own read limits, for pyspark lines that pass none (4.0, 4.1).

There Spark calls ``latestOffset()`` with no start and no limit, so the reader caps each
batch itself from the end it returned last, or the end Spark last planned: on a restart
Spark announces the offset log's latest end as an empty range, ``partitions(end, end)``.
The tests force that path on any pyspark by hiding the 4.2 read-limit classes.
"""

from __future__ import annotations

import pytest

from kafka_eos_ds.source import stream_reader
from tests.source_fakes import FakeMetadata, reader


@pytest.fixture(autouse=True)
def old_pyspark(monkeypatch):
    for name in ("ReadAllAvailable", "ReadMaxRows", "ReadMinRows"):
        monkeypatch.setattr(stream_reader, name, None)


def test_max_offsets_caps_each_batch_from_the_previous_end():
    meta = FakeMetadata({("t", 0): 100, ("t", 1): 300})
    r = reader(meta, maxOffsetsPerTrigger="40")
    assert r.getDefaultReadLimit() is None
    assert r.latestOffset() == {"t": {"0": 10, "1": 30}}
    assert r.initialOffset() == {"t": {"0": 0, "1": 0}}
    r.partitions({"t": {"0": 0, "1": 0}}, {"t": {"0": 10, "1": 30}})
    assert r.latestOffset() == {"t": {"0": 20, "1": 60}}


def test_a_backlog_is_read_in_bounded_batches_until_it_is_drained():
    meta = FakeMetadata({("t", 0): 100})
    r = reader(meta, maxOffsetsPerTrigger="30")
    ends = []
    while True:
        end = r.latestOffset()["t"]["0"]
        if ends and end == ends[-1]:
            break
        ends.append(end)
    assert ends == [30, 60, 90, 100]


def test_restart_caps_from_the_end_spark_announces():
    # A new reader process after a restart: Spark plans the log's latest end as an empty
    # range before it asks for the latest offset.
    meta = FakeMetadata({("t", 0): 1000})
    r = reader(meta, maxOffsetsPerTrigger="50")
    assert [p.ranges for p in r.partitions({"t": {"0": 700}}, {"t": {"0": 700}})] == []
    assert r.latestOffset() == {"t": {"0": 750}}


def test_rerun_of_an_unfinished_batch_caps_the_next_one_from_its_end():
    meta = FakeMetadata({("t", 0): 1000})
    r = reader(meta, maxOffsetsPerTrigger="50")
    r.partitions({"t": {"0": 600}}, {"t": {"0": 650}})
    assert r.latestOffset() == {"t": {"0": 700}}


def test_initial_offset_is_resolved_once_per_run():
    # pyspark < 4.2 asks for the initial offset after the first latestOffset(); a second
    # "latest" taken after new records arrived would start the batch past its end.
    meta = FakeMetadata({("t", 0): 5})
    r = reader(meta, startingOffsets="latest", maxOffsetsPerTrigger="10")
    first_end = r.latestOffset()
    meta.latest_offsets = {("t", 0): 9}
    assert r.initialOffset() == {"t": {"0": 5}} == first_end
    assert r.latestOffset() == {"t": {"0": 9}}


def test_min_offsets_hold_back_until_the_delay():
    meta = FakeMetadata({("t", 0): 10})
    r = reader(meta, minOffsetsPerTrigger="50", maxTriggerDelay="60s")
    assert r.latestOffset() == {"t": {"0": 0}}
    r._last_batch_at -= 61  # the delay has passed
    assert r.latestOffset() == {"t": {"0": 10}}
    meta.latest_offsets = {("t", 0): 70}
    assert r.latestOffset() == {"t": {"0": 70}}


def test_without_limits_each_call_reads_all_available():
    meta = FakeMetadata({("t", 0): 4})
    r = reader(meta)
    assert r.latestOffset() == {"t": {"0": 4}}
    meta.latest_offsets = {("t", 0): 9}
    assert r.latestOffset() == {"t": {"0": 9}}
