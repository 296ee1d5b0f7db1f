"""The file sink's tables on HDFS (a real MiniDFSCluster on 127.0.0.1, or the cluster
``KAFKA_EOS_HDFS`` names): the store's moves, the sink's steps, and a streaming query from
Kafka into Hive-style partitions. The crash matrix on HDFS (with the Hive metastore) is
integration/test_table_crash.py.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.storage  # starts HDFS: the gate's second lane

pytest.importorskip("hdfs_native", reason="the HDFS client is not installed (pip install -e '.[hdfs]')")

import pyarrow as pa  # noqa: E402

from integration.sink_runs import seed  # noqa: E402
from integration.tables import Table, partition_values  # noqa: E402
from kafka_eos_ds.storage import StorageOptions  # noqa: E402
from kafka_eos_ds.storage.hdfs import HdfsStore  # noqa: E402
from kafka_eos_ds.table_sink.config import FileSinkConfig  # noqa: E402
from kafka_eos_ds.table_sink.layout import FileId, query_token, writer_dir  # noqa: E402
from kafka_eos_ds.table_sink.participants import FileParticipants  # noqa: E402
from kafka_eos_ds.table_sink.sink import FileSink  # noqa: E402
from kafka_eos_ds.table_sink.task import TaskFiles  # noqa: E402
from kafka_eos_ds.twophase import DoneMark, Kind, Outcome, WriteId  # noqa: E402
from kafka_eos_ds.twophase.writers import Task  # noqa: E402
from kafka_eos_tools.topics import run_to_end  # noqa: E402

RECORDS, BATCH, SHARDS = 450, 150, 3
COLUMNS = ["timestamp", f"pmod(crc32(key), {SHARDS}) as shard"]
PARTITION_BY = "dt=date(timestamp),shard"


def _path(url: str) -> str:
    return "/" + url.split("://", 1)[1].split("/", 1)[1]


# -- the store ---------------------------------------------------------------------------------

def test_hdfs_store_creates_and_moves_without_ever_replacing_a_file(hdfs):
    store = HdfsStore(hdfs.url, StorageOptions())
    base = _path(hdfs.path())
    out = store.create(f"{base}/staged/a")
    out.write(b"first")
    out.close()
    with pytest.raises(FileExistsError):
        store.create(f"{base}/staged/a")  # two writers never share a file
    store.put(f"{base}/staged/b", b"second", new=True)
    with pytest.raises(FileExistsError):
        store.put(f"{base}/staged/b", b"again", new=True)
    with pytest.raises(FileExistsError):
        store.rename(f"{base}/staged/a", f"{base}/staged/b")
    assert store.read_text(f"{base}/staged/b") == "second"
    store.rename(f"{base}/staged/a", f"{base}/final/dt=1/a")  # the partition directory is made
    with pytest.raises(FileNotFoundError):
        store.rename(f"{base}/staged/a", f"{base}/final/dt=1/c")  # gone: fenced, or moved already
    assert store.exists(f"{base}/final/dt=1/a") and not store.exists(f"{base}/staged/a")
    assert store.list_names(f"{base}/staged") == ["b"] and store.list_names(f"{base}/none") == []
    with pytest.raises(FileNotFoundError):
        store.read_text(f"{base}/none")
    store.put(f"{base}/staged/b", b"replaced")
    assert store.read_text(f"{base}/staged/b") == "replaced"
    store.delete(f"{base}/staged/none")  # nothing there: no error
    store.delete_tree(f"{base}/final")
    assert store.list_names(base) == ["staged"]


def test_a_name_longer_than_the_namenode_allows_is_refused_as_not_retriable(hdfs):
    # The table's staging asks again for a directory only when asking again can help: a
    # partition value too long for a name is left to the metastore's or the commit's own
    # refusal, instead of retried until the commit timeout.
    from kafka_eos_ds.errors import StorageError

    store = HdfsStore(hdfs.url, StorageOptions())
    with pytest.raises(StorageError, match="shorten the partition values") as info:
        store.make_dirs(f"{_path(hdfs.path())}/country={'x' * 400}")
    assert not info.value.retriable


def _batch(ids, days):
    import datetime as dt

    return pa.RecordBatch.from_pydict({"id": pa.array(ids, pa.int64()),
                                       "day": pa.array([dt.date(2026, 11, d) for d in days], pa.date32())})


def test_the_sinks_steps_on_hdfs_commit_each_file_once_and_never_a_zombies(hdfs):
    from pyspark.sql.types import DateType, LongType, StructField, StructType

    schema = StructType([StructField("id", LongType()), StructField("day", DateType())])
    url = hdfs.path("table")
    sink = FileSink(FileSinkConfig.from_options({"path": url, "partitionBy": "day"}, schema), schema)
    write = WriteId(Kind.STREAM, "5a2bb5a1-query", 4)
    live = sink.write(Task(write, 0, 0), DoneMark(), iter([_batch([1, 2, 3], [24, 25, 24])])).participant()
    # A zombie of the same id (attempt numbers restart per driver run) writes too.
    zombie = sink.write(Task(write, 0, 0), DoneMark(), iter([_batch([99], [24])])).participant()
    table = Table(url)
    assert table.finals() == [] and len(table.pending()) == 3
    sink.commit(write, [live])
    assert table.finals() == ["day=2026-11-24/part-00004-00000-5a2bb5a1.parquet",
                              "day=2026-11-25/part-00004-00000-5a2bb5a1.parquet"]
    assert sorted(v for _, v in table.rows("id")) == [1, 2, 3]
    # The zombie's file, of the same id but never named by a decision, is swept after the
    # commit (the live participant's files are final by then, so only strays match the id).
    assert zombie.id == live.id and table.pending() == [] and table.staged() == []
    # The participant committed again (a restarted driver finishing the decision): nothing changes.
    ports = FileParticipants(sink.config.layout, sink.config.store())  # type: ignore[arg-type]
    assert ports.commit(live) is Outcome.COMMITTED
    assert sorted(v for _, v in table.rows("id")) == [1, 2, 3] and table.staged() == []
    # A fenced writer cannot pre-commit: its in-progress file is gone.
    files = TaskFiles(sink.config, FileId.of(WriteId(Kind.STREAM, "5a2bb5a1-query", 5), 0, 0), schema)
    files.write_all([_batch([7], [26])])
    ports.fence(str(files.fid))
    with pytest.raises(FileNotFoundError):
        files.pre_commit()
    assert table.staged() == [] and len(table.finals()) == 2


# -- a streaming query -------------------------------------------------------------------------

@pytest.mark.full  # the gate streams into partitioned HDFS tables in test_table_crash.py and test_table_metastore.py
def test_a_streaming_query_writes_a_partitioned_table_on_hdfs_each_record_once(spark, kafka, new_topic, hdfs):
    topic = new_topic(2, prefix="tbl")
    seed(kafka.bootstrap, topic, 400)
    url, checkpoint = hdfs.path("events"), hdfs.path("checkpoint")  # both where production keeps them
    run_to_end(spark.readStream.format("kafka_eos").option("kafka.bootstrap.servers", kafka.bootstrap)
               .option("subscribe", topic).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "100")
               .load().selectExpr("key", "cast(value as string) as value", *COLUMNS)
               .writeStream.format("kafka_eos_file").option("path", url).option("partitionBy", PARTITION_BY)
               .option("checkpointLocation", checkpoint), kafka.bootstrap, topic)
    table = Table(url)
    report = table.audit(400)
    assert report.ok and report.leftovers == [], report
    directories = {d for d, _ in table.rows()}
    assert {partition_values(d)["shard"] for d in directories} == {"0", "1", "2"}
    assert all(d.startswith("dt=") for d in directories)
    # The final names are deterministic per (query, batch, task): one per task and batch in a partition.
    names = [f.rsplit("/", 1)[1] for f in table.finals()]
    assert len(names) == len(set(table.finals())) and all(n.startswith("part-000") for n in names)
    # Spark reads the table back with its partition columns from the directory names.
    read = spark.read.parquet(url)
    assert read.count() == 400 and {"dt", "shard"} <= set(read.columns)
    assert read.where("shard = 0").count() == sum(1 for d, _ in table.rows() if partition_values(d)["shard"] == "0")


def test_two_queries_write_one_table_on_hdfs_each_staging_apart(spark, kafka, new_topic, hdfs):
    """Two streams (two topics) into one partitioned table at the same time: each stages
    under its own writer directory and names its files with its own query token."""
    topics = [new_topic(2, prefix="two"), new_topic(2, prefix="two")]
    seed(kafka.bootstrap, topics[0], 300)
    seed(kafka.bootstrap, topics[1], 300, start=300)
    url = hdfs.path("events")
    queries = [spark.readStream.format("kafka_eos").option("kafka.bootstrap.servers", kafka.bootstrap)
               .option("subscribe", topic).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "100")
               .load().selectExpr("key", "cast(value as string) as value", *COLUMNS)
               .writeStream.format("kafka_eos_file").option("path", url).option("partitionBy", PARTITION_BY)
               .option("checkpointLocation", hdfs.path("checkpoint")).trigger(availableNow=True).start()
               for topic in topics]
    for query in queries:
        assert query.awaitTermination(240), "the query did not finish"
        assert query.exception() is None, query.exception()
    table = Table(url)
    report = table.audit(600)
    assert report.ok and report.leftovers == [], report
    writers = {f.split("/")[1] for f in table.files() if "/decisions/" in f}
    assert writers == {writer_dir(f"q:{q.id}") for q in queries}
    tokens = {f.rsplit("-", 1)[1].split(".")[0] for f in table.finals()}
    assert tokens == {query_token(q.id) for q in queries}
