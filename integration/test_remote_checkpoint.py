"""Checkpoints where production keeps them: on HDFS (a real MiniDFSCluster on 127.0.0.1),
on an S3-compatible store (a real MinIO on 127.0.0.1, through Spark's ``s3a://``) and on
GCS (fake-gcs-server on 127.0.0.1, through Google's GCS connector for ``gs://``).

Spark writes the checkpoint with its own Hadoop client (for ``s3a://``, hadoop-aws and the
AWS SDK, fetched by Maven at pyspark's Hadoop version; for ``gs://``, the GCS connector's
shaded jar); the sink's driver-side Python reads it through hdfs-native, boto3 or pyarrow's
GCS client (kafka_eos_ds/storage/). What depends on reading it must
work there as on a local disk: the query's own decisions (its id, from ``metadata``), the
guard against a lost commit log (``commits/``), and ``sourceGroupId`` (the batch's end
offsets from ``offsets/N``).
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
from confluent_kafka.admin import AdminClient

from integration.sink_runs import assert_crashed, run_pipeline, seed
from integration.test_sink_crash import _visible_once_markers_land
from kafka_eos_tools.audit import audit
from kafka_eos_tools.topics import consume_all

pytestmark = pytest.mark.storage  # starts HDFS, MinIO or a GCS emulator: the gate's second lane

RECORDS, BATCH = 600, 150


class _Hdfs:
    """A checkpoint directory on the embedded HDFS; Spark and the sink need nothing more."""

    def __init__(self, hdfs) -> None:
        self.url, self.directory = hdfs.url, f"/checkpoints/{uuid.uuid4().hex[:8]}"
        self.checkpoint = f"{hdfs.url}{self.directory}"
        self.job_args: list[str] = []
        self.sink_options: list[str] = []
        self.env = None
        self.secret = None

    def metadata(self) -> str:
        import hdfs_native

        with hdfs_native.Client(self.url).read(f"{self.directory}/metadata") as reader:
            return bytes(reader.read()).decode()

    def delete(self) -> None:
        import hdfs_native

        assert hdfs_native.Client(self.url).delete(self.directory, recursive=True)


class _S3:
    """A checkpoint under a fresh bucket of the S3 store: Spark gets hadoop-aws and the
    store's address as settings, the sink the same address as its ``fs.s3a.*`` options;
    both take the keys from the environment (never from a command line or an option)."""

    def __init__(self, s3) -> None:
        from kafka_eos_tools.storage import s3a

        self.s3, self.bucket = s3, s3.new_bucket()
        self.key = f"checkpoints/{uuid.uuid4().hex[:8]}"
        self.checkpoint = f"s3a://{self.bucket}/{self.key}"
        self.job_args = ["--jars", s3a.spark_jars()]
        for key, value in s3a.spark_settings(s3.endpoint, s3.region).items():
            self.job_args += ["--conf", f"{key}={value}"]
        self.sink_options = [f"fs.s3a.endpoint={s3.endpoint}", "fs.s3a.path.style.access=true",
                             f"fs.s3a.endpoint.region={s3.region}"]
        self.env = s3.environment()
        self.secret = s3.secret_key

    def metadata(self) -> str:
        import boto3

        body = boto3.client("s3", **self.s3.client_kwargs()).get_object(Bucket=self.bucket, Key=f"{self.key}/metadata")
        return str(body["Body"].read().decode())

    def delete(self) -> None:
        import boto3

        client = boto3.client("s3", **self.s3.client_kwargs())
        listed = client.list_objects_v2(Bucket=self.bucket, Prefix=self.key + "/").get("Contents", [])
        assert listed  # the checkpoint was there
        for page in range(0, len(listed), 1000):
            client.delete_objects(Bucket=self.bucket,
                                  Delete={"Objects": [{"Key": o["Key"]} for o in listed[page:page + 1000]]})


class _Gcs:
    """A checkpoint under a fresh bucket of the GCS emulator: Spark gets the GCS connector
    and the emulator's address as settings, the sink the same address as its ``fs.gs.*``
    options. The emulator takes no credentials."""

    def __init__(self, gcs) -> None:
        from kafka_eos_tools.storage import gcs as connector

        self.gcs, self.bucket = gcs, gcs.new_bucket()
        self.key = f"checkpoints/{uuid.uuid4().hex[:8]}"
        self.checkpoint = f"gs://{self.bucket}/{self.key}"
        self.job_args = ["--jars", connector.spark_jars()]
        for key, value in connector.spark_settings(gcs.endpoint).items():
            self.job_args += ["--conf", f"{key}={value}"]
        self.sink_options = [f"fs.gs.storage.root.url={gcs.endpoint}", "fs.gs.auth.type=UNAUTHENTICATED"]
        self.env = None
        self.secret = None

    def _files(self):
        from pyarrow import fs

        host = self.gcs.endpoint.split("://", 1)
        return fs.GcsFileSystem(anonymous=True, scheme=host[0], endpoint_override=host[1])

    def metadata(self) -> str:
        with self._files().open_input_stream(f"{self.bucket}/{self.key}/metadata") as f:
            return bytes(f.read()).decode()

    def delete(self) -> None:
        from pyarrow import fs

        files = self._files()
        listed = files.get_file_info(fs.FileSelector(f"{self.bucket}/{self.key}", recursive=True))
        assert any(info.base_name == "metadata" for info in listed)  # the checkpoint was there
        for info in listed:
            if info.is_file:
                files.delete_file(info.path)


_STORES = {"hdfs": ("hdfs", _Hdfs), "s3": ("s3", _S3), "gcs": ("gcs", _Gcs)}


# The gate runs HDFS and S3, the stores users keep checkpoints on; GCS (an emulator, the
# same Hadoop file-system path) in the full profile.
@pytest.fixture(params=[pytest.param(name, marks=pytest.mark.full) if name == "gcs" else name
                        for name in sorted(_STORES)])
def remote(request, kafka, new_topic, tmp_path):
    server, kind = _STORES[request.param]
    store = kind(request.getfixturevalue(server))
    input_topic, output_topic = new_topic(2, prefix="in"), new_topic(2, prefix="out")
    seed(kafka.bootstrap, input_topic, RECORDS)

    class R:
        conf = {"bootstrap.servers": kafka.bootstrap}
        prefix = f"remote-{output_topic}"
        checkpoint = store.checkpoint
        output = output_topic
        log_topic = f"log-{output_topic}"

        @staticmethod
        def run(fault=None):
            run = run_pipeline(kafka.bootstrap, input_topic, output_topic, R.checkpoint, R.prefix, fault=fault,
                               max_offsets=BATCH, log_dir=tmp_path / "logs", job_args=store.job_args,
                               sink_options=[f"commitLogTopic={R.log_topic}", *store.sink_options], env=store.env)
            # The store's secret key reached Spark and the sink through the environment only.
            assert store.secret is None or store.secret not in run.log
            return run

        @staticmethod
        def query_id():
            return json.loads(store.metadata().splitlines()[0])["id"]

        @staticmethod
        def audit():
            return audit(R.conf, input_topic, output_topic)

        @staticmethod
        def visible():
            return consume_all(kafka.bootstrap, output_topic)

        lose_checkpoint = staticmethod(store.delete)

    return R


def test_a_driver_killed_mid_commit_with_its_checkpoint_on_a_remote_store_finishes_exactly_once(remote):
    from kafka_eos_ds.kafka_sink.decision_log import KafkaDecisionLog

    assert_crashed(remote.run("driver-after-first-commit@1"))
    run = remote.run()
    assert run.returncode == 0, run.log[-3000:]
    report = remote.audit()
    assert report.ok and report.records_in == RECORDS == report.unique_out == report.records_out, report.table()
    # The sink read the query's id from the remote checkpoint: its decisions are its own.
    latest = KafkaDecisionLog(remote.conf, remote.log_topic, remote.prefix).latest(f"q:{remote.query_id()}")
    assert latest is not None and latest.state.value == "done" and latest.progress is not None
    # ... and the batch's end offsets from the offset log there (sourceGroupId).
    assert sum(latest.progress["offsets"][next(iter(latest.progress["offsets"]))].values()) == RECORDS


# The two full-profile cases run on one store each: the store is read and written by the same
# Hadoop file-system path in either, and the crash case above runs on all three (every store
# for each case was 4 more runs of two minutes each: docs/dev/decisions.md, "The full
# profile runs each variant once").
@pytest.mark.full  # the gate reads the remote checkpoint in the crash case above; the guard runs locally there
@pytest.mark.parametrize("remote", ["s3"], indirect=True)
def test_a_lost_commit_log_fails_the_restart_loudly_with_the_checkpoint_on_a_remote_store(remote):
    assert_crashed(remote.run("driver-after-first-commit@1"))
    visible = _visible_once_markers_land(remote, BATCH + 1)
    admin = AdminClient(remote.conf)
    admin.delete_topics([remote.log_topic], operation_timeout=30)[remote.log_topic].result(60)
    deadline = time.monotonic() + 60
    while remote.log_topic in admin.list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.5)
    run = remote.run()
    assert run.returncode != 0
    assert f"The commit-log topic '{remote.log_topic}' (option 'commitLogTopic') holds no decision" in run.log, \
        run.log[-3000:]
    assert len(remote.visible()) == visible  # nothing written


@pytest.mark.full  # crash point 7 runs on a local checkpoint in the gate (test_sink_crash.py)
@pytest.mark.parametrize("remote", ["hdfs"], indirect=True)
def test_a_lost_remote_checkpoint_a_new_query_resumes_from_the_group_exactly_once(remote):
    # Crash point 7 with the checkpoint on the remote store: batch 1 is decided and its
    # first transaction (with the group's offsets) committed when the driver dies; then
    # the checkpoint is deleted. The new query starts from the group, at batch 1's end,
    # and its recovery finishes batch 1's other transaction.
    assert_crashed(remote.run("driver-after-first-commit@1"))
    assert BATCH < _visible_once_markers_land(remote, BATCH + 1) < 2 * BATCH
    remote.lose_checkpoint()
    run = remote.run()
    assert run.returncode == 0, run.log[-3000:]
    report = remote.audit()
    assert report.ok and report.records_in == RECORDS == report.unique_out == report.records_out, report.table()
