"""The exactly-once audit of a partitioned table, read twice: through the Hive metastore
and over the table's path.

* **Through the metastore**: the table's partitions as the metastore lists them, and the
  final files (``part-*``) in each partition's registered location: what Hive, Trino or
  Spark with a Hive catalog read.
* **Over the path**: ``pyarrow.dataset`` with Hive partitioning over the table's root,
  which skips names starting with ``_`` or ``.`` (the sink's ``_kafka_eos`` staging and
  the ``_SUCCESS`` markers), as ``spark.read.parquet`` does.

Rows a retention job read from partitions right before dropping them (the table-life run,
:mod:`.retention`) are passed along with the rows read, so every input id must be in the
table or among them once; a dropped partition registered again, or its directory there
again, is reported (``dropped_back``).

Each read is checked against the input topic's ids (:func:`kafka_eos_tools.audit.audit_records`:
records in, out, duplicates, losses, unexpected records) and every row against the
partition it was found in (``expected_partition``: the values the pipeline derives from
the row). Then the partitions: each directory holding final files must be registered,
once, at its own location, and no registered partition may be empty. Files still staged
(``in-progress``/``pending``; on S3 also the multipart uploads in progress, a pending
file's form there) after the final run count against the table too.

The table is on HDFS (``hdfs://``) or S3 (``s3a://``); the reads go through pyarrow's file
systems (:func:`filesystem`: HDFS through hdfs-native's fsspec, S3 natively), not the
sink's storage layer, so that the audit does not share the code it checks. Only the
uploads in progress, which pyarrow cannot list, are listed by the project's S3 store.
"""

from __future__ import annotations

import posixpath
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Mapping

from kafka_eos_tools.audit import AuditReport, Record, audit_records

# Row (key, value, timestamp) -> the partition directory it belongs in ("dt=.../hour=..").
Placement = Callable[[dict], str]


@dataclass
class TableRead:
    """One way of reading the table: the audit of its rows, and the partitions it saw."""

    report: AuditReport
    misplaced: int = 0  # rows in a partition other than the one their values name
    partitions: int = 0
    example: str = ""

    @property
    def ok(self) -> bool:
        return self.report.ok and self.misplaced == 0

    def to_dict(self) -> dict:
        report = asdict(self.report)
        for unused in ("order_violations", "keys_checked"):  # files have no order to check
            report.pop(unused)
        return {**report, "misplaced": self.misplaced, "partitions": self.partitions, "ok": self.ok}


@dataclass
class TableAudit:
    table: str
    location: str
    metastore: TableRead
    dataset: TableRead
    registered: list[str] = field(default_factory=list)  # partition names, as the metastore lists them
    on_disk: list[str] = field(default_factory=list)  # directories holding final files
    wrong_location: list[str] = field(default_factory=list)
    staged_left: list[str] = field(default_factory=list)
    # Partitions a retention job dropped on purpose, and those of them back afterwards
    # (registered again, or their directory there again): none may come back.
    dropped: list[str] = field(default_factory=list)
    dropped_back: list[str] = field(default_factory=list)
    late_files: list[str] = field(default_factory=list)  # in a dropped partition after retention read it

    @property
    def unregistered(self) -> list[str]:
        return sorted(set(self.on_disk) - set(self.registered))

    @property
    def registered_empty(self) -> list[str]:
        return sorted(set(self.registered) - set(self.on_disk))

    @property
    def registered_twice(self) -> list[str]:
        return sorted(name for name, n in Counter(self.registered).items() if n > 1)

    @property
    def partitions_ok(self) -> bool:
        return not (self.unregistered or self.registered_empty or self.registered_twice or self.wrong_location)

    @property
    def ok(self) -> bool:
        return (self.metastore.ok and self.dataset.ok and self.partitions_ok and not self.staged_left
                and not self.dropped_back and not self.late_files
                and self.metastore.report.records_out == self.dataset.report.records_out)

    def to_dict(self) -> dict:
        return {"table": self.table, "location": self.location, "records_in": self.metastore.report.records_in,
                "metastore": self.metastore.to_dict(), "dataset": self.dataset.to_dict(),
                "partitions_registered": len(self.registered), "partitions_on_disk": len(self.on_disk),
                "partitions_unregistered": self.unregistered, "partitions_registered_empty": self.registered_empty,
                "partitions_registered_twice": self.registered_twice, "partitions_wrong_location":
                self.wrong_location, "staged_files_left": len(self.staged_left),
                "partitions_dropped": len(self.dropped), "partitions_dropped_back": self.dropped_back,
                "late_files": self.late_files, "ok": self.ok}

    def table_text(self) -> str:
        m, d = self.metastore, self.dataset
        rows = [("records in", m.report.records_in, d.report.records_in),
                ("records out", m.report.records_out, d.report.records_out),
                ("unique ids out", m.report.unique_out, d.report.unique_out),
                ("duplicates", m.report.duplicates, d.report.duplicates),
                ("losses", m.report.losses, d.report.losses),
                ("unexpected records", m.report.unexpected, d.report.unexpected),
                ("rows in a wrong partition", m.misplaced, d.misplaced),
                ("partitions", m.partitions, d.partitions)]
        lines = [f"{'':<26}{'metastore':>12}{'pyarrow.dataset':>18}"]
        lines += [f"{name:<26}{a:>12,}{b:>18,}" for name, a, b in rows]
        lines.append(f"partitions registered {len(self.registered):,}, on disk {len(self.on_disk):,}: "
                     f"{len(self.unregistered)} unregistered, {len(self.registered_empty)} registered empty, "
                     f"{len(self.registered_twice)} registered twice, {len(self.wrong_location)} at another location")
        lines.append(f"staged files left       {len(self.staged_left):,}")
        if self.dropped:
            lines.append(f"partitions dropped by retention {len(self.dropped):,}, back since: {len(self.dropped_back)}")
        if self.late_files:
            shown = ", ".join(self.late_files[:5])
            lines.append(f"files found in a dropped partition after retention read it: {shown}")
        for name, sample in {**m.report.examples, **d.report.examples}.items():
            lines.append(f"  e.g. {name}: {sample}")
        for sample in (m.example, d.example):
            if sample:
                lines.append(f"  e.g. {sample}")
        lines.append(f"exactly once              {'YES' if self.ok else 'NO'}")
        return "\n".join(lines)


def audit_rows(inputs: list[Record], rows: Iterable[tuple[str, dict]], placement: Placement,
               partitions: int) -> TableRead:
    """``rows``: (the partition directory a row was read from, the row). Ids come from the
    value's text before ``|``, as in the Kafka audit."""
    outputs, misplaced, example = [], 0, ""
    for index, (directory, row) in enumerate(rows):
        value = row["value"]
        value = value.decode() if isinstance(value, bytes) else value
        head = (value or "").split("|", 1)[0]
        # No key and a running offset: a table has no order to check.
        outputs.append(Record(0, index, None, head or None))
        wanted = placement(row)
        if wanted != directory:
            misplaced += 1
            example = example or f"id {head} in {directory}, expected in {wanted}"
    return TableRead(audit_records(inputs, outputs), misplaced, partitions, example)


def hive_name(values: dict[str, str]) -> str:
    return "/".join(f"{name}={value}" for name, value in values.items())


def read_through_metastore(client: Any, files: Any, database: str, table: str) -> tuple[list, list[tuple[str, dict]]]:
    """The partitions the metastore lists (name, location) and the rows of their final files.

    ``client``: an open hmsclient client; ``files``: the table's store (:func:`filesystem`)."""
    keys = [k.name for k in client.get_table(database, table).partitionKeys]
    partitions, rows = [], []
    for partition in client.get_partitions(database, table, -1):
        name = hive_name(dict(zip(keys, partition.values, strict=True)))
        partitions.append((name, partition.sd.location))
        rows += [(name, row) for _file, row in partition_rows(files, partition.sd.location)]
    return partitions, rows


def _final_files(files: Any, location: str, allow_not_found: bool = False) -> list[Any]:
    """The final files (``part-*``) in a partition's ``location``, as pyarrow FileInfo."""
    from pyarrow.fs import FileSelector, FileType

    selector = FileSelector(path_of(location), allow_not_found=allow_not_found)
    return [info for info in files.get_file_info(selector)
            if info.type == FileType.File and info.base_name.startswith("part-")]


def partition_files(files: Any, location: str) -> list[str]:
    """The names of the final files in a partition's ``location`` (none if it is gone)."""
    return sorted(info.base_name for info in _final_files(files, location, allow_not_found=True))


def partition_rows(files: Any, location: str) -> list[tuple[str, dict]]:
    """(file name, row) of every final file (``part-*``) in a partition's ``location``
    on ``files`` (:func:`filesystem`)."""
    found = []
    for info in _final_files(files, location):
        with files.open_input_stream(info.path) as reader:
            found += [(info.base_name, row) for row in _parquet_rows(reader.read())]
    return found


def read_dataset(filesystem: Any, root: str, partition_names: list[str]) -> tuple[list[str], list[tuple[str, dict]]]:
    """The directories holding files and the rows, read with pyarrow.dataset (Hive
    partitioning, every partition value as text) over ``root`` on ``filesystem``."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    partitioning = ds.partitioning(pa.schema([(n, pa.string()) for n in partition_names]), flavor="hive")
    dataset = ds.dataset(root, filesystem=filesystem, format="parquet", partitioning=partitioning)
    directories = sorted({posixpath.relpath(posixpath.dirname(f), root) for f in dataset.files})
    rows = []
    for row in dataset.to_table().to_pylist():
        rows.append((hive_name({n: row[n] for n in partition_names}), row))
    return directories, rows


def staged_files(files: Any, location: str, options: Mapping[str, str]) -> list[str]:
    """Files the sink still has in its staging directories under the table at ``location``
    (on ``files``, :func:`filesystem`), and on S3 its uploads in progress there."""
    from pyarrow.fs import FileSelector, FileType

    from kafka_eos_ds.storage import StorageOptions, locate
    from kafka_eos_ds.storage.s3 import S3Store

    selector = FileSelector(f"{path_of(location)}/_kafka_eos", recursive=True, allow_not_found=True)
    staged = [i.path for i in files.get_file_info(selector)
              if i.type == FileType.File and ("/in-progress/" in i.path or "/pending/" in i.path)]
    store, path = locate(location, StorageOptions(dict(options)), "The table")
    if isinstance(store, S3Store):
        staged += [f"upload of {key}" for key, _upload in store.uploads(path)]
    return sorted(staged)


def filesystem(url: str, options: Mapping[str, str]) -> Any:
    """A pyarrow file system of the store holding ``url`` (``hdfs://``, ``s3a://``), with the
    sink's ``fs.s3a.*`` ``options`` for S3 (the AWS_* environment where absent); paths on it
    are :func:`path_of`'s."""
    from urllib.parse import urlparse

    from pyarrow.fs import FSSpecHandler, PyFileSystem, S3FileSystem

    from kafka_eos_ds.storage import S3, StorageOptions

    parsed = urlparse(url)
    if parsed.scheme in S3:
        settings = StorageOptions(dict(options))
        endpoint = settings.get("fs.s3a.endpoint")
        scheme, _, host = (endpoint or "").rpartition("://")
        keys = {"access_key": settings.get("fs.s3a.access.key"), "secret_key": settings.get("fs.s3a.secret.key"),
                "session_token": settings.get("fs.s3a.session.token")}
        return S3FileSystem(**{k: v for k, v in keys.items() if v}, region=settings.get("fs.s3a.endpoint.region"),
                            endpoint_override=host or None, scheme=scheme or "https",
                            force_virtual_addressing=(settings.get("fs.s3a.path.style.access") or "").lower() != "true")
    from hdfs_native.fsspec import HdfsFileSystem

    return PyFileSystem(FSSpecHandler(HdfsFileSystem(host=parsed.hostname, port=parsed.port)))


def exists(files: Any, path: str) -> bool:
    """Whether a file or directory is at ``path`` on ``files`` (on S3: any object under it)."""
    from pyarrow.fs import FileType

    return bool(files.get_file_info(path).type != FileType.NotFound)


def _parquet_rows(data: bytes) -> list[dict]:
    import io

    import pyarrow.parquet as pq

    return list(pq.read_table(io.BytesIO(data)).to_pylist())


def path_of(url: str) -> str:
    """The path of ``url`` on its :func:`filesystem`: ``hdfs://host:port/a/b`` -> ``/a/b``,
    ``s3a://bucket/a/b`` -> ``bucket/a/b``."""
    from kafka_eos_ds.storage import S3

    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    netloc, _, path = rest.partition("/")
    return f"{netloc}/{path}".rstrip("/") if scheme in S3 else "/" + path
