"""A table's whole life: resuming from a table other writers wrote, new queries taking
over a table after dead ones, retention deleting old files, and the staging the dead
queries left behind. On a local disk (and on an in-memory S3 for the uploads), with
Spark's checkpoint files written by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from pyspark.sql.types import LongType, StructField, StructType

from kafka_eos_ds.errors import ConfigError
from kafka_eos_ds.filesink.config import FileSinkConfig
from kafka_eos_ds.filesink.decision_log import FileDecisionLog
from kafka_eos_ds.filesink.file_sink import FileSink
from kafka_eos_ds.filesink.handles import files_of
from kafka_eos_ds.filesink.progress import table_end
from kafka_eos_ds.twophase import DECIDED, Decision, DoneMark, Kind, WriteId
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
    for staged in files_of(p.handle):
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
