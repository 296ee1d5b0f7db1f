"""A table that says where it ends in Kafka, and a new query resuming there (the old
query's checkpoint lost): on a local disk, with Spark's checkpoint files written by hand
and a fake Kafka (integration/test_table_crash.py, point 7, runs it with Spark and Kafka)."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from pyspark.sql.types import LongType, StructField, StructType

from kafka_eos_ds.errors import ConfigError
from kafka_eos_ds.source import KafkaStreamReader, source_schema
from kafka_eos_ds.source.options import Position, SourceOptions
from kafka_eos_ds.table_sink.config import FileSinkConfig
from kafka_eos_ds.table_sink.decision_log import FileDecisionLog
from kafka_eos_ds.table_sink.progress import table_end
from kafka_eos_ds.table_sink.sink import FileSink
from kafka_eos_ds.twophase import DECIDED, DONE, Decision, DoneMark, Kind, WriteId
from kafka_eos_ds.twophase.identity import WriteSpec
from kafka_eos_ds.twophase.writers import Task
from tests.source_fakes import FakeMetadata

SCHEMA = StructType([StructField("id", LongType())])


def _checkpoint(path, query, offsets):
    """Spark's checkpoint files the sink reads: the query id and each batch's end offsets."""
    (path / "offsets").mkdir(parents=True)
    (path / "metadata").write_text(json.dumps({"id": query}) + "\n")
    for batch, ends in enumerate(offsets):
        (path / "offsets" / str(batch)).write_text("v1\n{}\n" + json.dumps(ends) + "\n")


def _run_batch(sink, query, batch, ids, *, commit=True):
    sink.prepare(WriteSpec(streaming=True))
    write = WriteId(Kind.STREAM, query, batch)
    msg = sink.write(Task(write, 0, 0), DoneMark(), iter([pa.RecordBatch.from_pydict({"id": ids})]))
    if commit:
        sink.commit(write, [msg.participant()])
    return msg.participant()


def _sink(table, checkpoint):
    return FileSink(FileSinkConfig.from_options({"path": str(table), "checkpointLocation": str(checkpoint)}, SCHEMA),
                    SCHEMA)


def test_each_batch_decision_records_the_offsets_it_consumed(tmp_path):
    table, ckpt = tmp_path / "table", tmp_path / "ckpt"
    _checkpoint(ckpt, "q-1", [{"in": {"0": 5, "1": 7}}, {"in": {"0": 9, "1": 7}}])
    sink = _sink(table, ckpt)
    _run_batch(sink, "q-1", 0, [1, 2])
    assert table_end(str(table), {}) == {("in", 0): 5, ("in", 1): 7}
    _run_batch(sink, "q-1", 1, [3])
    latest = FileDecisionLog(sink.config.layout).latest("q:q-1")
    assert latest.state == DONE and latest.progress == {"offsets": {"in": {"0": 9, "1": 7}}}
    assert table_end(f"file://{table}", {}) == {("in", 0): 9, ("in", 1): 7}


def test_a_new_query_finishes_the_lost_querys_decided_batch_and_resumes_after_it(tmp_path):
    table = tmp_path / "table"
    _checkpoint(tmp_path / "old", "q-old", [{"in": {"0": 5}}, {"in": {"0": 9}}])
    old = _sink(table, tmp_path / "old")
    _run_batch(old, "q-old", 0, [1, 2])
    # Batch 1 decided, then the driver and the checkpoint are lost before any rename.
    p = _run_batch(old, "q-old", 1, [3], commit=False)
    log = FileDecisionLog(old.config.layout)
    log.write("q:q-old", Decision("q-old", 1, DECIDED, (p,), {"offsets": {"in": {"0": 9}}}))
    assert ds.dataset(str(table), format="parquet").count_rows() == 2
    # The table ends after batch 1 (decided is committed, whoever finishes it) ...
    assert table_end(str(table), {}) == {("in", 0): 9}
    # ... and the new query's sink finishes it before its first batch's tasks run.
    _checkpoint(tmp_path / "new", "q-new", [{"in": {"0": 12}}])
    _run_batch(_sink(table, tmp_path / "new"), "q-new", 0, [4])
    assert sorted(ds.dataset(str(table), format="parquet").to_table().column("id").to_pylist()) == [1, 2, 3, 4]
    assert table_end(str(table), {}) == {("in", 0): 12}  # the furthest any query recorded
    assert FileDecisionLog(old.config.layout).latest("q:q-old").state == DECIDED  # never written by another query


def test_a_table_whose_decisions_carry_no_offsets_cannot_be_resumed_from(tmp_path):
    table = tmp_path / "table"
    sink = FileSink(FileSinkConfig.from_options({"path": str(table)}, SCHEMA), SCHEMA)  # no checkpoint: no offsets
    write = WriteId(Kind.STREAM, "q-1", 0)
    msg = sink.write(Task(write, 0, 0), DoneMark(), iter([pa.RecordBatch.from_pydict({"id": [1]})]))
    sink.commit(write, [msg.participant()])
    with pytest.raises(ConfigError, match="'startingOffsetsFromTable'.*without Kafka offsets"):
        table_end(str(table), {})
    assert table_end(str(tmp_path / "empty"), {}) == {}  # nothing written yet: start at the earliest


def test_the_source_starts_where_the_table_ends_and_new_partitions_at_the_earliest(tmp_path):
    table = tmp_path / "table"
    _checkpoint(tmp_path / "ckpt", "q-1", [{"in": {"0": 5, "1": 7}}])
    _run_batch(_sink(table, tmp_path / "ckpt"), "q-1", 0, [1])
    options = {"kafka.bootstrap.servers": "h:1", "subscribe": "in", "startingOffsetsFromTable": str(table)}
    meta = FakeMetadata({("in", 0): 20, ("in", 1): 20, ("in", 2): 20}, {("in", 0): 0, ("in", 1): 0, ("in", 2): 3})
    reader = KafkaStreamReader(source_schema(options), options, metadata_factory=meta)
    assert json.loads(json.dumps(reader.initialOffset())) == {"in": {"0": 5, "1": 7, "2": 3}}


def test_the_resume_option_is_checked_and_keeps_its_credentials_out_of_reprs():
    base = {"kafka.bootstrap.servers": "h:1", "subscribe": "in"}
    secret = "wJalrXUtnFEMI-K7MDENG"
    opts = SourceOptions.from_spark({**base, "startingOffsetsFromTable": "s3a://lake/events",
                                     "fs.s3a.secret.key": secret}, streaming=True)
    assert opts.starting.kind is Position.TABLE and opts.starting.table == "s3a://lake/events"
    assert secret not in repr(opts) and opts.starting.storage.get("fs.s3a.secret.key") == secret
    with pytest.raises(ConfigError, match="'startingOffsetsFromTable' and 'startingOffsets'"):
        SourceOptions.from_spark({**base, "startingOffsetsFromTable": "/t", "startingOffsets": "earliest"},
                                 streaming=True)
