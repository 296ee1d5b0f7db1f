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
from kafka_eos_ds.filesink.progress import table_end
from kafka_eos_ds.twophase import DoneMark, Kind, WriteId
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
