"""The storage servers prove the properties the table sink will rely on, through the
client libraries the product is to use (docs/dev/decisions.md): hdfs-native for HDFS, boto3
for S3, hmsclient for the Hive metastore, and Spark's own Hadoop and Hive clients.

* HDFS: a rename is one step (a reader sees the whole directory moved or none of it)
  and never overwrites, so pending -> final can be a rename that at most one committer
  wins.
* S3: a multipart upload started by one process and completed by another is invisible
  to LIST and GET until CompleteMultipartUpload; completing it again answers
  NoSuchUpload on MinIO (an existing store may answer the same success again, as AWS S3
  does) while the object stays.
* Hive metastore: partitions are added idempotently (``ifNotExists``), and a Spark
  session reading the table sees a partition's rows only once it is registered.
* Spark's Hadoop client writes and resumes a streaming checkpoint on ``hdfs://``, which
  Python then reads.
* GCS (an emulator): the sink's checkpoint reader (pyarrow's GCS client) sees what another
  client wrote, and tells a missing file from a missing directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

_NO_EXTRA = "the storage clients are not installed (pip install -e '.[hdfs,s3,hive]')"
hdfs_native = pytest.importorskip("hdfs_native", reason=_NO_EXTRA)
boto3 = pytest.importorskip("boto3", reason=_NO_EXTRA)
pytest.importorskip("hmsclient", reason=_NO_EXTRA)

from integration.hive_tables import external_parquet_table, partition  # noqa: E402
from integration.spark_driver import SparkDriver  # noqa: E402
from integration.storage import GcsUnderTest, HdfsUnderTest, MetastoreUnderTest, S3UnderTest  # noqa: E402

# What the storage servers themselves do, which the table sink will rely on: the full
# profile. The gate meets HDFS through the product (test_remote_checkpoint.py); MinIO
# (a 5.5-minute build on a new machine) and the metastore only here.
pytestmark = [pytest.mark.full, pytest.mark.storage]


def _path(url: str) -> str:
    """The path part of an hdfs:// URL, as hdfs-native's client takes it."""
    return "/" + url.split("://", 1)[1].split("/", 1)[1]


def _write(client, path: str, data: bytes) -> None:
    with client.create(path) as out:
        out.write(data)


def _read(client, path: str) -> bytes:
    with client.read(path) as source:
        return source.read()


# -- HDFS ----------------------------------------------------------------------------------

def test_hdfs_directory_rename_is_one_step_for_every_reader(hdfs: HdfsUnderTest):
    client = hdfs_native.Client(hdfs.url)
    table = _path(hdfs.path("table"))
    pending, final = f"{table}/_pending/part-dt=1", f"{table}/dt=1"
    client.mkdirs(f"{table}/_pending", create_parent=True)
    for i in range(20):
        _write(client, f"{pending}/f-{i:02d}.parquet", b"x" * 100)

    observations: list[tuple[bool, bool, int]] = []
    stop = threading.Event()

    def observe() -> None:
        reader = hdfs_native.Client(hdfs.url)
        while not stop.is_set():
            # One listing of the table directory is one NameNode call: it shows the
            # final directory or not, never half of it.
            names = {s.path.rsplit("/", 1)[-1] for s in reader.list_status(table)}
            files = -1
            if "dt=1" in names:
                files = len(list(reader.list_status(final)))
            staged = {s.path.rsplit("/", 1)[-1] for s in reader.list_status(f"{table}/_pending")}
            observations.append(("dt=1" in names, "part-dt=1" in staged, files))

    thread = threading.Thread(target=observe)
    thread.start()
    try:
        time.sleep(0.5)
        client.rename(pending, final, overwrite=False)
        time.sleep(0.5)
    finally:
        stop.set()
        thread.join(30)
    assert observations[0][:2] == (False, True) and observations[-1][:2] == (True, False)
    for seen_final, _, files in observations:
        assert files in (-1, 20) and (files == 20) == seen_final, observations
    assert len(list(client.list_status(final))) == 20


def test_hdfs_rename_refuses_to_overwrite_a_file_or_a_directory(hdfs: HdfsUnderTest):
    client = hdfs_native.Client(hdfs.url)
    base = _path(hdfs.path())
    client.mkdirs(f"{base}/final-dir", create_parent=True)
    _write(client, f"{base}/final-dir/part-0", b"committed")
    _write(client, f"{base}/final", b"committed")
    client.mkdirs(f"{base}/pending-dir")
    _write(client, f"{base}/pending-dir/part-0", b"late")
    _write(client, f"{base}/pending", b"late")

    with pytest.raises(FileExistsError):
        client.rename(f"{base}/pending", f"{base}/final", overwrite=False)
    # Not "move into it", as the old rename RPC and POSIX mv do with an existing directory.
    with pytest.raises(FileExistsError):
        client.rename(f"{base}/pending-dir", f"{base}/final-dir", overwrite=False)

    assert _read(client, f"{base}/final") == b"committed"
    assert [s.path.rsplit("/", 1)[-1] for s in client.list_status(f"{base}/final-dir")] == ["part-0"]
    assert _read(client, f"{base}/final-dir/part-0") == b"committed"
    assert _read(client, f"{base}/pending") == b"late"  # still there for whoever cleans up


def test_hdfs_two_committers_renaming_to_one_name_one_wins(hdfs: HdfsUnderTest):
    base = _path(hdfs.path())
    client = hdfs_native.Client(hdfs.url)
    client.mkdirs(base, create_parent=True)
    for attempt in range(2):
        _write(client, f"{base}/pending-{attempt}", f"attempt {attempt}".encode())
    barrier = threading.Barrier(2)
    outcomes: dict[int, str] = {}

    def commit(attempt: int) -> None:
        own = hdfs_native.Client(hdfs.url)
        barrier.wait()
        try:
            own.rename(f"{base}/pending-{attempt}", f"{base}/final", overwrite=False)
            outcomes[attempt] = "won"
        except FileExistsError:
            outcomes[attempt] = "refused"

    threads = [threading.Thread(target=commit, args=(a,)) for a in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(outcomes.values()) == ["refused", "won"]
    winner = next(a for a, outcome in outcomes.items() if outcome == "won")
    assert _read(client, f"{base}/final") == f"attempt {winner}".encode()


# -- S3 ------------------------------------------------------------------------------------

_S3_CLIENT = """
import json, os, sys, boto3
from botocore.config import Config
s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"],
                  config=Config(s3={"addressing_style": "path"}))
args = json.loads(sys.argv[1])
"""

_START_UPLOAD = _S3_CLIENT + """
upload = s3.create_multipart_upload(Bucket=args["bucket"], Key=args["key"])["UploadId"]
parts = []
for number, size in enumerate(args["sizes"], start=1):
    body = bytes([number]) * size
    etag = s3.upload_part(Bucket=args["bucket"], Key=args["key"], UploadId=upload, PartNumber=number,
                          Body=body)["ETag"]
    parts.append({"PartNumber": number, "ETag": etag})
print(json.dumps({"upload_id": upload, "parts": parts}))
"""

_COMPLETE_UPLOAD = _S3_CLIENT + """
try:
    done = s3.complete_multipart_upload(Bucket=args["bucket"], Key=args["key"], UploadId=args["upload_id"],
                                        MultipartUpload={"Parts": args["parts"]})
    print(json.dumps({"etag": done["ETag"]}))
except s3.exceptions.ClientError as exc:
    print(json.dumps({"error": exc.response["Error"]["Code"]}))
"""


def _in_another_process(code: str, s3: S3UnderTest, **args) -> dict:
    """Run ``code`` in a new Python process with only the environment's credentials."""
    env = {**os.environ, **s3.environment()}
    proc = subprocess.run([sys.executable, "-c", code, json.dumps(args)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _keys(client, bucket: str) -> list[str]:
    return [o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", [])]


def test_s3_multipart_upload_is_invisible_until_another_process_completes_it(s3: S3UnderTest):
    from botocore.config import Config
    from botocore.exceptions import ClientError

    client = boto3.client("s3", config=Config(s3={"addressing_style": "path"}), **s3.client_kwargs())
    bucket, key = s3.new_bucket(), "table/dt=2026-11-24/part-00000.parquet"
    sizes = [5 * 1024 * 1024, 1000]  # every part but the last must be at least 5 MiB
    started = _in_another_process(_START_UPLOAD, s3, bucket=bucket, key=key, sizes=sizes)

    # Pending: the parts are stored, yet no listing or read shows anything.
    assert _keys(client, bucket) == []
    assert client.list_objects_v2(Bucket=bucket, Prefix="table/")["KeyCount"] == 0
    with pytest.raises(ClientError, match="404|Not Found"):
        client.head_object(Bucket=bucket, Key=key)
    # Recovery finds the pending upload by listing uploads, not objects.
    uploads = client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
    assert [(u["Key"], u["UploadId"]) for u in uploads] == [(key, started["upload_id"])]

    completed = _in_another_process(_COMPLETE_UPLOAD, s3, bucket=bucket, key=key, **started)
    assert "etag" in completed, completed
    assert _keys(client, bucket) == [key]
    body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    assert hashlib.sha256(body).digest() == hashlib.sha256(b"\x01" * sizes[0] + b"\x02" * sizes[1]).digest()
    assert client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []

    # A retried commit never undoes or repeats the first: MinIO answers NoSuchUpload (the
    # upload is gone), AWS S3 and SeaweedFS answer the same success again; either way the
    # object stays as completed, and a committer told NoSuchUpload checks the object.
    again = _in_another_process(_COMPLETE_UPLOAD, s3, bucket=bucket, key=key, **started)
    if s3.kind == "embedded":
        assert again == {"error": "NoSuchUpload"}
    else:
        assert again in ({"error": "NoSuchUpload"}, completed), again
    assert client.head_object(Bucket=bucket, Key=key)["ETag"] == completed["etag"]
    assert _keys(client, bucket) == [key]


# -- GCS ---------------------------------------------------------------------------------------

def test_gcs_checkpoint_files_written_by_one_client_are_read_by_the_sinks_reader(gcs: GcsUnderTest):
    from pyarrow import fs

    from kafka_eos_ds.errors import ConfigError
    from kafka_eos_ds.storage import StorageOptions
    from kafka_eos_ds.storage.checkpoint import Checkpoint

    bucket = gcs.new_bucket()
    scheme, host = gcs.endpoint.split("://", 1)
    writer = fs.GcsFileSystem(anonymous=True, scheme=scheme, endpoint_override=host)
    for name, text in (("metadata", '{"id":"q-gcs"}\n'), ("offsets/0", 'v1\n{}\n{"in":{"0":5}}\n'),
                       ("offsets/1", 'v1\n{}\n{"in":{"0":9}}\n'), ("commits/0", "v1\n{}\n")):
        with writer.open_output_stream(f"{bucket}/ckpt/{name}") as out:
            out.write(text.encode())
    options = StorageOptions.from_options({"fs.gs.storage.root.url": gcs.endpoint,
                                           "fs.gs.auth.type": "UNAUTHENTICATED"})
    checkpoint = Checkpoint.at(f"gs://{bucket}/ckpt", options)
    assert checkpoint.query_id() == "q-gcs"
    assert checkpoint.latest_batch() == 1 and checkpoint.latest_batch("commits") == 0
    assert checkpoint.end_offsets(1) == {"in": {"0": 9}}
    fresh = Checkpoint.at(f"gs://{bucket}/other", options)  # a query's first batch: nothing there yet
    assert fresh.query_id() is None and fresh.latest_batch("commits") == -1
    with pytest.raises(ConfigError, match="Cannot read Spark's offset log"):
        checkpoint.end_offsets(2)


# -- Hive metastore --------------------------------------------------------------------------

def test_metastore_partitions_are_added_once_and_spark_sees_rows_only_after(metastore: MetastoreUnderTest,
                                                                            tmp_path: Path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from hmsclient import hmsclient
    from hmsclient.genthrift.hive_metastore.ttypes import AddPartitionsRequest, AlreadyExistsException, Database

    db, name = f"kafka_eos_{uuid.uuid4().hex[:8]}", "events"
    location = (tmp_path / "events").as_uri()
    # The partition's files are in place (as after pending -> final) before it is registered.
    (tmp_path / "events" / "dt=2026-11-24").mkdir(parents=True)
    pq.write_table(pa.table({"id": pa.array(range(7), pa.int64()), "value": [f"v{i}" for i in range(7)]}),
                   tmp_path / "events" / "dt=2026-11-24" / "part-00000.parquet")
    host, port = metastore.host_port
    with hmsclient.HMSClient(host=host, port=port) as client:
        client.create_database(Database(name=db, description="", locationUri=(tmp_path / "db").as_uri(),
                                         parameters={}))
        table = external_parquet_table(db, name, location)
        client.create_table(table)
        spark_conf = {"spark.sql.catalogImplementation": "hive", "spark.hadoop.hive.metastore.uris": metastore.uri}
        with SparkDriver(spark_conf, tmp_path / "spark.log") as spark:
            count = f"result = spark.table('{db}.{name}').where(\"dt = '2026-11-24'\").count()"
            assert spark.run(count) == 0

            request = AddPartitionsRequest(db, name, [partition(table, "2026-11-24")], ifNotExists=True,
                                           needResult=True)
            assert len(client.add_partitions_req(request).partitions) == 1
            # A retried registration (the driver died after it): no error, no second partition.
            assert client.add_partitions_req(request).partitions in ([], None)
            with pytest.raises(AlreadyExistsException):
                client.add_partitions_req(AddPartitionsRequest(db, name, [partition(table, "2026-11-24")],
                                                               ifNotExists=False, needResult=True))
            assert client.get_partition_names(db, name, -1) == ["dt=2026-11-24"]

            assert spark.run(count) == 7
            assert spark.run(f"result = spark.sql('SHOW PARTITIONS {db}.{name}').collect()[0][0]") == \
                "dt=2026-11-24"


# -- Spark's Hadoop client on HDFS ------------------------------------------------------------

def test_spark_streaming_checkpoint_on_hdfs_is_written_resumed_and_read_from_python(hdfs: HdfsUnderTest,
                                                                                     tmp_path: Path):
    client = hdfs_native.Client(hdfs.url)
    base = hdfs.path("query")
    client.mkdirs(_path(base) + "/in", create_parent=True)
    _write(client, _path(base) + "/in/batch-0.json", b"".join(b'{"id": %d}\n' % i for i in range(5)))
    run_query = f"""
q = (spark.readStream.schema("id long").json("{base}/in")
     .writeStream.format("parquet").option("path", "{base}/out")
     .option("checkpointLocation", "{base}/checkpoint").trigger(availableNow=True).start())
q.awaitTermination()
result = spark.read.parquet("{base}/out").count()
"""
    with SparkDriver({}, tmp_path / "spark.log") as spark:
        assert spark.run(run_query) == 5
        _write(client, _path(base) + "/in/batch-1.json", b"".join(b'{"id": %d}\n' % i for i in range(5, 8)))
        assert spark.run(run_query) == 8  # resumed from the checkpoint on HDFS: only the new file

    checkpoint = _path(base) + "/checkpoint"
    names = {s.path.rsplit("/", 1)[-1] for s in client.list_status(checkpoint)}
    assert {"metadata", "offsets", "commits", "sources"} <= names
    assert sorted(s.path.rsplit("/", 1)[-1] for s in client.list_status(f"{checkpoint}/commits")) == ["0", "1"]
    # The offset log as the product's driver will read it: version line, metadata, one
    # line per source.
    lines = _read(client, f"{checkpoint}/offsets/1").decode().splitlines()
    assert lines[0] == "v1"
    assert "batchTimestampMs" in json.loads(lines[1])
    assert json.loads(lines[2]) == {"logOffset": 1}
