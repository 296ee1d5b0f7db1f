"""The file sink's options, checked on the driver before anything is written."""

from __future__ import annotations

import os
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any, Mapping
from urllib.parse import unquote, urlparse

from kafka_eos_ds.errors import ConfigError, StorageError
from kafka_eos_ds.options import Options
from kafka_eos_ds.storage import HDFS, S3, StorageOptions, Store, locate
from kafka_eos_ds.table_sink.layout import EXTENSIONS, Layout, remote_root
from kafka_eos_ds.table_sink.partitions import Partitioning
from kafka_eos_ds.table_sink.runtime import DEFAULT, TableRuntime
from kafka_eos_ds.table_sink.staging import staging_of

FILE_FORMATS = tuple(EXTENSIONS)
_SUPPORTED = ("a local directory path (/data/out, relative paths are resolved on the driver) or a file: URI "
              "(file:///data/out), which every Spark executor must see (one machine, or a shared mount); "
              "hdfs://namenode:port/dir (or viewfs://); s3a://bucket/prefix (or s3://)")
_MiB = 1024 * 1024
_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]?)B?\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class TableName:
    """A Hive metastore table (``table`` = ``db.name``) and the metastore (``hive.metastore.uris``)."""

    database: str
    name: str
    uris: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.database}.{self.name}"


@dataclass(frozen=True)
class FileSinkConfig:
    """``path``, ``fileFormat`` (parquet | jsonl), ``commitTimeoutMs``, ``partitionBy``
    (:mod:`.partitions`), ``table`` + ``hive.metastore.uris`` (register the table's
    partitions), ``successFile``, and a stream's ``checkpointLocation`` (where its query id
    and its offsets are read)."""

    root: PurePath
    file_format: str
    commit_timeout_s: float
    checkpoint: str | None = None  # a streaming query's checkpointLocation (Spark passes it)
    storage: StorageOptions = StorageOptions()  # how to reach it (Hadoop's fs.* names)
    location: str = ""  # 'path' as the store knows it: '' (a local root) or the URI of the root
    partitioning: Partitioning = Partitioning()
    table: TableName | None = None
    success_file: bool = False
    part_size: int = 8 * _MiB  # S3: bytes of a file buffered per upload part
    _stores: dict[str, Store] = field(default_factory=dict, compare=False, repr=False)

    @property
    def layout(self) -> Layout:
        return Layout(self.root, EXTENSIONS[self.file_format])

    @property
    def uri(self) -> str:
        """The table's location as other engines name it (the metastore's LOCATION)."""
        return self.location or Path(self.root).as_uri()

    def store(self, runtime: TableRuntime = DEFAULT) -> Store:
        """The store holding the directory, one per process (not pickled: each task makes its
        own), a local one on ``runtime``'s ``os``: the runtime of the sink the config is for."""
        if "store" not in self._stores:
            self._stores["store"] = locate(self.location or str(self.root), self.storage, "Option 'path'",
                                           local=runtime.local_store)[0]
        return self._stores["store"]

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_stores": {}}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    @classmethod
    def from_options(cls, options: Mapping[str, Any], schema: Any = None) -> "FileSinkConfig":
        opts = Options(options)
        raw = opts.require("path", "Set .option('path', DIR) (or .save(DIR) / .start(DIR)) to the output "
                                   f"directory: {_SUPPORTED}.")
        file_format = opts.get_choice("fileFormat", FILE_FORMATS, "parquet")
        timeout_ms = opts.get_int("commitTimeoutMs", 120_000, minimum=1000) or 120_000
        root, location = _root(raw)
        partitioning = Partitioning.parse(opts.get("partitionBy"), opts.get("partitionTimeZone"), schema)
        table = _table(opts, file_format)
        storage = StorageOptions.from_options(options)
        return cls(root, file_format, timeout_ms / 1000, opts.get("checkpointLocation"), storage, location,
                   partitioning, table, opts.get_bool("successFile", False), _part_size(storage))


def local_path(raw: str) -> Path:
    """The local directory ``raw`` names (a path or a ``file:`` URI), or ConfigError('path')."""
    root, location = _root(raw)
    if location:
        raise ConfigError(f"Option 'path' = {raw!r} is not a local directory.")
    return Path(root)


def _root(raw: str) -> tuple[PurePath, str]:
    parsed = urlparse(raw)
    scheme = parsed.scheme.lower()
    if not scheme or (len(scheme) == 1 and raw[1:3] in (":\\", ":/")):
        return Path(os.path.abspath(raw)), ""
    if scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise ConfigError(f"Option 'path' = {raw!r} names host {parsed.netloc!r}; only local file: URIs are "
                              f"supported ({_SUPPORTED}).")
        return Path(os.path.abspath(unquote(parsed.path))), ""
    if scheme in HDFS or scheme in S3:
        if not parsed.netloc:
            where = "a bucket (s3a://bucket/prefix)" if scheme in S3 else "the NameNode (hdfs://namenode:port/dir)"
            raise ConfigError(f"Option 'path' = {raw!r} names no host; name {where}.")
        root = remote_root(unquote(parsed.path))
        # One spelling per store: s3://, s3n:// and s3a:// name the same objects.
        scheme = "s3a" if scheme in S3 else scheme
        return root, f"{scheme}://{parsed.netloc}{root}".rstrip("/")
    raise ConfigError(f"Option 'path' = {raw!r} uses the scheme {parsed.scheme!r}, which the file sink cannot "
                      f"write with atomic steps. Supported: {_SUPPORTED}.")


def _table(opts: Options, file_format: str) -> TableName | None:
    name = (opts.get("table") or "").strip()
    uris = tuple(u.strip() for u in (opts.get("hive.metastore.uris") or "").split(",") if u.strip())
    if not name and not uris:
        return None
    if not name:
        raise ConfigError("Option 'hive.metastore.uris' is set but 'table' is not: name the table to register the "
                          "partitions in, e.g. .option('table', 'lake.events').")
    if not uris:
        raise ConfigError(f"Option 'table' = {name!r} needs the metastore: set 'hive.metastore.uris', e.g. "
                          ".option('hive.metastore.uris', 'thrift://metastore:9083').")
    bad = [u for u in uris if not re.fullmatch(r"thrift://[^/:]+:\d+", u)]
    if bad:
        raise ConfigError(f"Option 'hive.metastore.uris': {bad[0]!r} is not thrift://host:port.")
    parts = name.split(".")
    if len(parts) > 2 or not all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", p) for p in parts):
        raise ConfigError(f"Option 'table' = {name!r} is not a table name; use 'database.table' or 'table'.")
    if file_format != "parquet":
        raise ConfigError("Option 'table' registers Parquet tables only; remove 'fileFormat' or set it to parquet.")
    database, table = parts if len(parts) == 2 else ("default", parts[0])
    return TableName(database.lower(), table.lower(), uris)


def _part_size(storage: StorageOptions) -> int:
    raw = storage.get("fs.s3a.multipart.size")
    if raw is None:
        return 8 * _MiB
    m = _SIZE.match(raw)
    size = int(m.group(1)) * {"": 1, "K": 1024, "M": _MiB, "G": 1024 * _MiB}[m.group(2).upper()] if m else 0
    if size < 5 * _MiB:
        raise ConfigError(f"Option 'fs.s3a.multipart.size' = {raw!r}: S3 needs parts of at least 5M (e.g. '16M').")
    return size


_WRITABLE: set[str] = set()  # the directories this process has found writable


def check_writable(layout: Layout, store: Store | None = None) -> None:
    """Make sure the directory can be written (a probe file under the staging directory),
    once per process: what this user may not write is the user's 'path' error, raised
    before any data. A transient failure (a throttled or restarting store) is raised as
    it is, retriable: the caller retries it. A remote store must also refuse to create a
    file that exists (``put(new=True)``): the decisions and the commit's never-replace
    rule stand on it, and some S3-compatible stores accept ``If-None-Match: *`` and
    ignore it."""
    local = store is None or not store.url  # only a local store has no URL of its own
    where = f"{'' if local or store is None else store.url}{layout.root}"
    if where in _WRITABLE:
        return
    if local:
        _check_local(Path(layout.root), layout)
    else:
        assert store is not None
        probe = str(layout.staging / f".probe-{uuid.uuid4().hex}")
        try:
            ignored = _ignored_create_if_absent(store, probe)
        except (StorageError, PermissionError) as exc:
            if isinstance(exc, StorageError) and exc.retriable:
                raise
            raise ConfigError(f"Option 'path' = '{where}' cannot be written: {exc}") from exc
        if ignored is not None:
            raise ConfigError(f"Option 'path' = '{where}': the store replaced a file that a create-if-absent "
                              f"write found there (S3: it ignores 'If-None-Match: *' on {ignored}). The sink's "
                              "exactly-once steps need a store that refuses it (412 Precondition Failed); see "
                              "docs/file-sink.md, 'The same on S3'.")
    _WRITABLE.add(where)


def _ignored_create_if_absent(store: Store, probe: str) -> str | None:
    """Create ``probe`` only if absent, twice, and on a store that completes uploads
    (S3) complete an upload over it too: the call whose condition the store ignored
    (it replaced the probe), or None when it refused both."""
    store.put(probe, b"", new=True)
    try:
        try:
            store.put(probe, b"x", new=True)
            return "PutObject"
        except FileExistsError:
            pass
        return staging_of(store).ignored_publish(probe)
    finally:
        store.delete(probe)


def _check_local(root: Path, layout: Layout) -> None:
    if root.exists() and not root.is_dir():
        raise ConfigError(f"Option 'path' = '{layout.root}' is a file, not a directory; name a directory.")
    try:
        staging = Path(layout.staging)
        staging.mkdir(parents=True, exist_ok=True)
        # Unique per call: two sinks of one process probing one new table at once must not
        # delete each other's probe (a per-process name did: a spurious 'path' error).
        probe = staging / f".probe-{uuid.uuid4().hex}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(f"Option 'path' = '{layout.root}' cannot be written ({exc.strerror}); choose a "
                          "directory this user may create files in.") from exc
