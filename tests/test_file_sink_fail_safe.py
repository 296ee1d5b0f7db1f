"""The file sink's stores and metastore fail safe: a crash inside a move, a transient
failure while preparing, a store that ignores conditional writes, a partition the
metastore refuses."""

from __future__ import annotations

import os
from pathlib import PurePosixPath

import pyarrow as pa
import pytest
from hmsclient.genthrift.hive_metastore import ttypes
from pyspark.sql.types import LongType, StringType, StructField, StructType

from kafka_eos_ds.errors import ConfigError, StorageError, TransactionError
from kafka_eos_ds.storage.local import LocalStore
from kafka_eos_ds.storage.s3 import S3Store
from kafka_eos_ds.table_sink.config import FileSinkConfig, check_writable
from kafka_eos_ds.table_sink.decision_log import FileDecisionLog
from kafka_eos_ds.table_sink.handles import StagedFile, StagedFiles
from kafka_eos_ds.table_sink.layout import FileId, Layout, writer_dir
from kafka_eos_ds.table_sink.metastore import Metastore
from kafka_eos_ds.table_sink.participants import FileParticipants
from kafka_eos_ds.table_sink.sink import FileSink
from kafka_eos_ds.twophase import DoneMark, Kind, Outcome, Participant, WriteId, WriteSpec
from kafka_eos_ds.twophase.writers import Task
from tests.test_file_sink_table_life import FakeS3Client

W = writer_dir("q:query")


def _staged(layout: Layout, batch: int = 1) -> Participant:
    fid = FileId(W, "q", batch, 0, 0)
    layout.ensure(fid.writer)
    pending = layout.pending(fid, "5ea1ed00")
    pending.write_bytes(b"rows")
    return Participant(str(fid), fid.partition, fid.attempt, 1,
                       StagedFiles((StagedFile(layout.relative(layout.final(fid)), layout.relative(pending)),)))


# -- a crash between the link and the unlink of a local move ----------------------

def test_a_commit_interrupted_between_link_and_unlink_is_finished_by_the_recommit(tmp_path):
    """The local move is a link then an unlink: a crash between them leaves the pending
    and the final name on one file. The re-commit finishes the move."""
    layout = Layout(tmp_path)
    p = _staged(layout)
    [staged] = p.handle.files
    pending, final = layout.resolve(staged.pending), layout.resolve(staged.final)
    os.link(pending, final)  # the crash struck here
    assert FileParticipants(layout).commit(p) is Outcome.COMMITTED
    assert final.read_bytes() == b"rows" and not pending.exists()


def test_an_interrupted_local_move_is_finished_and_a_taken_name_still_refused(tmp_path):
    src, dst, other = tmp_path / "in-progress" / "a", tmp_path / "pending" / "a", tmp_path / "b"
    src.parent.mkdir()
    src.write_bytes(b"rows")
    dst.parent.mkdir()
    os.link(src, dst)
    LocalStore().rename(str(src), str(dst))
    assert dst.read_bytes() == b"rows" and not src.exists()
    other.write_bytes(b"other")
    try:
        LocalStore().rename(str(dst), str(other))
    except FileExistsError:
        pass
    else:
        raise AssertionError("a move over another file must be refused")
    assert other.read_bytes() == b"other" and dst.exists()


# -- prepare: a transient failure is retried, not taken for a bad 'path' -------------

class FlakyStore(LocalStore):
    """A local directory that answers like a remote store (a URL of its own), whose first
    ``failures`` puts fail as ``error`` does."""

    url = "flaky://bucket"

    def __init__(self, error: Exception | None = None, failures: int = 1) -> None:
        super().__init__()
        self.error = error
        self.failures = failures
        self.puts = 0

    def put(self, path: str, data: bytes, *, new: bool = False) -> None:
        self.puts += 1
        if self.error is not None and self.puts <= self.failures:
            raise self.error
        super().put(path, data, new=new)


def _sink(tmp_path, store, **options):
    config = FileSinkConfig.from_options({"path": str(tmp_path / "out"), "commitTimeoutMs": "2000", **options})
    config._stores["store"] = store
    return FileSink(config, StructType([StructField("v", StringType())]))


def test_prepare_retries_a_store_that_fails_once_instead_of_refusing_the_path(tmp_path):
    store = FlakyStore(StorageError("S3 call failed (SlowDown: reduce your request rate)", retriable=True))
    assert _sink(tmp_path, store).prepare(WriteSpec(False, "job")) == DoneMark()


def test_a_store_that_stays_unavailable_fails_retriably_not_as_a_bad_path(tmp_path):
    store = FlakyStore(StorageError("NameNode is in safe mode", retriable=True), failures=10**6)
    with pytest.raises(TransactionError, match="NameNode is in safe mode") as info:
        _sink(tmp_path, store, commitTimeoutMs="1000").prepare(WriteSpec(False, "job"))
    assert info.value.retriable and not isinstance(info.value, ConfigError)


def test_a_store_that_refuses_access_is_a_path_error(tmp_path):
    store = FlakyStore(StorageError("S3 refused s3a://bucket/out (AccessDenied)", retriable=False), failures=10**6)
    with pytest.raises(ConfigError, match="'path'.*cannot be written.*AccessDenied"):
        _sink(tmp_path, store).prepare(WriteSpec(False, "job"))


def test_writability_is_probed_once_per_process_not_every_batch(tmp_path):
    store = FlakyStore()
    sink = _sink(tmp_path, store)
    sink.prepare(WriteSpec(False, "job"))
    probes = store.puts
    sink.prepare(WriteSpec(False, "job"))
    assert probes > 0 and store.puts == probes


def test_prepare_retries_a_metastore_that_is_restarting(tmp_path, monkeypatch):
    calls = []

    def ensure_table(self, schema, partitioning):
        calls.append(1)
        if len(calls) == 1:
            raise StorageError("No Hive metastore answers (thrift://metastore:9083: connection refused)",
                               retriable=True)

    monkeypatch.setattr(Metastore, "ensure_table", ensure_table)
    sink = _sink(tmp_path, FlakyStore(), table="lake.events", **{"hive.metastore.uris": "thrift://metastore:9083"})
    assert sink.prepare(WriteSpec(False, "job")) == DoneMark() and len(calls) == 2


# -- a store that ignores create-if-absent (S3: If-None-Match: *) ------------------

class IgnoresConditionStore(FlakyStore):
    """An S3-compatible store that accepts ``If-None-Match: *`` and ignores it: every put
    replaces what is there."""

    def put(self, path: str, data: bytes, *, new: bool = False) -> None:
        super().put(path, data, new=False)


def test_a_store_that_ignores_create_if_absent_is_refused_before_anything_is_written(tmp_path):
    sink = _sink(tmp_path, IgnoresConditionStore())
    with pytest.raises(ConfigError, match="'path'.*If-None-Match.*docs/file-sink.md") as info:
        sink.prepare(WriteSpec(False, "job"))
    assert not info.value.retriable
    staged = tmp_path / "out" / "_kafka_eos"
    assert not [p for p in staged.rglob("*") if p.is_file()]  # the probe is gone, nothing else was written


def test_a_store_that_honours_create_if_absent_passes_the_probe(tmp_path):
    store = FlakyStore()
    _sink(tmp_path, store).prepare(WriteSpec(False, "job"))
    assert store.puts == 2  # created, then refused the second time


class IgnoresCompletionConditionClient(FakeS3Client):
    """A bucket that honours ``If-None-Match: *`` on PutObject and ignores it on
    CompleteMultipartUpload: a completion replaces the object there."""

    def complete_multipart_upload(self, Bucket, Key, UploadId, MultipartUpload, IfNoneMatch=None):
        super().complete_multipart_upload(Bucket, Key, UploadId, MultipartUpload)


def _s3_store(client: FakeS3Client) -> S3Store:
    store = S3Store.__new__(S3Store)
    store.bucket, store.url, store._client = "lake", "s3a://lake", client
    return store


def test_a_store_that_ignores_create_if_absent_on_completion_is_refused_before_anything_is_written():
    client = IgnoresCompletionConditionClient()
    layout = Layout(PurePosixPath("/lake/ignored"))  # a root of its own: the probe runs once per root
    with pytest.raises(ConfigError, match="'path'.*If-None-Match.*CompleteMultipartUpload.*docs/file-sink.md") as info:
        check_writable(layout, _s3_store(client))
    assert not info.value.retriable
    assert client.objects == {} and client.open_uploads == {}  # the probe and its upload are gone


def test_a_store_that_honours_create_if_absent_on_completion_passes_the_probe_and_leaves_nothing():
    client = FakeS3Client()
    check_writable(Layout(PurePosixPath("/lake/honoured")), _s3_store(client))
    assert client.objects == {} and client.open_uploads == {}


# -- a partition the metastore refuses --------------------------------------------

class FakeHms:
    """A Hive metastore client (hmsclient's calls the sink makes) whose add_partitions
    refuses any partition holding ``refuse`` (as a name whitelist pattern does), or
    answers a duplicate key ``duplicates`` times (a concurrent first registration)."""

    def __init__(self, refuse: str | None = None, duplicates: int = 0) -> None:
        self.refuse, self.duplicates = refuse, duplicates
        self.table = None
        self.partitions: list[list[str]] = []

    def __call__(self, iprot=None):
        return self

    def open(self):
        return self

    def close(self):
        pass

    def get_table(self, database, name):
        if self.table is None:
            raise ttypes.NoSuchObjectException(f"{database}.{name} table not found")
        return self.table

    def create_table(self, table):
        self.table = table

    def add_partitions_req(self, request):
        for part in request.parts:
            if self.refuse is not None and self.refuse in part.values:
                raise ttypes.MetaException(f"Partition value '{self.refuse}' contains a character not matched by "
                                           "whitelist pattern '[\\\\w]*'")
        if self.duplicates:
            self.duplicates -= 1
            raise ttypes.MetaException("Duplicate entry 'x' for key 'UNIQUEPARTITION'")
        self.partitions += [list(p.values) for p in request.parts if list(p.values) not in self.partitions]


SCHEMA = StructType([StructField("id", LongType()), StructField("country", StringType())])


def _table_sink(tmp_path, monkeypatch, hms):
    from hmsclient import hmsclient

    monkeypatch.setattr(hmsclient, "HMSClient", hms)
    config = FileSinkConfig.from_options({"path": str(tmp_path / "out"), "commitTimeoutMs": "2000",
                                          "partitionBy": "country", "table": "lake.events",
                                          "hive.metastore.uris": "thrift://metastore:9083"}, SCHEMA)
    return FileSink(config, SCHEMA)


def _write(sink, write, countries):
    rows = pa.RecordBatch.from_pydict({"id": pa.array(range(len(countries)), pa.int64()),
                                       "country": pa.array(countries, pa.string())})
    return sink.write(Task(write, 0, 0), DoneMark(), iter([rows])).participant()


def test_a_partition_the_metastore_refuses_refuses_the_batch_before_its_decision(tmp_path, monkeypatch):
    hms = FakeHms(refuse="d-e")
    sink = _table_sink(tmp_path, monkeypatch, hms)
    write = WriteId(Kind.JOB, "job-1", 0, job="job-1")
    sink.prepare(WriteSpec(False, "job-1"))
    staged = _write(sink, write, ["fr", "d-e"])
    with pytest.raises(TransactionError, match="metastore refused.*d-e.*Nothing of the batch is visible") as info:
        sink.commit(write, [staged])
    assert not info.value.retriable
    root = tmp_path / "out"
    assert not list(root.rglob("part-*"))  # no file final
    assert FileDecisionLog(sink.config.layout).latest(write.key) is None  # nothing decided
    sink.abort(write, [staged], WriteSpec(False, "job-1"))  # what Spark does next
    assert FileParticipants(sink.config.layout).open_ids(write) == []


class DirectoryWatchingHms(FakeHms):
    """Records, at each registration, whether each partition's directory was there: a
    metastore that creates it deletes it again, files and all, when the add fails."""

    def __init__(self, root) -> None:
        super().__init__()
        self.root, self.found = root, []

    def add_partitions_req(self, request):
        self.found += [(self.root / f"country={p.values[0]}").is_dir() for p in request.parts]
        super().add_partitions_req(request)


def test_a_new_partitions_directory_exists_before_the_metastore_registers_it(tmp_path, monkeypatch):
    hms = DirectoryWatchingHms(tmp_path / "out")
    sink = _table_sink(tmp_path, monkeypatch, hms)
    write = WriteId(Kind.JOB, "job-1", 0, job="job-1")
    sink.prepare(WriteSpec(False, "job-1"))
    sink.commit(write, [_write(sink, write, ["fr", "de"])])
    assert hms.found and all(hms.found), hms.found  # before the decision and at the publish


def test_a_duplicate_key_of_a_concurrent_registration_is_retried(tmp_path, monkeypatch):
    hms = FakeHms(duplicates=1)
    sink = _table_sink(tmp_path, monkeypatch, hms)
    write = WriteId(Kind.JOB, "job-1", 0, job="job-1")
    sink.prepare(WriteSpec(False, "job-1"))
    sink.commit(write, [_write(sink, write, ["fr", "de"])])
    assert sorted(hms.partitions) == [["de"], ["fr"]] and len(list((tmp_path / "out").rglob("part-*"))) == 2


class MarkerWatchingHms(FakeHms):
    """Records, at each registration on S3, whether each partition's directory marker (the
    object s3a takes for a directory) was there: a metastore on s3a:// that finds none
    makes one and deletes the whole prefix, final files and all, when the add fails."""

    def __init__(self, client: FakeS3Client, prefix: str) -> None:
        super().__init__()
        self.client, self.prefix, self.found = client, prefix, []

    def add_partitions_req(self, request):
        self.found += [f"{self.prefix}/country={p.values[0]}/" in self.client.objects for p in request.parts]
        super().add_partitions_req(request)


def test_on_s3_a_new_partitions_directory_marker_exists_before_the_metastore_registers_it(monkeypatch):
    from hmsclient import hmsclient

    from kafka_eos_ds.table_sink.handles import FileParticipant, StagedFile, StagedFiles
    from kafka_eos_ds.table_sink.publishing import prepare_table, register_partitions

    client = FakeS3Client()
    hms = MarkerWatchingHms(client, "events")
    monkeypatch.setattr(hmsclient, "HMSClient", hms)
    config = FileSinkConfig.from_options({"path": "s3a://lake/events", "partitionBy": "country",
                                          "table": "lake.events", "hive.metastore.uris": "thrift://metastore:9083"},
                                         SCHEMA)
    prepare_table(config, SCHEMA, _s3_store(client))
    assert "events/" in client.objects  # the table's own directory, before its creation
    files = tuple(StagedFile(f"country={c}/part-00000-00000-q1-t.parquet", "", f"country={c}", 3)
                  for c in ("fr", "de"))
    register_partitions(config, _s3_store(client), [FileParticipant("q1/0-0", 0, 0, 6, StagedFiles(files))])
    assert hms.found == [True, True], hms.found
    assert sorted(hms.partitions) == [["de"], ["fr"]]


class ThrottledMarkerClient(FakeS3Client):
    """S3 throttling the first ``throttled`` writes of a directory marker (503 SlowDown)."""

    def __init__(self, throttled: int) -> None:
        super().__init__()
        self.throttled = throttled

    def put_object(self, Bucket, Key, Body, IfNoneMatch=None):
        if Key.endswith("/") and self.throttled:
            self.throttled -= 1
            raise self._error("SlowDown", 503)
        super().put_object(Bucket, Key, Body, IfNoneMatch)


def test_a_throttled_directory_marker_holds_the_registration_back_until_it_is_written(monkeypatch):
    # Registering without the marker is what lets the metastore delete another writer's
    # files: a marker S3 did not write this time is asked for again (the commit retries a
    # retriable error), never skipped.
    from hmsclient import hmsclient

    from kafka_eos_ds.table_sink.handles import FileParticipant, StagedFile, StagedFiles
    from kafka_eos_ds.table_sink.publishing import prepare_table, register_partitions

    client = ThrottledMarkerClient(throttled=0)
    hms = MarkerWatchingHms(client, "events")
    monkeypatch.setattr(hmsclient, "HMSClient", hms)
    config = FileSinkConfig.from_options({"path": "s3a://lake/events", "partitionBy": "country",
                                          "table": "lake.events", "hive.metastore.uris": "thrift://metastore:9083"},
                                         SCHEMA)
    files = tuple(StagedFile(f"country={c}/part-00000-00000-q1-t.parquet", "", f"country={c}", 3)
                  for c in ("fr", "de"))
    participants = [FileParticipant("q1/0-0", 0, 0, 6, StagedFiles(files))]
    prepare_table(config, SCHEMA, _s3_store(client))
    client.throttled = 1
    with pytest.raises(StorageError, match="SlowDown") as info:
        register_partitions(config, _s3_store(client), participants)
    assert info.value.retriable and hms.partitions == []  # nothing registered without its marker
    register_partitions(config, _s3_store(client), participants)  # the commit's retry
    assert hms.found == [True, True] and sorted(hms.partitions) == [["de"], ["fr"]]


@pytest.mark.parametrize("error, raised", [(StorageError("NameNode failing over", retriable=True), True),
                                           (StorageError("name too long", retriable=False), False),
                                           (OSError(36, "File name too long"), False)])
def test_a_directory_the_store_may_make_when_asked_again_is_not_skipped(error, raised):
    from kafka_eos_ds.table_sink.staging import RenameStaging

    class FailingStore:
        def make_dirs(self, path):
            raise error

    staging = RenameStaging(FailingStore())  # type: ignore[arg-type]
    if raised:  # the caller retries it before registering
        with pytest.raises(StorageError):
            staging.prepare_directories(PurePosixPath("/lake/t"), ["country=fr"])
    else:  # left to the metastore's or the commit's own refusal
        staging.prepare_directories(PurePosixPath("/lake/t"), ["country=fr"])
