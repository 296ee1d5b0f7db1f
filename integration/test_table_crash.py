"""The file sink's crash matrix on tables: crash points 1-5, 7 and 9 of
docs/dev/guarantees.md on HDFS with the Hive metastore, and on an S3-compatible store.

Each test runs the pipeline of :mod:`kafka_eos_tools.demo.job` (kafka_eos source ->
upper(value), the record's Kafka timestamp and a shard of its key -> ``kafka_eos_file``
partitioned ``dt=date(timestamp)/shard``) as a driver subprocess, hits one point of a
batch, restarts, and reads the table back with the store's own client: every input record
exactly once in the final files, nothing left staged (no pending file on HDFS, no
multipart upload in progress on S3).

On HDFS the sink also registers each batch's partitions in a real Hive metastore (with
``_SUCCESS`` markers): after the restart the metastore lists exactly the partition
directories the table has files in. On S3 the credentials reach the sink as s3a options,
and the secret key appears in no log of any run.

Servers: a MiniDFSCluster, a Hive metastore and MinIO, started on 127.0.0.1 by
integration/storage.py (or the ones ``KAFKA_EOS_HDFS`` / ``KAFKA_EOS_S3_ENDPOINT`` name).
The gate runs point 3 on HDFS; the rest is in the full profile (MinIO is built from
source on a new machine, docs/dev/testing.md).
"""

from __future__ import annotations

import io
import json
import posixpath
import shutil
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.storage  # starts HDFS, a metastore or MinIO: the gate's second lane

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from integration.sink_runs import assert_crashed, run_pipeline, seed  # noqa: E402
from integration.tables import Table, newest_decision, s3_options  # noqa: E402
from kafka_eos_ds.table_sink.layout import query_token, writer_dir  # noqa: E402

RECORDS, BATCH, SHARDS = 450, 150, 3
COLUMNS = ["timestamp", f"pmod(crc32(key), {SHARDS}) as shard"]
PARTITION_BY = "dt=date(timestamp),shard"

HDFS = "hdfs"
S3 = pytest.param("s3", marks=pytest.mark.full)
FULL_HDFS = pytest.param("hdfs", marks=pytest.mark.full)
# Each point runs on both stores where their staging differs in what the point checks
# (a dead attempt's staging cleaned: 1; some files final, the rest staged: 3; a zombie's
# files: 9, one store per takeover), and on one store where it does not (2, 4, 5, 7 read
# the same decision log and finish through the same recovery on either): both stores for
# every point was 6 more runs of a minute each for no cell more (docs/dev/decisions.md,
# "The full profile runs each variant once").


class TablePipeline:
    """One input topic (seeded), one table on one store, a checkpoint, and the checks of a
    crash test bound to them."""

    def __init__(self, store: str, request: pytest.FixtureRequest, kafka, new_topic, tmp_path: Path,
                 warm_driver) -> None:
        self.store, self.bootstrap, self.warm = store, kafka.bootstrap, warm_driver
        self.input = new_topic(2, prefix="tc")
        seed(kafka.bootstrap, self.input, RECORDS)
        self.checkpoint = tmp_path / "checkpoint"
        self.logs = tmp_path / "logs"
        self.options = [f"partitionBy={PARTITION_BY}"]
        self.metastore = self.s3 = None
        self.database = ""
        if store == "s3":
            pytest.importorskip("boto3", reason="the S3 client is not installed (pip install -e '.[s3]')")
            self.s3 = request.getfixturevalue("s3")
            self.table = Table(f"s3a://{self.s3.new_bucket()}/lake/events", self.s3)
            self.options += [f"{k}={v}" for k, v in s3_options(self.s3).items()]
        else:
            pytest.importorskip("hdfs_native", reason="the HDFS client is not installed (pip install -e '.[hdfs]')")
            pytest.importorskip("hmsclient", reason="the metastore client is not installed (pip install -e '.[hive]')")
            hdfs = request.getfixturevalue("hdfs")
            self.metastore = request.getfixturevalue("metastore")
            self.table = Table(hdfs.path(f"events-{uuid.uuid4().hex[:8]}"))
            self.database = f"lake_{uuid.uuid4().hex[:8]}"
            self._create_database(tmp_path / "db")
            self.options += [f"table={self.database}.events", f"hive.metastore.uris={self.metastore.uri}",
                             "successFile=true"]
        self.options.insert(0, f"path={self.table.url}")

    # -- runs ----------------------------------------------------------------------

    def run(self, fault=None, checkpoint=None, resume=False):
        columns = [arg for c in COLUMNS for arg in ("--column", c)]
        extra = ["--resume-from-table", self.table.url] if resume else []
        return run_pipeline(self.bootstrap, self.input, "unused", str(checkpoint or self.checkpoint), "unused",
                            fault=fault, max_offsets=BATCH, log_dir=self.logs, sink_format="kafka_eos_file",
                            sink_options=self.options, job_args=columns + extra, warm=self.warm)

    def finishes_exactly_once(self, expected=RECORDS, fault=None, checkpoint=None, resume=False):
        run = self.run(fault, checkpoint, resume)
        assert run.returncode == 0, run.log[-3000:]
        report = self.table.audit(expected)
        assert report.ok, report
        assert report.leftovers == [], report  # recovery cleaned every staged file and upload
        self.check_store()

    # -- what the table shows --------------------------------------------------------

    def staged(self) -> list[str]:
        """What a batch left between pre-commit and final: pending files, uploads."""
        return self.table.pending() + self.table.uploads()

    def query(self, checkpoint=None) -> str:
        return json.loads(Path(checkpoint or self.checkpoint, "metadata").read_text())["id"]

    def check_store(self) -> None:
        directories = sorted({d for d, _ in self.table.rows()})
        if self.metastore is not None:
            with self._client() as client:
                registered = sorted(client.get_partition_names(self.database, "events", -1))
            assert registered == directories  # each partition with files, once
            markers = sorted(f.rsplit("/", 1)[0] for f in self.table.files() if f.endswith("/_SUCCESS"))
            assert markers == directories
        if self.s3 is not None:
            logs = "".join(p.read_text(errors="replace") for p in self.logs.glob("*.log"))
            assert self.s3.secret_key and self.s3.secret_key not in logs

    # -- the metastore -------------------------------------------------------------

    def _client(self):
        from hmsclient import hmsclient

        host, port = self.metastore.host_port
        return hmsclient.HMSClient(host=host, port=port)

    def _create_database(self, location: Path) -> None:
        from hmsclient.genthrift.hive_metastore.ttypes import Database

        with self._client() as client:
            client.create_database(Database(name=self.database, description="", locationUri=location.as_uri(),
                                             parameters={}))


@pytest.fixture
def table_run(request, kafka, new_topic, tmp_path, warm_driver) -> TablePipeline:
    return TablePipeline(request.param, request, kafka, new_topic, tmp_path, warm_driver)


@pytest.mark.parametrize("table_run", [FULL_HDFS, S3], indirect=True)
@pytest.mark.full
def test_1_task_dies_before_precommit_is_retried_and_its_staging_cleaned(table_run):
    # In the last batch (2): no later recovery runs, so only the batch's commit can have
    # cleaned what the dead attempt staged.
    run = table_run.run("task-before-precommit@2#0!0")
    assert run.returncode == 0, run.log[-3000:]
    decision = newest_decision(table_run.table, writer_dir(f"q:{table_run.query()}"))
    assert decision is not None and decision["batchId"] == 2 and decision["state"] == "done", decision
    assert [(t["partition"], t["attempt"]) for t in decision["transactions"]] == [(0, 1), (1, 0)], decision
    report = table_run.table.audit(RECORDS)
    assert report.ok and report.leftovers == [], report
    table_run.check_store()


@pytest.mark.parametrize("table_run", [S3], indirect=True)
def test_2_driver_dies_before_the_decision_discards_the_batch(table_run):
    assert_crashed(table_run.run("driver-before-decision@1"))
    assert table_run.table.visible() == BATCH  # batch 0 only
    assert table_run.staged() != []            # batch 1's pre-committed files, undecided
    table_run.finishes_exactly_once()


@pytest.mark.parametrize("table_run", [HDFS, S3], indirect=True)
def test_3_driver_dies_after_committing_some_files(table_run):
    assert_crashed(table_run.run("driver-after-first-commit@1"))
    # Batch 0 and the first task of batch 1 (each of its partition files) are final; the
    # other task's files are pending (HDFS) or uploads not completed (S3).
    assert BATCH < table_run.table.visible() < 2 * BATCH
    assert table_run.staged() != []
    table_run.finishes_exactly_once()


@pytest.mark.parametrize("table_run", [FULL_HDFS], indirect=True)
def test_4_driver_dies_after_all_files_are_final_before_sparks_commit_log(table_run):
    assert_crashed(table_run.run("driver-after-all-commits@1"))
    assert table_run.table.visible() == 2 * BATCH and table_run.staged() == []
    # The re-run of batch 1 writes nothing: its tasks drain their input without writing a
    # file, so a task that reaches the point before pre-commit kills the run.
    table_run.finishes_exactly_once(fault="task-before-precommit@1:exit")


@pytest.mark.parametrize("table_run", [S3], indirect=True)
def test_5_commit_raises_and_abort_leaves_the_decided_files_alone(table_run):
    run = table_run.run("commit-raise@1")
    assert run.returncode != 0 and "injected fault at commit-raise" in run.log, run.log[-3000:]
    assert BATCH < table_run.table.visible() < 2 * BATCH
    assert table_run.staged() != []  # abort() kept the decided, not yet final files
    table_run.finishes_exactly_once()


# Full profile: the gate resumes a killed query from a table on the local store
# (test_table_life.py, which also checks what the killed query left staged); the long-life
# test replaces a checkpoint twice on S3.
@pytest.mark.parametrize("table_run", [FULL_HDFS], indirect=True)
def test_7_checkpoint_lost_a_new_query_resumes_where_the_table_ends(table_run, tmp_path):
    # The driver dies in the middle of committing batch 1; its checkpoint is deleted; a new
    # query with a new checkpoint starts where batch 1's decision says the table ends
    # (startingOffsetsFromTable) and finishes batch 1 before writing batch 2.
    assert_crashed(table_run.run("driver-after-first-commit@1"))
    assert BATCH < table_run.table.visible() < 2 * BATCH and table_run.staged() != []
    shutil.rmtree(table_run.checkpoint)
    # No record lost (batch 1 finished), none twice (batches 0 and 1 not read again).
    table_run.finishes_exactly_once(checkpoint=tmp_path / "checkpoint-2", resume=True)


@pytest.mark.parametrize("table_run, takeover", [
    pytest.param("hdfs", False, marks=pytest.mark.full, id="hdfs-restart"),
    pytest.param("s3", True, marks=pytest.mark.full, id="s3-new-query"),
], indirect=["table_run"])
def test_9_zombie_files_never_become_final(table_run, tmp_path, takeover):
    # Batch 1 is decided and partly committed when the driver dies: the step that finishes
    # it (the restart's recovery, or a new query taking the table over) is the only one
    # that could make a zombie's file final.
    assert_crashed(table_run.run("driver-after-first-commit@1"))
    table = table_run.table
    query = table_run.query()
    writer, token = writer_dir(f"q:{query}"), query_token(query)
    decision = newest_decision(table, writer)
    assert decision is not None and (decision["batchId"], decision["state"]) == (1, "decided"), decision
    body = io.BytesIO()
    pq.write_table(pa.table({"key": [b"k"], "value": ["999999|ZOMBIE"]}), body)
    if table_run.s3 is not None:
        # A zombie attempt of each decided task, still uploading: a second multipart upload
        # at the task's final key (completed already, or still to complete), which no
        # commit message names.
        client, bucket, prefix = table._s3()
        keys = table.uploads()
        open_uploads = len(keys)
        assert open_uploads > 0
        keys += [f"{prefix}/{name}" for name in table.finals() if posixpath.basename(name).startswith("part-00001-")]
        for key in keys:
            upload = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
            client.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=1, Body=body.getvalue())
        assert len(table.uploads()) == open_uploads + len(keys)
    else:
        # Zombies of the query under its own staging: an in-progress file, a pending one of
        # another attempt, and one under each decided task's id (the committed task's and
        # the one still pending), each with its own stamp.
        assert table.pending() != []
        zombies = [("in-progress", f"{token}-1-0-0.0000aaaa.0.parquet"),
                   ("pending", f"{token}-1-1-3.0000bbbb.0.parquet")]
        zombies += [("pending", f"{token}-1-{t['partition']}-{t['attempt']}.0000cccc.0.parquet")
                    for t in decision["transactions"]]
        for sub, name in zombies:
            table.write(f"_kafka_eos/{writer}/{sub}/{name}", body.getvalue())
    if takeover:
        # The checkpoint is lost: a new query resumes from the table, finishes batch 1 for
        # the dead query, and once its first batch is done deletes what that query staged.
        shutil.rmtree(table_run.checkpoint)
        table_run.finishes_exactly_once(checkpoint=tmp_path / "checkpoint-2", resume=True)
    else:
        table_run.finishes_exactly_once()  # a zombie row in a final file, or a zombie left staged, fails it
