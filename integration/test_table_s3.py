"""The file sink's tables on an S3-compatible store (an embedded MinIO on 127.0.0.1, or
the store ``KAFKA_EOS_S3_ENDPOINT`` names): a task's file is a multipart upload at its
final key, invisible until the driver completes it at commit; a retried completion finds
the object; a zombie's upload is never completed and recovery aborts it.

The credentials reach the sink as the options Spark users already have
(``fs.s3a.access.key``, ...), and never appear in what the sink or Spark log.
"""

from __future__ import annotations

import pytest

pytest.importorskip("boto3", reason="the S3 client is not installed (pip install -e '.[s3]')")

import pyarrow as pa  # noqa: E402
from pyspark.sql.types import LongType, StringType, StructField, StructType  # noqa: E402

from integration.sink_runs import seed  # noqa: E402
from integration.tables import Table, partition_values, s3_options  # noqa: E402
from kafka_eos_ds.storage import StorageOptions  # noqa: E402
from kafka_eos_ds.storage.s3 import S3Store  # noqa: E402
from kafka_eos_ds.table_sink.config import FileSinkConfig, check_writable  # noqa: E402
from kafka_eos_ds.table_sink.layout import writer_dir  # noqa: E402
from kafka_eos_ds.table_sink.sink import FileSink  # noqa: E402
from kafka_eos_ds.table_sink.uploads import UploadParticipants  # noqa: E402
from kafka_eos_ds.twophase import DoneMark, Kind, Outcome, WriteId  # noqa: E402
from kafka_eos_ds.twophase.writers import Task  # noqa: E402
from kafka_eos_tools.topics import run_to_end  # noqa: E402

# MinIO costs a 5.5-minute build on a new machine (docs/dev/testing.md): the full profile,
# as the storage servers' own checks; the gate runs the same sink steps on HDFS.
pytestmark = [pytest.mark.full, pytest.mark.storage]

RECORDS, BATCH = 450, 150
COLUMNS = ["timestamp", "pmod(crc32(key), 3) as shard"]
PARTITION_BY = "dt=date(timestamp),shard"
SCHEMA = StructType([StructField("id", LongType()), StructField("country", StringType())])


def _batch(ids, countries):
    return pa.RecordBatch.from_pydict({"id": pa.array(ids, pa.int64()), "country": pa.array(countries, pa.string())})


# -- the store ---------------------------------------------------------------------------------

def test_s3_store_creates_small_files_only_once_and_completes_uploads_once(s3):
    store = S3Store(s3.new_bucket(), StorageOptions(s3_options(s3)))
    store.put("/t/_kafka_eos/w/decisions/000000000001.json", b"{}", new=True)
    with pytest.raises(FileExistsError):  # If-None-Match: the numbered decision is taken
        store.put("/t/_kafka_eos/w/decisions/000000000001.json", b"{}", new=True)
    assert store.list_names("/t/_kafka_eos/w") == ["decisions"] and store.list_names("/t/none") == []
    key = "/t/dt=1/part-00000-00000-q00000000-abc.parquet"
    upload = store.start_upload(key, {"kafka-eos-file": "tag-1"})
    parts = [(1, store.upload_part(key, upload, 1, b"x" * 100))]
    assert store.uploads("/t") == [(key, upload)] and not store.exists(key)
    store.complete(key, upload, parts)
    assert store.metadata(key) == {"kafka-eos-file": "tag-1"} and store.uploads("/t") == []
    with pytest.raises((FileNotFoundError, FileExistsError)):  # completed before: the caller looks at the object
        store.complete(key, upload, parts)
    other = store.start_upload(key, {})
    store.upload_part(key, other, 1, b"y" * 100)
    with pytest.raises(FileExistsError):  # never over an existing object
        store.complete(key, other, [(1, store.upload_part(key, other, 1, b"y" * 100))])
    store.abort(key, other)
    store.abort(key, other)  # gone already: no error
    with pytest.raises(FileNotFoundError):  # a fenced zombie's next part
        store.upload_part(key, other, 2, b"z")
    assert store.read_text(key) == "x" * 100


def test_a_key_longer_than_s3_allows_is_refused_as_not_retriable(s3):
    # As on HDFS: a directory marker that cannot be written because the key is too long is
    # left to the metastore's own refusal, never retried until the commit timeout.
    from kafka_eos_ds.errors import StorageError

    store = S3Store(s3.new_bucket(), StorageOptions(s3_options(s3)))
    with pytest.raises(StorageError, match="longer than S3's 1,024 bytes") as info:
        store.mark_directory(f"/t/country={'x' * 1100}")
    assert not info.value.retriable


def test_the_store_passes_the_create_if_absent_probe_and_the_probe_leaves_nothing(s3):
    bucket = s3.new_bucket()
    config = FileSinkConfig.from_options({"path": f"s3a://{bucket}/lake/probed", **s3_options(s3)}, SCHEMA)
    # A store ignoring If-None-Match: * on PutObject or CompleteMultipartUpload raises ConfigError.
    check_writable(config.layout, config.store())
    assert config.store().list_names("/lake/probed/_kafka_eos") == []
    assert Table(f"s3a://{bucket}/lake/probed", s3).uploads() == []  # the completion probe's upload is gone


def test_the_sinks_steps_on_s3_commit_each_upload_once_and_never_a_zombies(s3, monkeypatch):
    bucket = s3.new_bucket()
    url = f"s3a://{bucket}/lake/events"
    # The credentials from the environment this time (boto3's own chain), the rest as options.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3.access_key or "")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3.secret_key or "")
    where = {k: v for k, v in s3_options(s3).items() if k not in ("fs.s3a.access.key", "fs.s3a.secret.key")}
    config = FileSinkConfig.from_options({"path": url, "partitionBy": "country", **where}, SCHEMA)
    sink, table = FileSink(config, SCHEMA), Table(url, s3)
    write = WriteId(Kind.STREAM, "5a2bb5a1-query", 4)
    live = sink.write(Task(write, 0, 1), DoneMark(), iter([_batch([1, 2, 3], ["de", "fr", "de"])])).participant()
    zombie = sink.write(Task(write, 0, 0), DoneMark(), iter([_batch([99], ["de"])])).participant()
    # Pre-committed: nothing listed or readable, three uploads in progress.
    assert table.files() == [] and len(table.uploads()) == 3
    assert live.id == zombie.id  # an upload is known by its task: every attempt is one id
    sink.commit(write, [live])
    w = writer_dir("q:5a2bb5a1-query")
    assert table.finals() == [f"country=de/part-00004-00000-{w}-5a2bb5a1.parquet",
                              f"country=fr/part-00004-00000-{w}-5a2bb5a1.parquet"]
    assert sorted(v for _, v in table.rows("id")) == [1, 2, 3]
    # The zombie's upload, of the same id but never named by a decision, is never completed:
    # the sweep after the commit aborts it (the live participant's uploads are complete by
    # then, so only strays match the id).
    assert table.uploads() == []
    # A restarted driver completing the same uploads again: NoSuchUpload (MinIO) or the same
    # success; the object carries the participant's tag either way.
    ports = UploadParticipants(config.layout, config.store())  # type: ignore[arg-type]
    assert ports.commit(live) is Outcome.COMMITTED
    assert sorted(v for _, v in table.rows("id")) == [1, 2, 3]
    sink._committer().recover(WriteId(Kind.STREAM, "5a2bb5a1-query", -1))
    assert table.uploads() == [] and sorted(v for _, v in table.rows("id")) == [1, 2, 3]
    # An upload aborted before its commit (a lifecycle rule, a manual clean-up) is lost, loudly.
    gone = sink.write(Task(WriteId(Kind.STREAM, "5a2bb5a1-query", 5), 0, 0), DoneMark(),
                      iter([_batch([5], ["it"])])).participant()
    for key, upload in config.store().uploads("/lake/events"):  # type: ignore[attr-defined]
        config.store().abort(key, upload)  # type: ignore[attr-defined]
    assert ports.commit(gone) is Outcome.LOST


# -- a streaming query -------------------------------------------------------------------------

def test_a_streaming_query_writes_a_partitioned_table_on_s3_each_record_once(spark, kafka, new_topic, s3,
                                                                             tmp_path):
    topic = new_topic(2, prefix="s3t")
    seed(kafka.bootstrap, topic, 400)
    url = f"s3a://{s3.new_bucket()}/lake/events"
    writer = (spark.readStream.format("kafka_eos").option("kafka.bootstrap.servers", kafka.bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "100")
              .load().selectExpr("key", "cast(value as string) as value", *COLUMNS)
              .writeStream.format("kafka_eos_file").option("path", url).option("partitionBy", PARTITION_BY)
              .options(**s3_options(s3)).option("checkpointLocation", str(tmp_path / "checkpoint")))
    run_to_end(writer, kafka.bootstrap, topic)
    table = Table(url, s3)
    report = table.audit(400)
    assert report.ok and report.leftovers == [], report
    assert {partition_values(d)["shard"] for d, _ in table.rows()} == {"0", "1", "2"}
    # Only the decisions are kept under _kafka_eos on S3: files are never copied there.
    assert all(f.startswith("dt=") or "/decisions/" in f for f in table.files()), table.files()
