"""The table sink's decision log and staged files under drivers that fell behind
(presumed dead, then resumed) and under lost answers: a decided batch is never destroyed,
and a driver's own write is never taken for another driver's."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from kafka_eos_ds.errors import StorageError, TransactionError
from kafka_eos_ds.storage.local import LocalStore
from kafka_eos_ds.table_sink.decision_log import FileDecisionLog
from kafka_eos_ds.table_sink.handles import StagedFile, StagedFiles
from kafka_eos_ds.table_sink.layout import FileId, Layout, writer_dir
from kafka_eos_ds.table_sink.participants import FileParticipants
from kafka_eos_ds.table_sink.sink import FileSink
from kafka_eos_ds.twophase import (
    DECIDED,
    DONE,
    Decision,
    DoneMark,
    Kind,
    Participant,
    TwoPhaseCommitter,
    WriteId,
    faults,
)

W = writer_dir("q:query")
QUERY = WriteId(Kind.STREAM, "query", -1)


def _stage(layout: Layout, fid: FileId, stamp: str = "5ea1ed00") -> Participant:
    layout.ensure(fid.writer)
    layout.pending(fid, stamp).write_bytes(b"rows")
    return Participant(str(fid), fid.partition, fid.attempt, 1,
                       StagedFiles((StagedFile(layout.relative(layout.final(fid)),
                                               layout.relative(layout.pending(fid, stamp))),)))


class AnswerLostOnce(LocalStore):
    """A store whose first create-if-absent takes effect and then fails retriably (an S3
    PutObject or HDFS rename whose answer was lost)."""

    def __init__(self) -> None:
        super().__init__()
        self.lost = 0

    def put(self, path: str, data: bytes, *, new: bool = False) -> None:
        super().put(path, data, new=new)
        if new and self.lost == 0:
            self.lost += 1
            raise StorageError(f"connection reset after putting {path}", retriable=True)


def test_a_decision_write_whose_answer_was_lost_is_retried_as_written(tmp_path):
    layout = Layout(tmp_path)
    decided = _stage(layout, FileId(W, "q", 2, 0, 0))
    FileDecisionLog(layout).write("q:query", Decision("query", 2, DECIDED, (decided,)))
    store = AnswerLostOnce()
    committer = TwoPhaseCommitter(FileDecisionLog(layout, store), FileParticipants(layout, store),
                                  streams_share_ids=False, sleep=lambda _s: None)
    # Recovery finishes batch 2; recording it done loses its first answer, and the retry
    # finds its own record there.
    assert committer.recover(QUERY) == DoneMark("query", 2)
    assert store.lost == 1
    assert FileDecisionLog(layout).latest("q:query").state == DONE
    assert (tmp_path / "part-00002-00000-q.parquet").read_bytes() == b"rows"


# -- zombie drivers never delete a newer driver's decided files -------------------------

class Paused(Exception):
    """The newer driver stops here (it is paused, or in the middle of its renames)."""


def _committer(layout: Layout) -> TwoPhaseCommitter:
    log = FileDecisionLog(layout)
    return TwoPhaseCommitter(log, FileParticipants(layout, decisions=log), streams_share_ids=False,
                             abort_grace_s=0, sleep=lambda _s: None)


def _pause_at(point: str):
    def hook(name: str, *, batch=None, partition=None, attempt=None) -> None:
        if name == point:
            raise Paused(name)
    return hook


def commit_paused(sink: FileSink, write: WriteId, msg: Any) -> None:
    """The live driver's commit, run while a zombie is between its claim and its deletion:
    refused as fallen behind, or stopped right after its decision is durable."""
    faults.install(_pause_at("driver-after-decision"))
    try:
        sink.commit(write, [msg.participant()])
    except (Paused, TransactionError) as exc:
        assert isinstance(exc, Paused) or "fell behind" in str(exc), exc
    finally:
        faults.install(None)


def _newer_driver_decides(layout: Layout, batch: int, stamp: str) -> list[Participant]:
    """Driver B: recovers, its tasks stage the batch, it decides and pauses before its renames."""
    b = _committer(layout)
    b.recover(QUERY)
    staged = [_stage(layout, FileId(W, "q", batch, p, 0), stamp) for p in (0, 1)]
    faults.install(_pause_at("driver-after-decision"))
    try:
        with pytest.raises(Paused):
            b.commit(WriteId(Kind.STREAM, "query", batch), staged)
    finally:
        faults.install(None)
    return staged


def _once_at(point: str, action):
    def hook(name: str, *, batch=None, partition=None, attempt=None) -> None:
        if name == point:
            faults.install(None)  # the newer driver runs without the hook
            action()
    return hook


def _zombie(point: str, action, step) -> None:
    """Driver A stalls at ``point`` while ``action`` runs (the newer driver), then goes on
    with ``step``: it may stop (it fell behind), but must not destroy what B decided."""
    faults.install(_once_at(point, action))
    try:
        step()
    except TransactionError as exc:
        assert "fell behind" in str(exc), exc
    finally:
        faults.install(None)


def _finals(tmp_path) -> list[str]:
    return sorted(p.name for p in tmp_path.glob("part-*"))


def _decided_batch_survives(layout: Layout, tmp_path, batch: int) -> None:
    assert _committer(layout).recover(QUERY) == DoneMark("query", batch)
    assert _finals(tmp_path)[-2:] == [f"part-{batch:05d}-00000-q.parquet", f"part-{batch:05d}-00001-q.parquet"]


def test_a_zombie_drivers_recovery_never_deletes_a_newer_drivers_decided_files(tmp_path):
    layout = Layout(tmp_path)
    FileDecisionLog(layout).write("q:query", Decision("query", 0, DONE))
    a = _committer(layout)
    _zombie("driver-after-reading-decision", lambda: _newer_driver_decides(layout, 1, "bbbbbbbb"),
            lambda: a.recover(QUERY))
    _decided_batch_survives(layout, tmp_path, 1)


def test_a_zombie_drivers_sweep_never_deletes_a_newer_drivers_decided_files(tmp_path):
    layout = Layout(tmp_path)
    FileDecisionLog(layout).write("q:query", Decision("query", 3, DONE))
    a = _committer(layout)
    a.recover(QUERY)
    mine = [_stage(layout, FileId(W, "q", 4, p, 0), "aaaaaaaa") for p in (0, 1)]
    # A commits batch 4 and stalls before its sweep; B finishes 4 and decides 5.
    _zombie("driver-after-all-commits", lambda: _newer_driver_decides(layout, 5, "bbbbbbbb"),
            lambda: a.commit(WriteId(Kind.STREAM, "query", 4), mine))
    _decided_batch_survives(layout, tmp_path, 5)


def test_a_zombie_drivers_abort_never_deletes_a_newer_drivers_decided_files(tmp_path):
    layout = Layout(tmp_path)
    FileDecisionLog(layout).write("q:query", Decision("query", 4, DONE))
    a = _committer(layout)
    a.recover(QUERY)
    mine = [_stage(layout, FileId(W, "q", 5, p, 0), "aaaaaaaa") for p in (0, 1)]
    # A's batch 5 failed; its abort stalls after reading the decisions while B (a restart
    # of the query) runs batch 5 again under the same ids and decides it.
    _zombie("driver-after-reading-decision", lambda: _newer_driver_decides(layout, 5, "bbbbbbbb"),
            lambda: a.abort(WriteId(Kind.STREAM, "query", 5), mine))
    _decided_batch_survives(layout, tmp_path, 5)


class DeletePaused(LocalStore):
    """A store whose first deletion of a staged file first runs ``before`` (another driver
    moving on while this one is between its claim and its deletions)."""

    def __init__(self, before) -> None:
        super().__init__()
        self.before = before

    def delete(self, path: str) -> None:
        if self.before is not None and "/decisions/" not in path:
            before, self.before = self.before, None
            before()
        super().delete(path)


def test_a_write_planned_before_a_fencing_claim_is_never_decided(tmp_path):
    """A zombie's recovery lists the staged files of a write whose tasks are done, claims,
    and stalls before deleting them; the write's commit reads the log only then. Its
    decision goes after the number its planner read, which the claim took: refused, so
    nothing decided is deleted."""
    from kafka_eos_ds.table_sink.config import FileSinkConfig
    from kafka_eos_ds.twophase.identity import WriteSpec
    from kafka_eos_ds.twophase.writers import Task

    layout = Layout(tmp_path)
    sink = FileSink(FileSinkConfig.from_options({"path": str(tmp_path)}), None)
    spec = WriteSpec.for_batch({"txnAppId": "etl", "txnVersion": "1"}.get, "job-1")
    app = spec.planned()
    FileDecisionLog(layout).write(app.key, Decision("etl", 0, DONE))
    mark = sink.prepare(spec)
    msg = sink.write(Task(app, 0, 0), mark, iter([pa.RecordBatch.from_pydict({"id": [1, 2, 3]})]))
    assert msg.participant().handle.read == 1

    zombie_log = FileDecisionLog(layout)
    zombie_store = DeletePaused(lambda: commit_paused(sink, app, msg))
    zombie = TwoPhaseCommitter(zombie_log, FileParticipants(layout, zombie_store, zombie_log),
                               streams_share_ids=False, sleep=lambda _s: None)
    zombie.recover(app)
    # No decision names the deleted file: the next run of version 1 starts clean.
    assert FileDecisionLog(layout).latest(app.key).state == DONE
    assert _committer(layout).recover(app) == DoneMark("etl", 0)


class Uploads:
    """The multipart uploads of an S3 bucket, as far as fencing sees them."""

    def __init__(self, open_uploads: list[tuple[str, str]]) -> None:
        self.open = list(open_uploads)

    def uploads(self, path: str) -> list[tuple[str, str]]:
        return list(self.open)

    def abort(self, path: str, upload: str) -> None:
        self.open.remove((path, upload))


def test_on_s3_a_zombie_never_aborts_uploads_a_newer_driver_decided(tmp_path):
    from kafka_eos_ds.table_sink.uploads import UploadParticipants

    layout = Layout(tmp_path)
    FileDecisionLog(layout).write("q:query", Decision("query", 4, DONE))
    task = FileId(W, "q", 5, 0, None)
    bucket = Uploads([(str(layout.upload(task)), "upload-b")])
    zombie_log = FileDecisionLog(layout)
    zombie = UploadParticipants(layout, bucket, zombie_log)  # type: ignore[arg-type]
    zombie_log.latest("q:query")
    assert zombie.open_ids(QUERY) == [str(task)]
    # A newer driver decides batch 5 (its upload) before the zombie aborts what it listed.
    FileDecisionLog(layout).write("q:query", Decision("query", 5, DECIDED))
    with pytest.raises(TransactionError, match="fell behind"):
        zombie.fence(str(task))
    assert bucket.open == [(str(layout.upload(task)), "upload-b")]
    # A driver that is not behind aborts exactly what it listed.
    live_log = FileDecisionLog(layout)
    live_log.latest("q:query")
    live = UploadParticipants(layout, bucket, live_log)  # type: ignore[arg-type]
    live.fence(str(task))
    assert bucket.open == []


def test_a_driver_alone_claims_nothing_and_each_write_takes_the_number_after_its_planners(tmp_path):
    """Steady state: nothing staged is left to delete, so no claim; each write's decision
    and done record are the two numbers after the one its planner read."""
    from kafka_eos_ds.table_sink.config import FileSinkConfig
    from kafka_eos_ds.twophase.identity import WriteSpec
    from kafka_eos_ds.twophase.writers import Task

    layout = Layout(tmp_path)
    for version in range(3):
        sink = FileSink(FileSinkConfig.from_options({"path": str(tmp_path)}), None)
        spec = WriteSpec.for_batch({"txnAppId": "etl", "txnVersion": str(version)}.get, f"job-{version}")
        app = spec.planned()
        mark = sink.prepare(spec)
        assert sink.read == 2 * version
        msg = sink.write(Task(app, 0, 0), mark, iter([pa.RecordBatch.from_pydict({"id": [version]})]))
        sink.commit(app, [msg.participant()])
    assert FileDecisionLog(layout).latest(app.key).state == DONE
    assert sorted(p.name for p in layout.decisions(app.key).iterdir()) == ["000000000005.json", "000000000006.json"]
    assert len(_finals(tmp_path)) == 3
