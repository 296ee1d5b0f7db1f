"""File sink without Spark: names, options, and the two ports against a real directory."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kafka_eos_ds.errors import ConfigError, TransactionError
from kafka_eos_ds.filesink.config import FileSinkConfig, check_writable
from kafka_eos_ds.filesink.layout import FileId, Layout, query_token
from kafka_eos_ds.filesink.decision_log import FileDecisionLog
from kafka_eos_ds.filesink.participants import FileParticipants
from kafka_eos_ds.filesink.task import FileCommitMessage, _FileWriter, write_files
from kafka_eos_ds.twophase import DECIDED, DONE, Decision, DoneMark, Outcome, Participant, TwoPhaseCommitter


# -- layout ----------------------------------------------------------------------

def test_file_id_round_trips_through_staging_names():
    fid = FileId("5a2bb5a1", 12, 3, 1)
    assert str(fid) == "5a2bb5a1-12-3-1"
    layout = Layout(__import__("pathlib").Path("/out"), "parquet")
    assert layout.in_progress(fid).as_posix() == "/out/_kafka_eos/in-progress/5a2bb5a1-12-3-1.parquet"
    assert layout.pending(fid).as_posix() == "/out/_kafka_eos/pending/5a2bb5a1-12-3-1.parquet"
    assert FileId.parse(layout.pending(fid).name) == fid
    assert FileId.parse("5a2bb5a1-12-3-1") == fid


def test_final_name_is_the_same_for_every_attempt_and_sorts_by_batch():
    a0, a2 = FileId("q1", 7, 2, 0), FileId("q1", 7, 2, 2)
    assert a0.final_name("parquet") == a2.final_name("parquet") == "part-00007-00002-q1.parquet"
    assert FileId("q1", 10, 0, 0).final_name("jsonl") > FileId("q1", 9, 5, 0).final_name("jsonl")


@pytest.mark.parametrize("name", ["part-00001-00000-q.parquet", ".decision.json.tmp", "x-1-2", "q-1-2-x.parquet"])
def test_names_that_are_not_staging_ids_are_ignored(name):
    assert FileId.parse(name) is None


def test_earlier_attempts_and_query_token():
    assert [str(f) for f in FileId("q", 1, 4, 2).earlier_attempts()] == ["q-1-4-0", "q-1-4-1"]
    assert query_token("5A2BB5A1-aaaa-bbbb") == "5a2bb5a1"
    assert query_token(None) == "none"


def test_staging_directory_is_hidden_from_readers_by_its_name():
    # Spark's and Arrow's listings skip names starting with '_' or '.'.
    assert Layout(__import__("pathlib").Path("/out")).staging.name.startswith("_")


# -- options -----------------------------------------------------------------------

def test_options_defaults_and_file_uri(tmp_path):
    cfg = FileSinkConfig.from_options({"path": f"file://{tmp_path}/out"})
    assert cfg.root == tmp_path / "out" and cfg.file_format == "parquet" and cfg.layout.ext == "parquet"
    assert FileSinkConfig.from_options({"PATH": str(tmp_path), "FILEFORMAT": "JSONL"}).file_format == "jsonl"
    assert FileSinkConfig.from_options({"path": "file:/data/x"}).root.as_posix() == "/data/x"


@pytest.mark.parametrize("options, named", [
    ({}, "'path'"),
    ({"path": " "}, "'path'"),
    ({"path": "/tmp/x", "fileFormat": "csv"}, "'fileFormat'"),
    ({"path": "s3a://bucket/out"}, "'path'"),
    ({"path": "hdfs://nn:8020/out"}, "'path'"),
    ({"path": "file://otherhost/out"}, "'path'"),
    ({"path": "/tmp/x", "commitTimeoutMs": "soon"}, "'commitTimeoutMs'"),
])
def test_bad_options_name_the_option(options, named):
    with pytest.raises(ConfigError, match=named):
        FileSinkConfig.from_options(options)


def test_unsupported_scheme_says_what_is_supported():
    with pytest.raises(ConfigError, match="file: URI"):
        FileSinkConfig.from_options({"path": "s3a://bucket/out"})


def test_path_that_is_a_file_or_unwritable_is_a_config_error(tmp_path):
    a_file = tmp_path / "f"
    a_file.write_text("x")
    with pytest.raises(ConfigError, match="'path'.*not a directory"):
        check_writable(Layout(a_file))
    # Beneath a regular file nothing can be created, whoever runs the test.
    with pytest.raises(ConfigError, match="'path'.*cannot be written"):
        check_writable(Layout(a_file / "out"))


# -- the ports against a real directory -------------------------------------------

def _stage(layout: Layout, fid: FileId, where: str = "pending", body: bytes = b"rows") -> Participant:
    layout.ensure()
    path = layout.pending(fid) if where == "pending" else layout.in_progress(fid)
    path.write_bytes(body)
    return Participant(str(fid), fid.partition, fid.attempt, 1,
                       {"pending": layout.relative(layout.pending(fid)), "final": layout.relative(layout.final(fid)),
                        "inode": path.stat().st_ino})


def test_commit_renames_pending_to_final_and_is_idempotent(tmp_path):
    layout = Layout(tmp_path)
    ports = FileParticipants(layout)
    p = _stage(layout, FileId("q", 1, 0, 0))
    assert ports.open_ids() == ["q-1-0-0"]
    assert ports.commit(p) is Outcome.COMMITTED
    assert (tmp_path / "part-00001-00000-q.parquet").read_bytes() == b"rows"
    assert not layout.pending(FileId("q", 1, 0, 0)).exists()
    assert ports.open_ids() == []
    assert ports.commit(p) is Outcome.COMMITTED  # pending gone + final present


def test_commit_of_a_fenced_participant_is_lost(tmp_path):
    layout = Layout(tmp_path)
    ports = FileParticipants(layout)
    p = _stage(layout, FileId("q", 1, 0, 0))
    ports.fence(p.id)
    assert ports.commit(p) is Outcome.LOST  # both gone
    assert "pending" in ports.lost_message([p])


def test_commit_never_replaces_an_existing_final_file(tmp_path):
    layout = Layout(tmp_path)
    ports = FileParticipants(layout)
    p = _stage(layout, FileId("q", 1, 0, 0))
    (tmp_path / "part-00001-00000-q.parquet").write_bytes(b"other")
    with pytest.raises(TransactionError, match="already exists"):
        ports.commit(p)
    assert (tmp_path / "part-00001-00000-q.parquet").read_bytes() == b"other"


def test_a_recommit_after_a_zombie_staged_the_same_id_again_is_committed_and_drops_the_stray(tmp_path):
    """Attempt numbers restart per driver run and stage attempt: a zombie of the same id
    can pre-commit after the commit renamed the live file to final (and before the batch
    was recorded done). The re-commit must not refuse forever: the final file is the one
    the participant pre-committed, so it is committed, and the zombie's file goes."""
    layout = Layout(tmp_path)
    ports = FileParticipants(layout)
    p = _stage(layout, FileId("q", 1, 0, 0))
    assert ports.commit(p) is Outcome.COMMITTED
    layout.pending(FileId("q", 1, 0, 0)).write_bytes(b"zombie")
    assert ports.commit(p) is Outcome.COMMITTED
    assert (tmp_path / "part-00001-00000-q.parquet").read_bytes() == b"rows"
    assert not layout.pending(FileId("q", 1, 0, 0)).exists() and ports.open_ids() == []
    # A decision written before participants carried their file's inode: committed as well.
    legacy = Participant(p.id, p.partition, p.attempt, p.records,
                         {k: v for k, v in p.handle.items() if k != "inode"})
    layout.pending(FileId("q", 1, 0, 0)).write_bytes(b"zombie")
    assert ports.commit(legacy) is Outcome.COMMITTED and ports.open_ids() == []


def test_pre_commit_never_replaces_a_pending_file_of_the_same_id(tmp_path):
    """A zombie of the same id that pre-commits while the live attempt's file is pending
    must fail, not silently replace the file the driver is about to commit."""
    layout = Layout(tmp_path)
    layout.ensure()
    fid = FileId("q", 1, 0, 0)
    live = _FileWriter("parquet", layout.in_progress(fid), layout.pending(fid), None)
    live.write_all(_batches(4))
    live.pre_commit()
    zombie = _FileWriter("parquet", layout.in_progress(fid), layout.pending(fid), None)
    zombie.write_all(_batches(6))   # its in-progress name is free again
    with pytest.raises(TransactionError, match="already pre-committed"):
        zombie.pre_commit()
    assert pq.read_table(layout.pending(fid)).num_rows == 4
    assert layout.pending(fid).stat().st_ino == live.inode


def test_fence_deletes_in_progress_and_pending_of_that_id_only(tmp_path):
    layout = Layout(tmp_path)
    ports = FileParticipants(layout)
    _stage(layout, FileId("q", 1, 0, 0), "in-progress")
    _stage(layout, FileId("q", 1, 0, 0), "pending")
    _stage(layout, FileId("q", 1, 1, 0), "pending")
    assert ports.open_ids() == ["q-1-0-0", "q-1-1-0"]
    ports.fence("q-1-0-0")
    assert ports.open_ids() == ["q-1-1-0"]
    ports.fence("q-9-9-9")  # nothing there: no error


def test_superseded_names_the_earlier_attempts(tmp_path):
    ports = FileParticipants(Layout(tmp_path))
    assert ports.superseded(Participant("q-3-1-2", 1, 2, 5)) == ["q-3-1-0", "q-3-1-1"]
    assert ports.superseded(Participant("", 1, 0, 0)) == ()


def test_decision_log_is_replaced_atomically(tmp_path):
    layout = Layout(tmp_path)
    log = FileDecisionLog(layout)
    assert log.latest() is None
    d = Decision("query", 4, DECIDED, (Participant("q-4-0-0", 0, 0, 3, {"pending": "a", "final": "b"}),))
    log.write(d)
    assert log.latest() == d
    log.write(d.with_state(DONE))
    assert log.latest().state == DONE
    # No temp file is left next to it, and the file is whole JSON.
    assert sorted(p.name for p in layout.staging.iterdir() if p.is_file()) == ["decision.json"]
    assert json.loads(layout.decision.read_text())["batchId"] == 4


def test_recovery_commits_the_decided_and_deletes_every_other_leftover(tmp_path):
    layout = Layout(tmp_path)
    ports, log = FileParticipants(layout), FileDecisionLog(layout)
    decided = _stage(layout, FileId("q", 2, 0, 0))
    _stage(layout, FileId("q", 2, 1, 0))            # already renamed before the crash
    ports.commit(Participant("q-2-1-0", 1, 0, 1, {"pending": "_kafka_eos/pending/q-2-1-0.parquet",
                                                  "final": "part-00002-00001-q.parquet"}))
    already = Participant("q-2-1-0", 1, 0, 1, {"pending": "_kafka_eos/pending/q-2-1-0.parquet",
                                               "final": "part-00002-00001-q.parquet"})
    _stage(layout, FileId("q", 2, 0, 1), "in-progress")  # a failed attempt
    _stage(layout, FileId("q", 3, 0, 0))                  # a next batch never decided
    log.write(Decision("query", 2, DECIDED, (decided, already)))
    mark = TwoPhaseCommitter(log, ports).recover()
    assert mark == DoneMark("query", 2)
    assert sorted(p.name for p in tmp_path.glob("part-*")) == ["part-00002-00000-q.parquet",
                                                               "part-00002-00001-q.parquet"]
    assert ports.open_ids() == [] and log.latest().state == DONE


def test_commit_then_abort_of_the_same_batch_keeps_the_decision(tmp_path):
    layout = Layout(tmp_path)
    ports, log = FileParticipants(layout), FileDecisionLog(layout)
    a, b = _stage(layout, FileId("q", 5, 0, 0)), _stage(layout, FileId("q", 5, 1, 0))
    log.write(Decision("query", 5, DECIDED, (a, b)))
    ports.commit(a)  # the driver crashed / raised after the first commit
    TwoPhaseCommitter(log, ports, abort_grace_s=0).abort("query", 5, [a, b])
    assert ports.open_ids() == ["q-5-1-0"]  # the decided, uncommitted one is kept for recovery


# -- the task side, without Spark ---------------------------------------------------

def _batches(n: int, start: int = 0):
    ids = list(range(start, start + n))
    return [pa.RecordBatch.from_pydict({"id": ids[:n // 2], "v": [b"x"] * (n // 2)}),
            pa.RecordBatch.from_pydict({"id": ids[n // 2:], "v": [b"y"] * (n - n // 2)})]


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_task_writes_in_progress_then_pre_commits_to_pending(tmp_path, fmt):
    cfg = FileSinkConfig.from_options({"path": str(tmp_path), "fileFormat": fmt})
    cfg.layout.ensure()
    msg = write_files(cfg, DoneMark(), _batches(10), None, "query-1", 3)
    assert isinstance(msg, FileCommitMessage) and msg.records == 10 and msg.file_id == "query1-3-0-0"
    assert msg.pending == f"_kafka_eos/pending/query1-3-0-0.{fmt}"
    assert msg.final == f"part-00003-00000-query1.{fmt}"
    assert list(cfg.layout.in_progress_dir.iterdir()) == []
    staged = tmp_path / msg.pending
    if fmt == "parquet":
        assert pq.read_table(staged).column("id").to_pylist() == list(range(10))
    else:
        rows = [json.loads(line) for line in staged.read_text().splitlines()]
        assert [r["id"] for r in rows] == list(range(10)) and rows[0]["v"] == "eA=="  # base64, as Spark does


def test_empty_task_creates_no_file_and_covered_batch_writes_nothing(tmp_path):
    cfg = FileSinkConfig.from_options({"path": str(tmp_path)})
    cfg.layout.ensure()
    assert write_files(cfg, DoneMark(), [], None, "q", 1).records == 0
    skipped = write_files(cfg, DoneMark("q", 1), _batches(4), None, "q", 1)
    assert skipped.skipped and skipped.records == 0
    assert FileParticipants(cfg.layout).open_ids() == []


def test_failed_write_removes_its_in_progress_file(tmp_path):
    cfg = FileSinkConfig.from_options({"path": str(tmp_path)})
    cfg.layout.ensure()

    def failing():
        yield from _batches(4)
        raise RuntimeError("task killed")

    with pytest.raises(RuntimeError):
        write_files(cfg, DoneMark(), failing(), None, "q", 1)
    assert FileParticipants(cfg.layout).open_ids() == []


def test_a_fenced_writer_cannot_pre_commit(tmp_path):
    layout = Layout(tmp_path)
    layout.ensure()
    fid = FileId("q", 1, 0, 0)
    writer = _FileWriter("parquet", layout.in_progress(fid), layout.pending(fid), None)
    writer.write_all(_batches(4))
    FileParticipants(layout).fence(str(fid))  # recovery ran while this zombie was writing
    with pytest.raises(FileNotFoundError):
        writer.pre_commit()
    assert FileParticipants(layout).open_ids() == [] and not list(tmp_path.glob("part-*"))


def test_a_second_writer_of_the_same_id_refuses_to_share_the_file(tmp_path):
    layout = Layout(tmp_path)
    layout.ensure()
    fid = FileId("q", 1, 0, 0)
    first = _FileWriter("parquet", layout.in_progress(fid), layout.pending(fid), None)
    first.write_all(_batches(4))
    second = _FileWriter("parquet", layout.in_progress(fid), layout.pending(fid), None)
    with pytest.raises(FileExistsError):
        second.write_all(_batches(4))
    second.abort()  # must not delete the first writer's file
    assert layout.in_progress(fid).exists()
    first.pre_commit()
    assert pq.read_table(layout.pending(fid)).num_rows == 4
