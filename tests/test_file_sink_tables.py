"""File sink tables without Spark: partition directories, the store layer on a local
disk, options for remote paths (the HDFS and S3 clients' behaviour is proven against real
servers in integration/test_table_sink.py)."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from pyspark.sql.types import DateType, LongType, StringType, StructField, StructType, TimestampType

from kafka_eos_ds.errors import ConfigError
from kafka_eos_ds.storage import StorageOptions
from kafka_eos_ds.storage.local import LocalStore
from kafka_eos_ds.table_sink.config import FileSinkConfig
from kafka_eos_ds.table_sink.participants import FileParticipants
from kafka_eos_ds.table_sink.partitions import DEFAULT_PARTITION, Partitioning, values_of
from kafka_eos_ds.table_sink.sink import FileSink
from kafka_eos_ds.twophase import DoneMark, Kind, WriteId
from kafka_eos_ds.twophase.writers import Task

SCHEMA = StructType([StructField("id", LongType()), StructField("country", StringType()),
                     StructField("ts", TimestampType()), StructField("day", DateType())])
UTC = dt.timezone.utc


def _batch(ids, countries, times):
    return pa.RecordBatch.from_pydict({
        "id": pa.array(ids, pa.int64()), "country": pa.array(countries, pa.string()),
        "ts": pa.array(times, pa.timestamp("us", tz="UTC")),
        "day": pa.array([t.date() if t else None for t in times], pa.date32())})


# -- partitionBy -------------------------------------------------------------------------

def test_columns_and_time_buckets_make_hive_directories_in_first_seen_order():
    part = Partitioning.parse("country, dt=date(ts), hour=hour(ts)", "Europe/Berlin", SCHEMA)
    late, early = dt.datetime(2026, 11, 24, 23, 30, tzinfo=UTC), dt.datetime(2026, 11, 24, 22, 30, tzinfo=UTC)
    groups = part.split(_batch([1, 2, 3, 4, 5], ["de", "a/b", None, "de", ""], [late, early, None, late, early]))
    assert [(d, g.column(0).to_pylist()) for d, g in groups] == [
        ("country=de/dt=2026-11-25/hour=00", [1, 4]),             # 23:30 UTC is 00:30 in Berlin
        ("country=a%2Fb/dt=2026-11-24/hour=23", [2]),              # '/' escaped as Hive does
        (f"country={DEFAULT_PARTITION}/dt={DEFAULT_PARTITION}/hour={DEFAULT_PARTITION}", [3]),
        (f"country={DEFAULT_PARTITION}/dt=2026-11-24/hour=23", [5]),  # '' and null: one partition
    ]
    # A plain partition column leaves the files (its value is in the path); a bucketed one stays.
    assert groups[0][1].schema.names == ["id", "ts", "day"]
    assert values_of("country=a%2Fb/dt=2026-11-24") == ["a/b", "2026-11-24"]


def test_no_partition_columns_is_one_group_of_every_column():
    batch = _batch([1, 2], ["x", "y"], [None, None])
    ((directory, rows),) = Partitioning.parse(None, None, SCHEMA).split(batch)
    assert directory == "" and rows.schema.names == batch.schema.names and rows.num_rows == 2


@pytest.mark.parametrize("text, zone, message", [
    ("nope", None, "does not have"),
    ("ts", None, "is timestamp"),
    ("dt=week(ts)", None, "not a time bucket"),
    ("hour=hour(day)", None, "needs a timestamp column"),
    ("dt=date(nope)", None, "does not have"),
    ("country=date(ts)", None, "would hide"),
    ("country, COUNTRY", None, "twice"),
    ("dt=date(ts", None, "cannot read"),
    ("country", "Mars/Olympus", "'partitionTimeZone'"),
])
def test_bad_partition_by_names_the_option_before_anything_is_written(text, zone, message):
    with pytest.raises(ConfigError, match=message) as info:
        Partitioning.parse(text, zone, SCHEMA)
    assert "'partitionBy'" in str(info.value) or "'partitionTimeZone'" in str(info.value)


def test_partitioning_by_every_column_is_refused():
    two = StructType([StructField("id", LongType()), StructField("country", StringType())])
    with pytest.raises(ConfigError, match="'partitionBy' names every column"):
        Partitioning.parse("id, country", None, two)


# -- a partitioned table on a local disk, through the sink's steps -------------------------

def test_a_task_writes_one_file_per_partition_and_the_commit_puts_each_in_its_directory(tmp_path):
    options = {"path": str(tmp_path), "partitionBy": "dt=date(ts),country"}
    sink = FileSink(FileSinkConfig.from_options(options, SCHEMA), SCHEMA)
    day1, day2 = dt.datetime(2026, 11, 24, 1, tzinfo=UTC), dt.datetime(2026, 11, 25, 1, tzinfo=UTC)
    write = WriteId(Kind.STREAM, "5a2bb5a1-query", 7)
    msg = sink.write(Task(write, 3, 0), DoneMark(), iter([_batch([1, 2, 3], ["de", "fr", "de"], [day1, day1, day2]),
                                                          _batch([4], ["de"], [day1])]))
    p = msg.participant()
    staged = p.handle.files
    assert p.records == 4 and [(f.partition, f.records) for f in staged] == [
        ("dt=2026-11-24/country=de", 2), ("dt=2026-11-24/country=fr", 1), ("dt=2026-11-25/country=de", 1)]
    assert not list(tmp_path.glob("dt=*"))  # nothing visible before the commit
    sink.commit(write, [p])
    finals = sorted(q.relative_to(tmp_path).as_posix() for q in tmp_path.glob("dt=*/*/*"))
    # One name per (query, batch, task) in each partition: a re-run's file has the same name.
    assert finals == ["dt=2026-11-24/country=de/part-00007-00003-5a2bb5a1.parquet",
                      "dt=2026-11-24/country=fr/part-00007-00003-5a2bb5a1.parquet",
                      "dt=2026-11-25/country=de/part-00007-00003-5a2bb5a1.parquet"]
    table = ds.dataset(str(tmp_path), format="parquet", partitioning="hive").to_table().sort_by("id")
    assert table.column("id").to_pylist() == [1, 2, 3, 4]
    assert table.column("country").to_pylist() == ["de", "fr", "de", "de"]
    assert pq.read_schema(tmp_path / finals[0]).names == ["id", "ts", "day"]
    # Committed again (a restarted driver finishing the decision): nothing changes.
    sink.commit(write, [p])
    assert sorted(q.relative_to(tmp_path).as_posix() for q in tmp_path.glob("dt=*/*/*")) == finals
    assert FileParticipants(sink.config.layout).open_ids(WriteId(Kind.STREAM, "5a2bb5a1-query", -1)) == []


def test_a_partitioned_task_that_fails_leaves_no_file(tmp_path):
    sink = FileSink(FileSinkConfig.from_options({"path": str(tmp_path), "partitionBy": "country"}, SCHEMA), SCHEMA)
    write = WriteId(Kind.STREAM, "q", 0)

    def failing():
        yield _batch([1, 2], ["de", "fr"], [None, None])
        raise RuntimeError("task killed")

    with pytest.raises(RuntimeError):
        sink.write(Task(write, 0, 0), DoneMark(), failing())
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


# -- the local store -------------------------------------------------------------------------

def test_local_store_never_replaces_a_file(tmp_path):
    store = LocalStore()
    store.put(str(tmp_path / "d" / "a"), b"first", new=True)
    with pytest.raises(FileExistsError):
        store.put(str(tmp_path / "d" / "a"), b"second", new=True)
    store.put(str(tmp_path / "d" / "b"), b"other")
    with pytest.raises(FileExistsError):
        store.rename(str(tmp_path / "d" / "b"), str(tmp_path / "d" / "a"))
    assert (tmp_path / "d" / "a").read_bytes() == b"first" and (tmp_path / "d" / "b").read_bytes() == b"other"
    store.rename(str(tmp_path / "d" / "b"), str(tmp_path / "e" / "f" / "b"))  # the directories are made
    with pytest.raises(FileNotFoundError):
        store.rename(str(tmp_path / "d" / "b"), str(tmp_path / "d" / "c"))
    out = store.create(str(tmp_path / "g" / "new"))
    with pytest.raises(FileExistsError):
        store.create(str(tmp_path / "g" / "new"))
    out.write(b"x")
    out.close()
    assert sorted(store.list_names(str(tmp_path))) == ["d", "e", "g"] and store.list_names(str(tmp_path / "no")) == []
    assert [p.name for p in (tmp_path / "d").iterdir()] == ["a"]  # no temporary file left


# -- options for remote tables -----------------------------------------------------------------

def test_hdfs_and_s3_paths_name_their_store_and_the_table_location():
    hdfs = FileSinkConfig.from_options({"path": "hdfs://nn:8020/warehouse/events/"})
    assert hdfs.root.as_posix() == "/warehouse/events" and hdfs.uri == "hdfs://nn:8020/warehouse/events"
    s3 = FileSinkConfig.from_options({"path": "s3://lake/events"})
    assert s3.uri == "s3a://lake/events"  # one spelling: s3://, s3n:// and s3a:// name the same objects


def test_credentials_never_appear_in_reprs_or_errors():
    secret = "wJalrXUtnFEMI-K7MDENG"
    options = {"path": "s3a://lake/events", "fs.s3a.access.key": "AKIAEXAMPLE", "fs.s3a.secret.key": secret,
               "fs.s3a.session.token": secret + "-token", "fs.s3a.multipart.size": "1M"}
    with pytest.raises(ConfigError, match="fs.s3a.multipart.size") as info:
        FileSinkConfig.from_options(options)
    assert secret not in str(info.value)
    cfg = FileSinkConfig.from_options({**options, "fs.s3a.multipart.size": "16M"})
    assert cfg.part_size == 16 * 1024 * 1024
    assert secret not in repr(cfg) and secret not in repr(cfg.storage) and "[redacted]" in repr(cfg.storage)
    assert StorageOptions.from_options(options).get("FS.S3A.SECRET.KEY") == secret  # the client still gets it


@pytest.mark.parametrize("options, message", [
    ({"hive.metastore.uris": "thrift://ms:9083"}, "'table'"),
    ({"table": "lake.events"}, "'hive.metastore.uris'"),
    ({"table": "lake.events", "hive.metastore.uris": "http://ms:9083"}, "thrift://host:port"),
    ({"table": "a.b.c", "hive.metastore.uris": "thrift://ms:9083"}, "not a table name"),
    ({"table": "events", "hive.metastore.uris": "thrift://ms:9083", "fileFormat": "jsonl"}, "Parquet"),
])
def test_table_options_are_checked_together(tmp_path, options, message):
    with pytest.raises(ConfigError, match=message):
        FileSinkConfig.from_options({"path": str(tmp_path), **options})


# -- announcing a committed batch ----------------------------------------------------------------

def test_success_markers_appear_in_each_partition_a_batch_committed_into(tmp_path):
    options = {"path": str(tmp_path), "partitionBy": "country", "successFile": "true"}
    sink = FileSink(FileSinkConfig.from_options(options, SCHEMA), SCHEMA)
    write = WriteId(Kind.STREAM, "q", 0)
    msg = sink.write(Task(write, 0, 0), DoneMark(), iter([_batch([1, 2], ["de", "fr"], [None, None])]))
    assert not list(tmp_path.glob("*/_SUCCESS"))
    sink.commit(write, [msg.participant()])
    assert sorted(p.parent.name for p in tmp_path.glob("*/_SUCCESS")) == ["country=de", "country=fr"]
    # Readers skip it ('_'): the table holds the two rows only.
    assert ds.dataset(str(tmp_path), format="parquet", partitioning="hive").count_rows() == 2


def test_a_publish_step_that_failed_runs_again_when_a_restart_finishes_the_batch(tmp_path):
    """The driver dies (or the metastore is down) after the batch's files are final and
    before it is recorded done: the restart's recovery publishes the batch again."""
    from kafka_eos_ds.errors import StorageError
    from kafka_eos_ds.table_sink.decision_log import FileDecisionLog
    from kafka_eos_ds.table_sink.layout import Layout
    from kafka_eos_ds.twophase import DECIDED, DONE, TwoPhaseCommitter

    published: list[int] = []

    def publish(decision):
        published.append(decision.batch_id)
        if len(published) == 1:
            raise StorageError("no Hive metastore answers", retriable=False)

    sink = FileSink(FileSinkConfig.from_options({"path": str(tmp_path)}, SCHEMA), SCHEMA)
    layout = Layout(tmp_path)
    write = WriteId(Kind.STREAM, "q", 3)
    msg = sink.write(Task(write, 0, 0), DoneMark(), iter([_batch([1], ["de"], [None])]))
    committer = TwoPhaseCommitter(FileDecisionLog(layout), FileParticipants(layout), streams_share_ids=False,
                                  publish=publish)
    with pytest.raises(StorageError):
        committer.commit(write, [msg.participant()])
    assert published == [3] and FileDecisionLog(layout).latest("q:q").state == DECIDED
    assert len(list(tmp_path.glob("part-*"))) == 1  # the files are final; the batch is not done
    mark = TwoPhaseCommitter(FileDecisionLog(layout), FileParticipants(layout), streams_share_ids=False,
                             publish=publish).recover(WriteId(Kind.STREAM, "q", -1))
    assert published == [3, 3] and mark == DoneMark("q", 3)
    assert FileDecisionLog(layout).latest("q:q").state == DONE


def test_a_metastore_that_does_not_answer_is_a_storage_error_naming_the_option():
    from kafka_eos_ds.errors import StorageError
    from kafka_eos_ds.table_sink.metastore import Metastore

    with pytest.raises(StorageError, match="'hive.metastore.uris'") as info:
        Metastore("lake", "events", ["thrift://127.0.0.1:1"], "file:///lake/events").register(["dt=1"])
    assert info.value.retriable  # a metastore restarting: the committer retries


def test_rows_as_pyspark_40_hands_them_are_partitioned_too(tmp_path):
    """pyspark 4.0 gives the sink Rows, not Arrow batches: they are gathered into batches
    with the DataFrame's schema and split the same way."""
    from pyspark.sql import Row

    sink = FileSink(FileSinkConfig.from_options({"path": str(tmp_path), "partitionBy": "dt=date(ts)"}, SCHEMA),
                    SCHEMA)
    write = WriteId(Kind.STREAM, "q", 0)
    day = dt.datetime(2026, 11, 24, 12, tzinfo=UTC)
    rows = [Row(id=i, country="de", ts=day + dt.timedelta(days=i % 2), day=None) for i in range(4)]
    msg = sink.write(Task(write, 0, 0), DoneMark(), iter(rows))
    sink.commit(write, [msg.participant()])
    table = ds.dataset(str(tmp_path), format="parquet", partitioning="hive").to_table()
    assert sorted(zip(table.column("id").to_pylist(), map(str, table.column("dt").to_pylist()), strict=True)) == [
        (0, "2026-11-24"), (1, "2026-11-25"), (2, "2026-11-24"), (3, "2026-11-25")]


def test_a_rows_naive_timestamp_is_the_workers_local_time(tmp_path, monkeypatch):
    """A Row holds Spark's TIMESTAMP as the Python worker's local time, without a zone:
    00:30 in Berlin is 23:30 UTC the day before, and the UTC day bucket says so."""
    import time

    from pyspark.sql import Row

    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    try:
        sink = FileSink(FileSinkConfig.from_options({"path": str(tmp_path), "partitionBy": "dt=date(ts)"}, SCHEMA),
                        SCHEMA)
        write = WriteId(Kind.STREAM, "q", 0)
        row = Row(id=1, country="de", ts=dt.datetime(2026, 11, 24, 0, 30), day=None)
        sink.commit(write, [sink.write(Task(write, 0, 0), DoneMark(), iter([row])).participant()])
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    assert [p.name for p in tmp_path.glob("dt=*")] == ["dt=2026-11-23"]
