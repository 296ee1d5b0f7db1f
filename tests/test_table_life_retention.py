"""The table-life run's retention rule and its audit, without servers: which hours a
retention job beside running pipelines may drop, the input's rising timestamps, and the
audit's count of rows retention removed (kafka_eos_tools/demo/retention.py, table_life.py)."""

from __future__ import annotations

from datetime import datetime, timezone

from kafka_eos_tools.audit import Record
from kafka_eos_tools.demo import table_audit
from kafka_eos_tools.demo.retention import HOUR_MS, hour_of, last_droppable_hour
from kafka_eos_tools.demo.table_chaos import expected_partition
from kafka_eos_tools.demo.table_life import SECOND_IDS, stamps


def test_an_hour_is_dropped_only_when_every_open_partition_has_moved_past_it_and_it_is_old():
    # Newest hour 20, keep 2: up to 18, unless a partition's last committed record is earlier.
    assert last_droppable_hour([(20, False), (19, False)], keep=2) == 18
    assert last_droppable_hour([(20, False), (15, False)], keep=2) == 14  # hour 15 may get more rows
    # A partition that committed nothing keeps every hour open.
    assert last_droppable_hour([(20, False), (None, False)], keep=2) is None
    # A drained partition (input closed, all committed) holds nothing back.
    assert last_droppable_hour([(20, False), (3, True), (None, True)], keep=2) == 18
    assert last_droppable_hour([], keep=2) is None


def test_timestamps_rise_an_hour_per_block_of_ids_the_same_for_both_inputs():
    base = 1_000 * HOUR_MS
    stamp = stamps(base, 200)
    assert [stamp(i) // HOUR_MS for i in (0, 199, 200, 401)] == [1_000, 1_000, 1_001, 1_002]
    assert all(stamp(i) < stamp(i + 1) for i in range(1_000))
    assert stamp(SECOND_IDS + 250) == stamp(250)


def test_a_partitions_hour_is_its_day_and_hour_in_utc():
    row = {"key": b"k1", "value": "1|x", "timestamp": datetime(2026, 11, 24, 13, 5, tzinfo=timezone.utc)}
    name = expected_partition(row, 2)
    values = dict(item.split("=") for item in name.split("/"))
    assert hour_of(values) == int(row["timestamp"].timestamp()) // 3600


def _rows(ids):
    stamp = datetime(2026, 11, 24, 13, 5, tzinfo=timezone.utc)
    rows = [{"key": f"k{i % 8}".encode(), "value": f"{i}|RECORD", "timestamp": stamp} for i in ids]
    return [(expected_partition(r, 2), r) for r in rows]


def _read(table_ids, removed_ids, n=10):
    inputs = [Record(0, i, None, str(i)) for i in range(n)]
    return table_audit.audit_rows(inputs, _rows(table_ids) + _rows(removed_ids), lambda r: expected_partition(r, 2),
                                  1)


def test_each_id_in_the_table_or_removed_by_retention_once_passes():
    read = _read(range(4, 10), range(4))
    assert read.ok and read.report.unique_out == 10


def test_an_id_both_in_the_table_and_removed_or_in_neither_fails():
    both = _read(range(3, 10), range(4))  # 3 in both
    assert both.report.duplicates == 1 and not both.ok
    neither = _read(range(5, 10), range(4))  # 4 in neither
    assert neither.report.losses == 1 and not neither.ok


def test_a_dropped_partition_back_fails_the_audit():
    clean = _read(range(10), [])
    audit = table_audit.TableAudit("db.t", "hdfs://h:1/t", clean, clean, registered=["a=1"], on_disk=["a=1"],
                                   dropped=["a=0"])
    assert audit.ok and audit.to_dict()["partitions_dropped"] == 1
    audit.dropped_back = ["a=0"]
    assert not audit.ok and "back since: 1" in audit.table_text()


def test_a_file_that_lands_in_a_partition_after_retention_read_it_is_named_and_fails_the_audit(tmp_path):
    """Retention reads a partition's rows, drops it, then deletes its directory: a file
    completed in between would be deleted uncounted, a loss the audit could not place."""
    from types import SimpleNamespace

    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyarrow.fs import LocalFileSystem

    from kafka_eos_tools.demo.retention import Retention

    partition_dir = tmp_path / "a=0"
    partition_dir.mkdir()
    pq.write_table(pa.table({"id": ["1"]}), partition_dir / "part-00001-00000-q1.parquet")

    class Client:
        def drop_partition(self, database, table, values, delete_data):
            # A commit completes a file in the partition right after retention read it.
            pq.write_table(pa.table({"id": ["2"]}), partition_dir / "part-00002-00000-q1.parquet")

    retention = Retention.__new__(Retention)
    retention.files, retention.database, retention.table = LocalFileSystem(), "db", "t"
    retention.dropped, retention.removed, retention.removed_files, retention.late_files, retention.journal = \
        [], [], [], [], []
    retention._drop(Client(), "a=0", SimpleNamespace(values=["0"], sd=SimpleNamespace(location=str(partition_dir))))
    assert retention.late_files == ["a=0/part-00002-00000-q1.parquet"]
    assert [row["id"] for _name, row in retention.removed] == ["1"]

    clean = _read(range(10), [])
    audit = table_audit.TableAudit("db.t", "hdfs://h:1/t", clean, clean, registered=["a=1"], on_disk=["a=1"],
                                   dropped=["a=0"])
    assert audit.ok
    audit.late_files = retention.late_files
    assert not audit.ok and "after retention read it: a=0/part-00002" in audit.table_text()
