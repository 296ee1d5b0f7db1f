"""Every table-sink write's decision is pinned to a number of its writer's decision log
read before the write staged anything: a fence that listed one of its files claims the
log after that number, and the write is refused undecided instead of decided on a file
the fence then deletes. A stream and a ``txnAppId`` write take the planner's number; a
``df.write`` inside ``foreachBatch`` and a batch job, whose planner cannot name the
writer, take the number each task reads before its first file (on a renaming store and
on S3)."""

from __future__ import annotations

from pathlib import PurePosixPath

import pyarrow as pa
import pytest

from kafka_eos_ds.errors import TransactionError
from kafka_eos_ds.storage.s3 import S3Store
from kafka_eos_ds.table_sink.config import FileSinkConfig
from kafka_eos_ds.table_sink.decision_log import FileDecisionLog
from kafka_eos_ds.table_sink.layout import Layout, writer_dir
from kafka_eos_ds.table_sink.sink import FileSink
from kafka_eos_ds.twophase import DECIDED, DONE, Decision, Kind, WriteId
from kafka_eos_ds.twophase.identity import WriteSpec
from kafka_eos_ds.twophase.writers import Task
from tests.test_file_sink_table_life import FakeS3Client
from tests.test_file_sink_zombies import DeletePaused, commit_paused

SPEC = WriteSpec.for_batch({}.get, "job-1")  # no txnAppId: the planner names no writer
FOREACH = WriteId(Kind.FOREACH, "query", 2, run="run-b", job="job-1")  # the live run's write
ZOMBIE = WriteId(Kind.FOREACH, "query", 1, run="run-a", job="job-0")  # a zombie run's write
JOB = WriteId(Kind.JOB, "job-1", 0, job="job-1")


def _staged(sink: FileSink, write: WriteId) -> object:
    """The planner (it recovers nothing: it cannot name the writer), then one task."""
    mark = sink.prepare(SPEC)
    assert sink.read is None
    return sink.write(Task(write, 0, 0), mark, iter([pa.RecordBatch.from_pydict({"id": [1, 2, 3]})]))


def _nothing_decided(layout: Layout, key: str) -> None:
    latest = FileDecisionLog(layout).latest(key)
    assert latest is None or latest.state != DECIDED, f"decided on a file the zombie deleted: {latest}"


def _config(tmp_path, store=None) -> FileSinkConfig:
    config = FileSinkConfig.from_options({"path": str(tmp_path)})
    if store is not None:
        config._stores["store"] = store
    return config


def test_a_foreach_batch_write_staged_before_a_zombies_claim_is_never_decided(tmp_path):
    """The gate's schedule foreach-batch-file seed 6: a zombie run's abort lists the live
    run's staged file, claims the log, and stalls before deleting it; the live run's
    commit reads the log only then. Before, it decided at the number after the claim and
    the zombie deleted its file (a TransactionLostError at its commit); now its decision
    goes after the number its task read before staging, which the claim took: refused."""
    layout = Layout(tmp_path)
    live = FileSink(_config(tmp_path), None)
    msg = _staged(live, FOREACH)
    zombie = FileSink(_config(tmp_path, DeletePaused(lambda: commit_paused(live, FOREACH, msg))), None)
    zombie.abort(ZOMBIE, [], SPEC)
    _nothing_decided(layout, FOREACH.key)
    assert not list(tmp_path.glob("part-*"))


@pytest.mark.parametrize("write", [FOREACH, JOB], ids=["foreach", "job"])
def test_a_claim_after_a_task_staged_refuses_the_commit_and_one_before_does_not(tmp_path, write):
    layout = Layout(tmp_path)
    writer = writer_dir(write.key)
    FileDecisionLog(layout).claim(writer, 0)  # before the task: an earlier step's record
    sink = FileSink(_config(tmp_path), None)
    first = _staged(sink, write)
    assert first.participant().handle.read == 1
    sink.commit(write, [first.participant()])
    assert len(list(tmp_path.glob("part-*"))) == 1
    if write.kind is Kind.JOB:
        return  # a job commits once; its record is dropped when it is done
    assert FileDecisionLog(layout).latest(write.key).state == DONE
    again = WriteId(Kind.FOREACH, "query", 3, run="run-b", job="job-2")
    second = _staged(FileSink(_config(tmp_path), None), again)
    FileDecisionLog(layout).claim(writer, 0)  # a fence listed the staged file, then claimed
    with pytest.raises(TransactionError, match="fell behind"):
        FileSink(_config(tmp_path), None).commit(again, [second.participant()])
    assert FileDecisionLog(layout).latest(write.key).batch_id == 2


def test_a_job_whose_staged_file_a_claim_listed_is_refused(tmp_path):
    layout = Layout(tmp_path)
    sink = FileSink(_config(tmp_path), None)
    msg = _staged(sink, JOB)
    FileDecisionLog(layout).claim(writer_dir(JOB.key), 0)
    with pytest.raises(TransactionError, match="fell behind"):
        sink.commit(JOB, [msg.participant()])
    _nothing_decided(layout, JOB.key)


class AbortPaused(FakeS3Client):
    """A bucket whose first AbortMultipartUpload first runs ``before``."""

    before = None

    def complete_multipart_upload(self, **kwargs):
        if "/.probe-" in kwargs["Key"]:  # the store's create-if-absent probe at prepare
            return super().complete_multipart_upload(**kwargs)
        raise AssertionError("completed")  # never reached: the live commit pauses or is refused

    def abort_multipart_upload(self, Bucket, Key, UploadId):
        if self.before is not None:
            before, self.before = self.before, None
            before()
        super().abort_multipart_upload(Bucket, Key, UploadId)


def test_on_s3_a_foreach_batch_upload_started_before_a_zombies_claim_is_never_decided():
    store = S3Store.__new__(S3Store)
    client = AbortPaused()
    store.bucket, store.url, store._client = "lake", "s3a://lake", client
    layout = Layout(PurePosixPath("/lake/events"), "jsonl")

    def config() -> FileSinkConfig:
        c = FileSinkConfig(layout.root, "jsonl", 10.0, location="s3a://lake/events")
        c._stores["store"] = store
        return c

    live = FileSink(config(), None)
    msg = _staged(live, FOREACH)
    assert len(client.open_uploads) == 1
    client.before = lambda: commit_paused(live, FOREACH, msg)
    FileSink(config(), None).abort(ZOMBIE, [], SPEC)
    assert client.before is None and not client.open_uploads  # the zombie aborted the upload
    latest = FileDecisionLog(layout, store).latest(FOREACH.key)
    assert latest is None or latest.state != DECIDED, f"decided on an aborted upload: {latest}"


def test_a_stream_and_an_app_write_keep_their_planners_number(tmp_path):
    """The planner's number is what their tasks carry (it is the earlier one)."""
    layout = Layout(tmp_path)
    spec = WriteSpec.for_batch({"txnAppId": "etl", "txnVersion": "1"}.get, "job-1")
    app = spec.planned()
    FileDecisionLog(layout).write(app.key, Decision("etl", 0, DONE))
    sink = FileSink(_config(tmp_path), None)
    mark = sink.prepare(spec)
    FileDecisionLog(layout).claim(writer_dir(app.key), 0)  # after the planner, before the task
    msg = sink.write(Task(app, 0, 0), mark, iter([pa.RecordBatch.from_pydict({"id": [1]})]))
    assert sink.read == 1 and msg.participant().handle.read == 1
