"""The demo's table audit without servers: the row checks, the partition comparison, and
pyarrow.dataset over a Hive-style directory written here (a local filesystem stands in
for HDFS; the reading code is the same)."""

from __future__ import annotations

import zlib
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kafka_eos_tools import cli
from kafka_eos_tools.audit import Record
from kafka_eos_tools.demo import table_audit
from kafka_eos_tools.demo.table_chaos import PARTITION_COLUMNS, expected_partition

STAMP = datetime(2026, 11, 24, 13, 5, tzinfo=timezone.utc)


def _inputs(n):
    return [Record(i % 2, i // 2, None, str(i)) for i in range(n)]


def _row(i):
    key = f"k{i % 8}".encode()
    return {"key": key, "value": f"{i}|RECORD {i}", "timestamp": STAMP}


def _placed(rows, buckets=4):
    return [(expected_partition(r, buckets), r) for r in rows]


def test_a_row_belongs_in_its_timestamps_day_and_hour_and_its_keys_bucket():
    row = _row(3)
    assert expected_partition(row, 4) == f"dt=2026-11-24/hour=13/bucket={zlib.crc32(b'k3') % 4}"
    # A naive timestamp (Arrow without a zone) is UTC, as the sink writes it.
    assert expected_partition({**row, "timestamp": STAMP.replace(tzinfo=None)}, 4) == expected_partition(row, 4)


def test_every_row_once_in_its_partition_passes():
    rows = [_row(i) for i in range(20)]
    read = table_audit.audit_rows(_inputs(20), _placed(rows), lambda r: expected_partition(r, 4), 3)
    assert read.ok and read.report.records_out == read.report.unique_out == 20 and read.misplaced == 0


def test_duplicates_losses_and_misplaced_rows_are_counted():
    rows = _placed([_row(i) for i in range(18)] + [_row(4)])  # 18, 19 lost; 4 twice
    rows.append(("dt=2026-11-24/hour=14/bucket=0", _row(5)))  # 5 twice, once in another hour
    read = table_audit.audit_rows(_inputs(20), rows, lambda r: expected_partition(r, 4), 3)
    assert (read.report.duplicates, read.report.losses, read.misplaced) == (2, 2, 1)
    assert not read.ok and "id 5 in dt=2026-11-24/hour=14/bucket=0" in read.example


def _audit(registered, on_disk, **kw):
    clean = table_audit.audit_rows(_inputs(2), _placed([_row(0), _row(1)]), lambda r: expected_partition(r, 4), 1)
    return table_audit.TableAudit("db.t", "hdfs://h:1/t", clean, clean, registered=registered, on_disk=on_disk, **kw)


def test_partitions_must_be_registered_once_each_and_hold_files():
    assert _audit(["a=1", "a=2"], ["a=1", "a=2"]).ok
    unregistered = _audit(["a=1"], ["a=1", "a=2"])
    assert unregistered.unregistered == ["a=2"] and not unregistered.ok
    empty = _audit(["a=1", "a=2"], ["a=1"])
    assert empty.registered_empty == ["a=2"] and not empty.ok
    assert _audit(["a=1", "a=1"], ["a=1"]).registered_twice == ["a=1"]
    assert not _audit(["a=1"], ["a=1"], wrong_location=["a=1"]).ok
    assert not _audit(["a=1"], ["a=1"], staged_left=["_kafka_eos/q1/pending/x.parquet"]).ok
    report = _audit(["a=1"], ["a=1"]).to_dict()
    assert report["metastore"]["duplicates"] == report["dataset"]["losses"] == 0 and "order_violations" not in \
        report["metastore"]


def test_the_dataset_read_sees_final_files_only_with_their_partition_values(tmp_path):
    rows = [_row(i) for i in range(12)]
    for directory, row in _placed(rows):
        part = tmp_path / directory
        part.mkdir(parents=True, exist_ok=True)
        name = f"part-{len(list(part.iterdir())):05d}.parquet"
        pq.write_table(pa.Table.from_pylist([row]), part / name)
        (part / "_SUCCESS").write_bytes(b"")
    staged = tmp_path / "_kafka_eos" / "q1" / "pending"
    staged.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([_row(0)]), staged / "x.parquet")  # skipped: names starting with _

    from pyarrow.fs import LocalFileSystem

    on_disk, read = table_audit.read_dataset(LocalFileSystem(), str(tmp_path), PARTITION_COLUMNS)
    assert on_disk == sorted({d for d, _ in _placed(rows)})
    audit = table_audit.audit_rows(_inputs(12), read, lambda r: expected_partition(r, 4), len(on_disk))
    assert audit.ok and audit.report.records_out == 12


def test_the_stores_of_the_table_variant_need_the_flag(capsys):
    assert cli.main(["demo", "--hdfs", "hdfs://127.0.0.1:1"]) == 2
    assert "add --table" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--table", "--hdfs", "--metastore"])
def test_the_demo_help_names_the_table_options(capsys, flag):
    with pytest.raises(SystemExit):
        cli.main(["demo", "--help"])
    assert flag in capsys.readouterr().out
