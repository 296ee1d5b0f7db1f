"""Two batch jobs on one table: a job's commit finishes the decided batches other jobs
left unfinished (a driver that died during its commit), and so also one whose own commit
is still running. That job then finds its decision recorded done by the other: its rows
are final, and it reports success (before: it failed saying nothing it decided is
recorded, and a re-run would have written its rows twice; docs/dev/decisions.md, "A batch
job whose decision another job finished reports success")."""

from __future__ import annotations

import os
import threading
import traceback
from dataclasses import replace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from kafka_eos_ds.errors import TransactionError
from kafka_eos_ds.table_sink.config import FileSinkConfig
from kafka_eos_ds.table_sink.decision_log import FileDecisionLog
from kafka_eos_ds.table_sink.sink import FileSink
from kafka_eos_ds.twophase import DONE, Kind, Participant, WriteId, faults
from kafka_eos_ds.twophase.identity import WriteSpec
from kafka_eos_ds.twophase.writers import Task

SCHEMA = StructType([StructField("id", LongType()), StructField("country", StringType())])


def _staged(path, name: str, ids: list[int]):
    sink = FileSink(FileSinkConfig.from_options({"path": str(path), "partitionBy": "country"}, SCHEMA), SCHEMA)
    mark = sink.prepare(WriteSpec.for_batch({}.get, name))
    write = WriteId(Kind.JOB, name, 0, job=name)
    rows = pa.RecordBatch.from_pydict({"id": pa.array(ids, pa.int64()),
                                       "country": pa.array([f"c{i}" for i in ids], pa.string())})
    return sink, write, sink.write(Task(write, 0, 0), mark, iter([rows])).participant()


def _x_decides_then_y_commits(x_job: tuple, y_job: tuple, x_go: threading.Event, x_done: threading.Event,
                              release: tuple[threading.Event, ...] = ()) -> dict[str, BaseException]:
    """Job X commits in thread "x" and waits after its decision until ``x_go``; job Y then
    commits in thread "y". ``x_done`` is set when X's commit ends; every event is set at
    the end whatever happened. The jobs' errors, by thread name."""
    x_decided = threading.Event()
    errors: dict[str, BaseException] = {}

    def hook(name: str, **_: object) -> None:
        if threading.current_thread().name == "x" and name == "driver-after-decision":
            x_decided.set()
            assert x_go.wait(30)

    def run(name: str, sink: FileSink, write: WriteId, message: Participant) -> None:
        try:
            sink.commit(write, [message])
        except BaseException as exc:  # noqa: BLE001 - asserted by the caller
            errors[name] = exc
        finally:
            if name == "x":
                x_done.set()

    faults.install(hook)
    try:
        tx = threading.Thread(target=run, name="x", args=("x", *x_job))
        tx.start()
        assert x_decided.wait(30)
        ty = threading.Thread(target=run, name="y", args=("y", *y_job))
        ty.start()
        for t in (tx, ty):
            t.join(60)
    finally:
        for event in (x_go, x_done, *release):
            event.set()
        faults.install(None)
    return errors


@pytest.mark.parametrize("point", ["driver-after-decision", "driver-after-first-commit", "driver-after-all-commits"])
def test_a_job_whose_decision_another_job_finished_reports_its_commit(tmp_path, point):
    table = tmp_path / "events"
    x_sink, x, x_msg = _staged(table, "job-x", [1, 2, 3])
    y_sink, y, y_msg = _staged(table, "job-y", [4, 5, 6])

    def hook(name: str, **_: object) -> None:
        if name == point:
            faults.install(None)
            y_sink.commit(y, [y_msg])  # job Y commits while job X is between these steps

    faults.install(hook)
    try:
        x_sink.commit(x, [x_msg])  # before: TransactionError "fell behind ... nothing it decided is recorded"
    finally:
        faults.install(None)
    assert sorted(pq.read_table(str(table)).column("id").to_pylist()) == [1, 2, 3, 4, 5, 6]


def test_a_job_whose_writer_recorded_another_decision_since_still_fails(tmp_path):
    """Only its own decision recorded done counts: a job whose writer's log holds another
    outcome since (a driver of the same writer that moved on) stops as before."""
    table = tmp_path / "events"
    x_sink, x, x_msg = _staged(table, "job-x", [1, 2, 3])

    def hook(name: str, **_: object) -> None:
        if name == "driver-after-all-commits":
            faults.install(None)
            log = FileDecisionLog(x_sink.config.layout, x_sink.config.store())
            decided = log.latest(x.key)
            assert decided is not None
            log.write(x.key, replace(decided, participants=()).with_state(DONE))

    faults.install(hook)
    try:
        with pytest.raises(TransactionError, match="fell behind"):
            x_sink.commit(x, [x_msg])
    finally:
        faults.install(None)


def test_a_job_finishing_another_jobs_decision_that_the_other_finished_meanwhile_commits(tmp_path, monkeypatch):
    """Job Y finishes job X's decision while X, live, finishes it too and drops its record
    (a finished job's decisions are forgotten) just as Y records it done: Y's record finds
    its directory gone. Nothing is left for Y to do, and it commits its own write (before:
    Y failed, FileNotFoundError; seen with a real metastore, test_table_registration)."""
    table = tmp_path / "events"
    x_sink, x, x_msg = _staged(table, "job-x", [1, 2, 3])
    y_sink, y, y_msg = _staged(table, "job-y", [4, 5, 6])
    x_go, x_done = threading.Event(), threading.Event()
    link = os.link
    reached: list[object] = []

    def interleaved_link(source, target, *args, **kwargs):
        # Y's done record of X's decision, written and about to be linked in place: X
        # goes on now, records its own done and drops its records.
        if threading.current_thread().name == "y" and "/decisions/" in str(target) and not x_go.is_set():
            reached.append(target)
            x_go.set()
            assert x_done.wait(30)
        return link(source, target, *args, **kwargs)

    monkeypatch.setattr(os, "link", interleaved_link)
    errors = _x_decides_then_y_commits((x_sink, x, x_msg), (y_sink, y, y_msg), x_go, x_done)
    assert reached and errors == {}, (reached, errors)  # the interleaving was reached
    assert sorted(pq.read_table(str(table)).column("id").to_pylist()) == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("scan", [True, False], ids=["scan-of-unfinished", "recheck-after-failed-finish"])
def test_a_job_reading_a_log_another_job_drops_between_listing_and_reading_it_commits(tmp_path, monkeypatch, scan):
    """Job Y lists job X's decisions and, before it reads the highest one, X finishes its
    commit and drops its records: the file Y listed is gone. A log read that finds its
    newest file gone lists again (pruned: a newer one is there; dropped: none is), so Y
    sees X finished and commits its own write (before: Y failed, FileNotFoundError, at
    its scan of unfinished jobs or at the recheck after its finish of X's decision
    failed; seen with a real metastore, test_table_registration[jobs], gate of fc76402).

    ``recheck``: Y reads X's decided record to record it done, X records its own done
    first (Y's record is refused: the number is taken), and X drops its log between Y's
    listing and reading of it at the recheck."""
    from kafka_eos_ds.storage.local import LocalStore

    table = tmp_path / "events"
    x_sink, x, x_msg = _staged(table, "job-x", [1, 2, 3])
    y_sink, y, y_msg = _staged(table, "job-y", [4, 5, 6])
    x_log = str(x_sink.config.layout.decisions(x.key))
    x_go, x_dropping, x_drop, x_done = (threading.Event() for _ in range(4))
    read_text, delete_tree = LocalStore.read_text, LocalStore.delete_tree
    reads: list[str] = []

    def paused_drop(self, path: str) -> None:
        if threading.current_thread().name == "x" and path.startswith(x_log):
            x_dropping.set()
            assert x_drop.wait(30)
        delete_tree(self, path)

    def interleaved_read(self, path: str) -> str:
        if threading.current_thread().name == "y" and path.startswith(x_log):
            stack = traceback.extract_stack()  # the recheck: a read called by finish_jobs
            recheck = any(f.name == "finish_jobs" and g.name == "latest"
                          for f, g in zip(stack, stack[1:], strict=False))
            reads.append("recheck" if recheck else "other")
            if (scan and len(reads) == 1) or (not scan and recheck):
                x_go.set()  # listed, not read yet: X finishes its commit and drops its log
                x_drop.set()
                assert x_done.wait(30)
            elif not scan and not x_go.is_set() and any(f.name == "_record" for f in traceback.extract_stack()):
                x_go.set()  # Y about to record X's decision done: X records it first, then pauses
                assert x_dropping.wait(30)
        return read_text(self, path)

    monkeypatch.setattr(LocalStore, "read_text", interleaved_read)
    monkeypatch.setattr(LocalStore, "delete_tree", paused_drop)
    errors = _x_decides_then_y_commits((x_sink, x, x_msg), (y_sink, y, y_msg), x_go, x_done, (x_drop,))
    assert reads and (scan or "recheck" in reads), reads  # the interleaving was reached
    assert errors == {}, errors
    assert sorted(pq.read_table(str(table)).column("id").to_pylist()) == [1, 2, 3, 4, 5, 6]
