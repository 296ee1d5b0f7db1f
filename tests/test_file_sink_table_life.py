"""A table's whole life: resuming from a table other writers wrote, new queries taking
over a table after dead ones, retention deleting old files, and the staging the dead
queries left behind. On a local disk (and on an in-memory S3 for the uploads), with
Spark's checkpoint files written by hand."""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from pyspark.sql.types import LongType, StructField, StructType

from kafka_eos_ds.errors import ConfigError
from kafka_eos_ds.storage.s3 import S3Store
from kafka_eos_ds.table_sink.config import FileSinkConfig
from kafka_eos_ds.table_sink.decision_log import FileDecisionLog
from kafka_eos_ds.table_sink.layout import FileId, Layout, query_token, writer_dir
from kafka_eos_ds.table_sink.progress import RecordedProgress, table_end
from kafka_eos_ds.table_sink.sink import FileSink
from kafka_eos_ds.twophase import DECIDED, DONE, Decision, DoneMark, Kind, WriteId
from kafka_eos_ds.twophase.committer import TwoPhaseCommitter
from kafka_eos_ds.twophase.identity import WriteSpec
from kafka_eos_ds.twophase.writers import Task

SCHEMA = StructType([StructField("id", LongType())])


def _checkpoint(path: Path, query: str, offsets: list[dict]) -> None:
    """Spark's checkpoint files the sink reads: the query id and each batch's end offsets."""
    (path / "offsets").mkdir(parents=True)
    (path / "metadata").write_text(json.dumps({"id": query}) + "\n")
    for batch, ends in enumerate(offsets):
        (path / "offsets" / str(batch)).write_text("v1\n{}\n" + json.dumps(ends) + "\n")


def _sink(table: Path, checkpoint: Path | None = None, **more: str) -> FileSink:
    options = {"path": str(table), **more}
    if checkpoint is not None:
        options["checkpointLocation"] = str(checkpoint)
    return FileSink(FileSinkConfig.from_options(options, SCHEMA), SCHEMA)


def _rows(ids):
    return iter([pa.RecordBatch.from_pydict({"id": ids})])


def _stream_batch(sink, query, batch, ids, *, commit=True):
    sink.prepare(WriteSpec(streaming=True))
    write = WriteId(Kind.STREAM, query, batch)
    msg = sink.write(Task(write, 0, 0), DoneMark(), _rows(ids))
    if commit:
        sink.commit(write, [msg.participant()])
    return msg.participant()


def _batch_write(sink, write, ids):
    """A df.write: FOREACH (inside foreachBatch), APP (txnAppId) or JOB."""
    spec = WriteSpec(streaming=False, job=write.job, app=write.app if write.kind is Kind.APP else None,
                     version=write.version if write.kind is Kind.APP else None)
    sink.prepare(spec)
    msg = sink.write(Task(write, 0, 0), DoneMark(), _rows(ids))
    sink.commit(write, [msg.participant()])


def _ids(table: Path) -> list[int]:
    return sorted(ds.dataset(str(table), format="parquet", partitioning="hive").to_table().column("id").to_pylist())


# -- startingOffsetsFromTable over a table no stream's offsets cover ------------------


def test_a_table_written_by_foreachbatch_and_txnappid_writes_is_refused_not_read_as_empty(tmp_path):
    table = tmp_path / "table"
    _batch_write(_sink(table), WriteId(Kind.FOREACH, "q-fb", 41, run="r-1", job="job-1"), [1, 2])
    _batch_write(_sink(table), WriteId(Kind.APP, "orders-etl", 7, job="job-2"), [3])
    assert _ids(table) == [1, 2, 3]
    with pytest.raises(ConfigError, match="'startingOffsetsFromTable'.*foreachBatch.*q-fb.*txnAppId 'orders-etl'"
                                          ".*'startingOffsets'"):
        table_end(str(table), {})


def test_a_table_holding_files_but_no_decision_is_refused(tmp_path):
    table = tmp_path / "table"
    # A batch job drops its record once committed: only its final file is left.
    _batch_write(_sink(table), WriteId(Kind.JOB, "job-1", 0, job="job-1"), [1])
    assert _ids(table) == [1] and FileDecisionLog(_sink(table).config.layout).decisions_of(Kind.JOB.value) == []
    with pytest.raises(ConfigError, match="'startingOffsetsFromTable'.*holds files.*'startingOffsets'"):
        table_end(str(table), {})


def test_a_partitioned_table_holding_files_only_in_partitions_is_refused(tmp_path):
    table = tmp_path / "table"
    (table / "dt=2026-11-01" / "hour=01").mkdir(parents=True)
    (table / "dt=2026-11-01" / "hour=01" / "part-00000-00000-abc.parquet").write_bytes(b"x")
    (table / "_SUCCESS").write_bytes(b"")
    with pytest.raises(ConfigError, match="holds files"):
        table_end(str(table), {})


def test_stream_offsets_still_resume_and_an_empty_table_starts_at_the_earliest(tmp_path):
    table = tmp_path / "table"
    assert table_end(str(table), {}) == {}
    (table / "_kafka_eos").mkdir(parents=True)  # created by a first write's check, nothing final yet
    assert table_end(str(table), {}) == {}
    _checkpoint(tmp_path / "ckpt", "q-1", [{"in": {"0": 5}}])
    _stream_batch(_sink(table, tmp_path / "ckpt"), "q-1", 0, [1])
    assert table_end(str(table), {}) == {("in", 0): 5}


# -- a dead query's decided batch, finished once by the query that took over ----------


def _dead_query_with_a_decided_batch(tmp_path, table, **options):
    """Query A wrote batch 0, decided batch 1 and died before renaming it; its checkpoint
    is lost. Returns batch 1's participant."""
    _checkpoint(tmp_path / "a", "q-a", [{"in": {"0": 5}}, {"in": {"0": 9}}])
    a = _sink(table, tmp_path / "a", **options)
    _stream_batch(a, "q-a", 0, [1, 2])
    p = _stream_batch(a, "q-a", 1, [3], commit=False)
    FileDecisionLog(a.config.layout).write("q:q-a", Decision("q-a", 1, DECIDED, (p,), {"offsets": {"in": {"0": 9}}}))
    return p


def _new_query(tmp_path, table, query, **options):
    _checkpoint(tmp_path / query, query, [{"in": {"0": 12}}])
    sink = _sink(table, tmp_path / query, **options)
    sink.prepare(WriteSpec(streaming=True))
    return sink


def test_a_dead_querys_batch_finished_by_one_new_query_is_not_finished_again_after_retention(tmp_path):
    table = tmp_path / "table"
    p = _dead_query_with_a_decided_batch(tmp_path, table)
    _new_query(tmp_path, table, "q-b")  # finishes A's batch 1
    assert _ids(table) == [1, 2, 3]
    # Retention deletes the partition's files, batch 1's among them.
    for staged in p.handle.files:
        (table / staged.final).unlink()
    assert _ids(table) == [1, 2]
    # Every later new query starts (before: TransactionLostError, batch 1's pending and final gone).
    _new_query(tmp_path, table, "q-c")
    _stream_batch(_sink(table, tmp_path / "q-c"), "q-c", 0, [4])
    assert _ids(table) == [1, 2, 4]
    assert FileDecisionLog(_sink(table).config.layout).latest("q:q-a").state == DECIDED  # A's log untouched


def test_a_dead_querys_batch_finished_once_is_never_published_again(tmp_path):
    table = tmp_path / "table"
    _dead_query_with_a_decided_batch(tmp_path, table, successFile="true")
    _new_query(tmp_path, table, "q-b", successFile="true")
    assert (table / "_SUCCESS").exists()
    # Readers are told the partition is gone (its marker dropped; an external table's
    # partition dropped from the metastore), its files kept.
    (table / "_SUCCESS").unlink()
    _new_query(tmp_path, table, "q-c", successFile="true")
    assert not (table / "_SUCCESS").exists()
    assert _ids(table) == [1, 2, 3]


# -- the staging superseded queries left behind ----------------------------------------


def _staged(table: Path, query: str) -> list[str]:
    writer = table / "_kafka_eos" / writer_dir(f"q:{query}")
    return sorted(p.name for sub in ("in-progress", "pending") for p in (writer / sub).glob("*"))


def _killed_mid_batch(tmp_path, table, query, offsets):
    """Query ``query`` wrote batch 0 (ending at ``offsets``), then was killed with batch 1
    pre-committed, undecided (its pending file), and an in-progress file of a task that
    never finished; its checkpoint is lost."""
    _checkpoint(tmp_path / query, query, [offsets, offsets])
    sink = _sink(table, tmp_path / query)
    _stream_batch(sink, query, 0, [1])
    _stream_batch(sink, query, 1, [2], commit=False)
    writer = table / "_kafka_eos" / writer_dir(f"q:{query}")
    (writer / "in-progress" / f"{query_token(query)}-1-1-0.0000aaaa.parquet").write_bytes(b"half a file")
    assert len(_staged(table, query)) == 2


def test_the_first_batch_of_a_query_that_took_over_deletes_what_the_superseded_query_left_staged(tmp_path,
                                                                                                  caplog):
    table = tmp_path / "table"
    _killed_mid_batch(tmp_path, table, "q-a", {"in": {"0": 5, "1": 5}})
    # Beside it: a pipeline on another topic, and one that read 'in' further than the new query.
    _killed_mid_batch(tmp_path, table, "q-other", {"other": {"0": 3}})
    _killed_mid_batch(tmp_path, table, "q-ahead", {"in": {"0": 50}})
    _checkpoint(tmp_path / "q-b", "q-b", [{"in": {"0": 9, "1": 9}}, {"in": {"0": 12, "1": 9}}])
    b = _sink(table, tmp_path / "q-b")
    with caplog.at_level("WARNING"):
        _stream_batch(b, "q-b", 0, [3])
    assert _staged(table, "q-a") == []  # before: its pending and in-progress files, for good
    assert len(_staged(table, "q-other")) == 2 and len(_staged(table, "q-ahead")) == 2
    kept = " ".join(r.getMessage() for r in caplog.records if "left staged" in r.getMessage())
    assert f"{writer_dir('q:q-other')} (2: query q-other read other-0 further than this query)" in kept
    assert f"{writer_dir('q:q-ahead')} (2: query q-ahead read in-0 further than this query)" in kept
    assert _ids(table) == [1, 1, 1, 3]  # the three queries' batch 0 and the new query's
    # Later batches of the query leave the others alone (it took the table over once).
    _killed_mid_batch(tmp_path, table, "q-late", {"in": {"0": 1}})
    _stream_batch(b, "q-b", 1, [4])
    assert len(_staged(table, "q-late")) == 2


def test_a_query_that_restarts_from_its_own_checkpoint_leaves_the_others_alone(tmp_path):
    table = tmp_path / "table"
    _checkpoint(tmp_path / "q-b", "q-b", [{"in": {"0": 9}}, {"in": {"0": 12}}])
    b = _sink(table, tmp_path / "q-b")
    _stream_batch(b, "q-b", 0, [3])
    _killed_mid_batch(tmp_path, table, "q-a", {"in": {"0": 5}})
    _stream_batch(b, "q-b", 1, [4])
    assert len(_staged(table, "q-a")) == 2


class FakeS3Client:
    """The few S3 calls the table's store makes, in memory (S3Store's own code runs on it;
    integration/test_table_s3.py runs the sink against MinIO)."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.open_uploads: dict[str, str] = {}  # upload id -> key
        self._next = 0

    @staticmethod
    def _error(code: str, status: int):
        from botocore.exceptions import ClientError

        return ClientError({"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "op")

    def get_object(self, Bucket, Key):
        if Key not in self.objects:
            raise self._error("NoSuchKey", 404)
        return {"Body": _Body(self.objects[Key])}

    def head_object(self, Bucket, Key):
        if Key not in self.objects:
            raise self._error("404", 404)
        return {"Metadata": {}}

    def put_object(self, Bucket, Key, Body, IfNoneMatch=None):
        if IfNoneMatch == "*" and Key in self.objects:
            raise self._error("PreconditionFailed", 412)
        self.objects[Key] = bytes(Body)

    def delete_object(self, Bucket, Key):
        self.objects.pop(Key, None)

    def create_multipart_upload(self, Bucket, Key, Metadata=None):
        self._next += 1
        self.open_uploads[str(self._next)] = Key
        return {"UploadId": str(self._next)}

    def upload_part(self, Bucket, Key, UploadId, PartNumber, Body):
        if UploadId not in self.open_uploads:
            raise self._error("NoSuchUpload", 404)
        return {"ETag": f"etag-{PartNumber}"}

    def complete_multipart_upload(self, Bucket, Key, UploadId, MultipartUpload, IfNoneMatch=None):
        if UploadId not in self.open_uploads:
            raise self._error("NoSuchUpload", 404)
        if IfNoneMatch == "*" and Key in self.objects:
            raise self._error("PreconditionFailed", 412)  # the upload stays open
        del self.open_uploads[UploadId]
        self.objects[Key] = b""

    def abort_multipart_upload(self, Bucket, Key, UploadId):
        if self.open_uploads.pop(UploadId, None) is None:
            raise self._error("NoSuchUpload", 404)

    def get_paginator(self, name):
        client = self

        class Pages:
            @staticmethod
            def paginate(Bucket, Prefix="", Delimiter=None):
                if name == "list_multipart_uploads":
                    return [{"Uploads": [{"Key": k, "UploadId": u} for u, k in client.open_uploads.items()]}]
                keys = [k for k in sorted(client.objects) if k.startswith(Prefix)]
                if Delimiter is None:
                    return [{"Contents": [{"Key": k} for k in keys]}]
                direct = [k for k in keys if Delimiter not in k[len(Prefix):]]
                deeper = sorted({Prefix + k[len(Prefix):].split(Delimiter)[0] + Delimiter for k in keys} - set(direct))
                return [{"Contents": [{"Key": k} for k in direct], "CommonPrefixes": [{"Prefix": p} for p in deeper]}]

        return Pages()


class _Body:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def read(self) -> bytes:
        return self.data


def test_on_s3_the_superseded_querys_open_uploads_are_aborted(caplog):
    from kafka_eos_ds.table_sink.takeover import clean_superseded
    from kafka_eos_ds.table_sink.uploads import UploadParticipants

    store = S3Store.__new__(S3Store)
    store.bucket, store.url, store._client = "lake", "s3a://lake", FakeS3Client()
    layout = Layout(PurePosixPath("/lake/events"))
    committer = TwoPhaseCommitter(FileDecisionLog(layout, store), UploadParticipants(layout, store),
                                  streams_share_ids=False, progress_store=RecordedProgress())

    def killed(query, offsets, tasks):
        """``query`` recorded batch 0 done, then was killed with batch 1's uploads open."""
        committer.decisions.write(f"q:{query}", Decision(query, 0, DONE, (), {"offsets": offsets}))
        for task in range(tasks):
            fid = FileId(writer_dir(f"q:{query}"), query_token(query), 1, task, None)
            store.start_upload(str(layout.upload(fid, f"dt=2026-11-0{task + 1}")), {})

    killed("q-a", {"in": {"0": 5}}, 3)
    killed("q-other", {"other": {"0": 3}}, 1)
    committer.decisions.write("q:q-b", Decision("q-b", 0, DONE, (), {"offsets": {"in": {"0": 9}}}))
    store.start_upload(str(layout.upload(FileId(writer_dir("q:q-b"), query_token("q-b"), 1, 0, None))), {})
    with caplog.at_level("WARNING"):
        clean_superseded(committer, layout, store, "q-b", {"offsets": {"in": {"0": 9}}})
    left = {key.rsplit("/", 1)[1] for key in store._client.open_uploads.values()}
    assert left == {f"part-00001-00000-{writer_dir('q:q-b')}-{query_token('q-b')}.parquet",  # its own: untouched
                    f"part-00001-00000-{writer_dir('q:q-other')}-{query_token('q-other')}.parquet"}
    assert any(writer_dir("q:q-other") in r.getMessage() and "other-0 further" in r.getMessage()
               for r in caplog.records)
