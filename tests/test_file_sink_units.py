"""File sink without Spark: names, options, and the two ports against a real directory."""

from __future__ import annotations

import json
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kafka_eos_ds.errors import ConfigError, TransactionError
from kafka_eos_ds.table_sink.config import FileSinkConfig, check_writable
from kafka_eos_ds.table_sink.decision_log import FileDecisionLog
from kafka_eos_ds.table_sink.handles import StagedFile, StagedFiles
from kafka_eos_ds.table_sink.layout import FileId, Layout, query_token, writer_dir
from kafka_eos_ds.table_sink.participants import FileParticipants
from kafka_eos_ds.table_sink.staging import RenameFile
from kafka_eos_ds.table_sink.task import FileCommitMessage, write_files
from kafka_eos_ds.twophase import (
    DECIDED,
    DONE,
    Decision,
    DoneMark,
    Kind,
    Outcome,
    Participant,
    TwoPhaseCommitter,
    WriteId,
)
from kafka_eos_ds.twophase.writers import Task

W = writer_dir("q:query")  # the staging directory of stream "query"
QUERY = WriteId(Kind.STREAM, "query", -1)


def fid_(token, batch, partition, attempt, writer=W):
    return FileId(writer, token, batch, partition, attempt)


def task(query, batch, partition=0, attempt=0):
    return Task(WriteId(Kind.STREAM, query, batch), partition, attempt)


# -- layout ----------------------------------------------------------------------

def test_file_id_round_trips_through_staging_names():
    fid = fid_("5a2bb5a1", 12, 3, 1)
    assert str(fid) == f"{W}/5a2bb5a1-12-3-1"
    layout = Layout(__import__("pathlib").Path("/out"), "parquet")
    assert layout.in_progress(fid, "c0ffee00").as_posix() == \
        f"/out/_kafka_eos/{W}/in-progress/5a2bb5a1-12-3-1.c0ffee00.parquet"
    assert layout.pending(fid, "c0ffee00", 2).as_posix() == \
        f"/out/_kafka_eos/{W}/pending/5a2bb5a1-12-3-1.c0ffee00.2.parquet"
    assert FileId.parse(f"{W}/{layout.pending(fid, 'c0ffee00').name}") == fid
    assert FileId.parse(f"{W}/{layout.pending(fid, 'c0ffee00', 2).name}") == fid
    assert FileId.parse(f"{W}/5a2bb5a1-12-3-1") == fid


def test_each_writer_stages_apart_and_df_writes_never_share_a_name():
    stream = FileId.of(WriteId(Kind.STREAM, "5A2BB5A1-aaaa", 3), 0, 0)
    assert stream.writer == writer_dir("q:5A2BB5A1-aaaa") and stream.token == "5a2bb5a1"
    # Two writes of one micro-batch inside foreachBatch: one writer, different names.
    one = FileId.of(WriteId(Kind.FOREACH, "Q", 3, run="r", job="job-a"), 0, 0)
    two = FileId.of(WriteId(Kind.FOREACH, "Q", 3, run="r", job="job-b"), 0, 0)
    assert one.writer == two.writer == writer_dir("f:Q") and one.final_name("parquet") != two.final_name("parquet")


def test_final_name_is_the_same_for_every_attempt_and_sorts_by_batch():
    a0, a2 = fid_("q1", 7, 2, 0), fid_("q1", 7, 2, 2)
    assert a0.final_name("parquet") == a2.final_name("parquet") == "part-00007-00002-q1.parquet"
    assert fid_("q1", 10, 0, 0).final_name("jsonl") > fid_("q1", 9, 5, 0).final_name("jsonl")


@pytest.mark.parametrize("name", ["part-00001-00000-q.parquet", ".decisions.tmp", "x-1-2", "q-1-2-x.parquet",
                                  f"{W}/q-1-2-x.parquet", "q-1-2-3"])
def test_names_that_are_not_staging_ids_are_ignored(name):
    assert FileId.parse(name) is None


def test_earlier_attempts_and_query_token():
    assert [f.name for f in fid_("q", 1, 4, 2).earlier_attempts()] == ["q-1-4-0", "q-1-4-1"]
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
    ({"path": "gs://bucket/out"}, "'path'"),
    ({"path": "hdfs:///out"}, "'path'"),
    ({"path": "s3a:///out"}, "'path'"),
    ({"path": "file://otherhost/out"}, "'path'"),
    ({"path": "/tmp/x", "commitTimeoutMs": "soon"}, "'commitTimeoutMs'"),
])
def test_bad_options_name_the_option(options, named):
    with pytest.raises(ConfigError, match=named):
        FileSinkConfig.from_options(options)


def test_unsupported_scheme_says_what_is_supported():
    with pytest.raises(ConfigError, match="file: URI.*hdfs://.*s3a://"):
        FileSinkConfig.from_options({"path": "gs://bucket/out"})


def test_path_that_is_a_file_or_unwritable_is_a_config_error(tmp_path):
    a_file = tmp_path / "f"
    a_file.write_text("x")
    with pytest.raises(ConfigError, match="'path'.*not a directory"):
        check_writable(Layout(a_file))
    # Beneath a regular file nothing can be created, whoever runs the test.
    with pytest.raises(ConfigError, match="'path'.*cannot be written"):
        check_writable(Layout(a_file / "out"))


# -- the ports against a real directory -------------------------------------------

def _stage(layout: Layout, fid: FileId, where: str = "pending", body: bytes = b"rows",
           stamp: str = "5ea1ed00") -> Participant:
    layout.ensure(fid.writer)
    path = layout.pending(fid, stamp) if where == "pending" else layout.in_progress(fid, stamp)
    path.write_bytes(body)
    return Participant(str(fid), fid.partition, fid.attempt, 1,
                       StagedFiles((StagedFile(layout.relative(layout.final(fid)),
                                               layout.relative(layout.pending(fid, stamp))),)))


def test_commit_renames_pending_to_final_and_is_idempotent(tmp_path):
    layout = Layout(tmp_path)
    ports = FileParticipants(layout)
    p = _stage(layout, fid_("q", 1, 0, 0))
    assert ports.open_ids(QUERY) == [f"{W}/q-1-0-0"]
    assert ports.commit(p) is Outcome.COMMITTED
    assert (tmp_path / "part-00001-00000-q.parquet").read_bytes() == b"rows"
    assert not (tmp_path / p.handle.files[0].pending).exists()
    assert ports.open_ids(QUERY) == []
    assert ports.commit(p) is Outcome.COMMITTED  # pending gone + final present


def test_commit_of_a_fenced_participant_is_lost(tmp_path):
    layout = Layout(tmp_path)
    ports = FileParticipants(layout)
    p = _stage(layout, fid_("q", 1, 0, 0))
    ports.fence(p.id)
    assert ports.commit(p) is Outcome.LOST  # both gone
    assert "pending" in ports.lost_message([p])


def test_commit_never_replaces_an_existing_final_file(tmp_path):
    layout = Layout(tmp_path)
    ports = FileParticipants(layout)
    p = _stage(layout, fid_("q", 1, 0, 0))
    (tmp_path / "part-00001-00000-q.parquet").write_bytes(b"other")
    with pytest.raises(TransactionError, match="already exists"):
        ports.commit(p)
    assert (tmp_path / "part-00001-00000-q.parquet").read_bytes() == b"other"


def test_a_recommit_after_a_zombie_staged_the_same_id_again_is_committed_and_drops_the_stray(tmp_path):
    """Attempt numbers restart per driver run and stage attempt: a zombie of the same id
    can pre-commit after the commit renamed the live file to final (and before the batch
    was recorded done). The re-commit must not refuse: the participant's own pending file
    is final, so it is committed, and the zombie's file (its own stamp) goes."""
    layout = Layout(tmp_path)
    ports = FileParticipants(layout)
    p = _stage(layout, fid_("q", 1, 0, 0))
    assert ports.commit(p) is Outcome.COMMITTED
    _stage(layout, fid_("q", 1, 0, 0), body=b"zombie", stamp="20mb1e00")
    assert ports.open_ids(QUERY) == [f"{W}/q-1-0-0"]
    assert ports.commit(p) is Outcome.COMMITTED
    assert (tmp_path / "part-00001-00000-q.parquet").read_bytes() == b"rows"
    assert ports.open_ids(QUERY) == []


def test_a_zombie_of_the_same_id_never_touches_the_live_attempts_files(tmp_path):
    """A zombie of the same id (attempt numbers restart) writes and pre-commits while the
    live attempt's file is pending: each has its own stamped files, so the file the driver
    is about to commit is never replaced; and if two writers ever got the same staged name,
    the pre-commit would refuse rather than replace."""
    layout = Layout(tmp_path)
    fid = fid_("q", 1, 0, 0)
    layout.ensure(fid.writer)
    live = RenameFile("parquet", layout.in_progress(fid, "11111111"), layout.pending(fid, "11111111"), None)
    live.write_all(_batches(4))
    live.pre_commit()
    zombie = RenameFile("parquet", layout.in_progress(fid, "22222222"), layout.pending(fid, "22222222"), None)
    zombie.write_all(_batches(6))
    zombie.pre_commit()
    assert pq.read_table(live.pending).num_rows == 4 and pq.read_table(zombie.pending).num_rows == 6
    clash = RenameFile("parquet", layout.in_progress(fid, "33333333"), live.pending, None)
    clash.write_all(_batches(8))
    with pytest.raises(TransactionError, match="already pre-committed"):
        clash.pre_commit()
    assert pq.read_table(live.pending).num_rows == 4


def test_fence_deletes_in_progress_and_pending_of_that_id_only(tmp_path):
    layout = Layout(tmp_path)
    ports = FileParticipants(layout)
    _stage(layout, fid_("q", 1, 0, 0), "in-progress")
    _stage(layout, fid_("q", 1, 0, 0), "pending")
    _stage(layout, fid_("q", 1, 1, 0), "pending")
    assert ports.open_ids(QUERY) == [f"{W}/q-1-0-0", f"{W}/q-1-1-0"]
    ports.fence(f"{W}/q-1-0-0")
    assert ports.open_ids(QUERY) == [f"{W}/q-1-1-0"]
    ports.fence(f"{W}/q-9-9-9")  # nothing there: no error
    assert ports.open_ids(WriteId(Kind.STREAM, "other", -1)) == []  # another writer's staging is its own


def test_superseded_names_the_earlier_attempts(tmp_path):
    ports = FileParticipants(Layout(tmp_path))
    assert ports.superseded(Participant(f"{W}/q-3-1-2", 1, 2, 5, StagedFiles())) == [f"{W}/q-3-1-0", f"{W}/q-3-1-1"]
    assert ports.superseded(Participant("", 1, 0, 0, StagedFiles())) == ()


def test_a_handle_in_the_one_file_form_of_development_builds_is_refused():
    with pytest.raises(TransactionError, match="development builds before 0.1.0"):
        StagedFiles.from_json({"pending": "_kafka_eos/w/pending/a.parquet", "final": "a.parquet"})
    assert StagedFiles((StagedFile("a.parquet", "_kafka_eos/w/pending/a.parquet"),)).to_json() == {
        "files": [{"partition": "", "records": 0, "pending": "_kafka_eos/w/pending/a.parquet", "final": "a.parquet"}]}


def test_decision_log_is_replaced_atomically(tmp_path):
    layout = Layout(tmp_path)
    log = FileDecisionLog(layout)
    assert log.latest("q:query") is None
    d = Decision("query", 4, DECIDED, (Participant(f"{W}/q-4-0-0", 0, 0, 3, StagedFiles((StagedFile("b", "a"),))),))
    log.write("q:query", d)
    assert log.latest("q:query") == d and log.latest("q:other") is None
    assert log.unfinished("q") == [("q:query", d)]
    log.write("q:query", d.with_state(DONE))
    assert log.latest("q:query").state == DONE and log.unfinished("q") == []
    # No temp file is left next to it, the files are whole JSON, the two newest are kept.
    log.write("q:query", d.with_state(DONE))
    assert sorted(p.name for p in layout.decisions("q:query").iterdir()) == ["000000000002.json", "000000000003.json"]
    assert json.loads((layout.decisions("q:query") / "000000000003.json").read_text())["batchId"] == 4
    log.forget("q:query")
    assert log.latest("q:query") is None


def test_recovery_commits_the_decided_and_deletes_every_other_leftover(tmp_path):
    layout = Layout(tmp_path)
    ports, log = FileParticipants(layout), FileDecisionLog(layout)
    decided = _stage(layout, fid_("q", 2, 0, 0))
    already = _stage(layout, fid_("q", 2, 1, 0))   # already renamed before the crash
    ports.commit(already)
    _stage(layout, fid_("q", 2, 0, 1), "in-progress")  # a failed attempt
    _stage(layout, fid_("q", 3, 0, 0))                  # a next batch never decided
    log.write("q:query", Decision("query", 2, DECIDED, (decided, already)))
    mark = TwoPhaseCommitter(log, ports, streams_share_ids=False).recover(QUERY)
    assert mark == DoneMark("query", 2)
    assert sorted(p.name for p in tmp_path.glob("part-*")) == ["part-00002-00000-q.parquet",
                                                               "part-00002-00001-q.parquet"]
    assert ports.open_ids(QUERY) == [] and log.latest("q:query").state == DONE


def test_commit_then_abort_of_the_same_batch_keeps_the_decision(tmp_path):
    layout = Layout(tmp_path)
    ports, log = FileParticipants(layout), FileDecisionLog(layout)
    a, b = _stage(layout, fid_("q", 5, 0, 0)), _stage(layout, fid_("q", 5, 1, 0))
    log.write("q:query", Decision("query", 5, DECIDED, (a, b)))
    ports.commit(a)  # the driver crashed / raised after the first commit
    TwoPhaseCommitter(log, ports, abort_grace_s=0).abort(WriteId(Kind.STREAM, "query", 5), [a, b])
    assert ports.open_ids(QUERY) == [f"{W}/q-5-1-0"]  # the decided, uncommitted one is kept for recovery


# -- the task side, without Spark ---------------------------------------------------

def _batches(n: int, start: int = 0):
    ids = list(range(start, start + n))
    return [pa.RecordBatch.from_pydict({"id": ids[:n // 2], "v": [b"x"] * (n // 2)}),
            pa.RecordBatch.from_pydict({"id": ids[n // 2:], "v": [b"y"] * (n - n // 2)})]


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_task_writes_in_progress_then_pre_commits_to_pending(tmp_path, fmt):
    cfg = FileSinkConfig.from_options({"path": str(tmp_path), "fileFormat": fmt})
    msg = write_files(cfg, task("query-1", 3), DoneMark(), _batches(10), None)
    w = writer_dir("q:query-1")
    assert isinstance(msg, FileCommitMessage) and msg.records == 10 and msg.file_id == f"{w}/query1-3-0-0"
    [file] = msg.participant().handle.files
    assert re.fullmatch(rf"_kafka_eos/{w}/pending/query1-3-0-0\.[0-9a-f]{{8}}\.{fmt}", file.pending)
    assert file.final == f"part-00003-00000-query1.{fmt}"
    assert list((cfg.layout.writer(w) / "in-progress").iterdir()) == []
    staged = tmp_path / file.pending
    if fmt == "parquet":
        assert pq.read_table(staged).column("id").to_pylist() == list(range(10))
    else:
        rows = [json.loads(line) for line in staged.read_text().splitlines()]
        assert [r["id"] for r in rows] == list(range(10)) and rows[0]["v"] == "eA=="  # base64, as Spark does


def test_empty_task_creates_no_file_and_covered_batch_writes_nothing(tmp_path):
    cfg = FileSinkConfig.from_options({"path": str(tmp_path)})
    assert write_files(cfg, task("query", 1), DoneMark(), [], None).records == 0
    skipped = write_files(cfg, task("query", 1), DoneMark("query", 1), _batches(4), None)
    assert skipped.records == 0 and skipped.files == ()
    assert FileParticipants(cfg.layout).open_ids(QUERY) == []


def test_failed_write_removes_its_in_progress_file(tmp_path):
    cfg = FileSinkConfig.from_options({"path": str(tmp_path)})

    def failing():
        yield from _batches(4)
        raise RuntimeError("task killed")

    with pytest.raises(RuntimeError):
        write_files(cfg, task("query", 1), DoneMark(), failing(), None)
    assert FileParticipants(cfg.layout).open_ids(QUERY) == []


def test_a_fenced_writer_cannot_pre_commit(tmp_path):
    layout = Layout(tmp_path)
    fid = fid_("q", 1, 0, 0)
    layout.ensure(fid.writer)
    writer = RenameFile("parquet", layout.in_progress(fid, "5ea1ed00"), layout.pending(fid, "5ea1ed00"), None)
    writer.write_all(_batches(4))
    FileParticipants(layout).fence(str(fid))  # recovery ran while this zombie was writing
    with pytest.raises(FileNotFoundError):
        writer.pre_commit()
    assert FileParticipants(layout).open_ids(QUERY) == [] and not list(tmp_path.glob("part-*"))


def test_a_second_writer_of_the_same_id_refuses_to_share_the_file(tmp_path):
    layout = Layout(tmp_path)
    fid = fid_("q", 1, 0, 0)
    layout.ensure(fid.writer)
    first = RenameFile("parquet", layout.in_progress(fid, "5ea1ed00"), layout.pending(fid, "5ea1ed00"), None)
    first.write_all(_batches(4))
    second = RenameFile("parquet", layout.in_progress(fid, "5ea1ed00"), layout.pending(fid, "5ea1ed00"), None)
    with pytest.raises(FileExistsError):
        second.write_all(_batches(4))
    second.abort()  # must not delete the first writer's file
    assert layout.in_progress(fid, "5ea1ed00").exists()
    first.pre_commit()
    assert pq.read_table(layout.pending(fid, "5ea1ed00")).num_rows == 4


def test_writes_inside_foreachbatch_each_commit_and_a_re_run_adds_no_file(tmp_path):
    """Three micro-batches of a stream, each writing the directory twice with df.write
    inside foreachBatch (the tasks see the stream's properties), then Spark re-running the
    last micro-batch after a restart: every write's file appears once, and the re-run's
    writes add none."""
    from kafka_eos_ds.table_sink.sink import FileSink

    sink = FileSink(FileSinkConfig.from_options({"path": str(tmp_path)}), None)

    def micro_batch(batch, run):
        for n in range(2):
            write = WriteId(Kind.FOREACH, "stream-q", batch, run=run, job=f"{run}-{batch}-{n}")
            msg = sink.write(Task(write, 0, 0), DoneMark(), _batches(4, start=100 * batch + 10 * n))
            sink.commit(write, [msg.participant()])

    for batch in range(3):
        micro_batch(batch, "run-1")
    assert len(list(tmp_path.glob("part-*"))) == 6
    micro_batch(2, "run-2")  # the re-run of micro-batch 2 after a restart
    assert len(list(tmp_path.glob("part-*"))) == 6
    assert FileParticipants(sink.config.layout).open_ids(WriteId(Kind.FOREACH, "stream-q", 2, run="run-2")) == []
    ids = sorted(pq.read_table(p).column("id").to_pylist()[0] for p in tmp_path.glob("part-*"))
    assert ids == [0, 10, 100, 110, 200, 210]


def test_a_finished_job_leaves_no_staging_directory_behind(tmp_path):
    from kafka_eos_ds.table_sink.sink import FileSink

    sink = FileSink(FileSinkConfig.from_options({"path": str(tmp_path)}), None)
    for n in range(3):
        job = WriteId(Kind.JOB, f"job-{n}", 0, job=f"job-{n}")
        msg = sink.write(Task(job, 0, 0), DoneMark(), _batches(4, start=10 * n))
        sink.commit(job, [msg.participant()])
    assert len(list(tmp_path.glob("part-*"))) == 3
    assert list((tmp_path / "_kafka_eos").iterdir()) == []


def test_a_driver_that_fell_behind_cannot_record_a_stale_decision(tmp_path):
    """A driver reads the decisions, stalls, and comes back after another driver of the
    writer recorded newer ones: its write must fail, never replace the newer decision —
    however far behind it is (the numbers it would reuse are pruned by then)."""
    layout = Layout(tmp_path)
    stale, live = FileDecisionLog(layout), FileDecisionLog(layout)
    log_first = FileDecisionLog(layout)
    log_first.write("q:query", Decision("query", 4, DONE))
    assert stale.latest("q:query").batch_id == 4 and live.latest("q:query").batch_id == 4
    for batch in (5, 6):
        live.write("q:query", Decision("query", batch, DECIDED))
        live.write("q:query", Decision("query", batch, DONE))
    with pytest.raises(TransactionError, match="fell behind"):
        stale.write("q:query", Decision("query", 5, DECIDED))
    newest = FileDecisionLog(layout).latest("q:query")
    assert (newest.batch_id, newest.state) == (6, DONE)


def test_a_rename_done_meanwhile_by_another_driver_is_committed(tmp_path, monkeypatch):
    import os as os_module

    layout = Layout(tmp_path)
    ports = FileParticipants(layout)
    p = _stage(layout, fid_("q", 1, 0, 0))
    real_link, real_unlink = os_module.link, os_module.unlink

    def moved_first(src, dst):  # another driver finishing the same decision wins the race
        real_link(src, dst)
        real_unlink(src)
        raise FileNotFoundError(src)

    monkeypatch.setattr(os_module, "link", moved_first)
    assert ports.commit(p) is Outcome.COMMITTED
