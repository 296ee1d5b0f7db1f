"""Files on a local disk, HDFS, S3 or GCS, as the sink's Python processes read and write them.

Spark keeps a streaming query's checkpoint wherever ``checkpointLocation`` says, and the
file sink writes wherever ``path`` says: a local path, ``hdfs://``, ``s3a://``. The sink's
steps run in Python processes without Spark's Hadoop file systems, so they use a client
of their own (docs/dev/decisions.md, "Filesystem layer"): :mod:`.local` (``os``),
:mod:`.hdfs` (``hdfs-native``: HDFS's RPC protocol, no JVM or libhdfs) for ``hdfs://``
and ``viewfs://``, :mod:`.s3` (``boto3``) for ``s3a://``/``s3://``; and, for reading a checkpoint only,
:mod:`.gcs` (pyarrow's GCS file system) for ``gs://``.

The three differ where the sink needs them to: a local disk and HDFS rename a file in
one step and can refuse to replace one (``renames``: pending -> final is a rename); S3
cannot rename, and a multipart upload is its pending state (:class:`.s3.S3Store`). The
file sink chooses its staging from this once (``table_sink.staging.staging_of``). All
three create a small file only if it is absent, atomically (``put(new=True)``), which is
what the sink's numbered decisions stand on.

Settings come the way a Spark user already has them: Hadoop's names as options of the
sink (``fs.s3a.endpoint``, ``fs.s3a.access.key``, ``fs.s3a.secret.key``,
``fs.s3a.path.style.access``, ``fs.s3a.endpoint.region``; any ``fs.*``/``dfs.*``/
``hadoop.*`` key reaches the HDFS client as Hadoop configuration, next to
``HADOOP_CONF_DIR``), or the clients' own environment (``AWS_*``). Secret values never
appear in a repr or an error. Client errors become ``FileNotFoundError``/
``FileExistsError`` where the sink acts on them, and :class:`~kafka_eos_ds.errors.StorageError`
otherwise, at each store's boundary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, TypeGuard
from urllib.parse import urlparse

from kafka_eos_ds.errors import ConfigError

_SECRET = ("secret", "password", "token", "credential")
LOCAL, HDFS, S3, GCS = ("", "file"), ("hdfs", "viewfs"), ("s3a", "s3", "s3n"), ("gs",)
SUPPORTED = "a local path or file:, hdfs://, viewfs://, s3a:// (or s3://), gs://"


@dataclass(frozen=True)
class StorageOptions:
    """The sink options that configure file-system clients (Hadoop's names)."""

    settings: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> "StorageOptions":
        return cls({str(k): str(v) for k, v in options.items()
                    if str(k).lower().startswith(("fs.", "dfs.", "hadoop."))})

    def get(self, name: str) -> str | None:
        return next((v for k, v in self.settings.items() if k.lower() == name.lower()), None)

    def __repr__(self) -> str:
        shown = {k: ("[redacted]" if any(s in k.lower() for s in _SECRET) else v) for k, v in self.settings.items()}
        return f"StorageOptions({shown})"


class Files(Protocol):
    """What the sink reads from a query's checkpoint. Paths are the store's own (a local
    path, an HDFS path, an S3 key or GCS object name), as :func:`locate` gives them."""

    url: str  # the file system's root as a URI prefix ("" local, "hdfs://nn:8020", "s3a://bucket")

    def read_text(self, path: str) -> str:
        """A small file's text; FileNotFoundError when it does not exist."""

    def list_names(self, path: str) -> list[str]:
        """The names in directory ``path`` (empty when it does not exist)."""

    def exists(self, path: str) -> bool:
        """Whether a file (or directory) is at ``path``."""


class Store(Files, Protocol):
    """What the sink does with files on one file system it also writes (the file sink's
    tables, its decisions): local, HDFS, S3."""

    renames: bool  # pending -> final by rename (local, HDFS); else by completing an upload (S3)

    def put(self, path: str, data: bytes, *, new: bool = False) -> None:
        """Write a small file whole, durably. ``new``: only if nothing is at ``path``
        (FileExistsError otherwise), in one atomic step: two writers never both succeed."""

    def delete(self, path: str) -> None:
        """Delete one file (nothing there: no error)."""

    def delete_tree(self, path: str) -> None:
        """Delete ``path`` and everything under it."""


class Output(Protocol):
    """A file being written (what Parquet and JSON-lines encoders write into)."""

    @property
    def closed(self) -> bool: ...

    def write(self, data: Any) -> int: ...

    def tell(self) -> int: ...

    def flush(self) -> None: ...

    def close(self) -> None:
        """Complete the file durably (local: fsync; HDFS: blocks acknowledged; S3: the last part sent)."""

    def discard(self) -> None:
        """Close without caring whether it completes (the file is deleted or aborted anyway)."""


class RenameStore(Store, Protocol):
    """A store that renames (local, HDFS): a task's file is written in place and renamed."""

    def create(self, path: str) -> Output:
        """A new file open for writing; FileExistsError if one is there (two writers never
        share a file). The parent directory is created."""

    def rename(self, src: str, dst: str) -> None:
        """Move ``src`` to ``dst`` in one step, durably; never over an existing ``dst``
        (FileExistsError); FileNotFoundError when ``src`` is gone. ``dst``'s directory is
        created."""

    def make_dirs(self, path: str) -> None:
        """Create directory ``path`` and its parents (there already: no error)."""


def renaming(store: Store) -> TypeGuard[RenameStore]:
    """Whether ``store`` moves a pending file to its final name by rename (local, HDFS); the
    file sink's staging is chosen from it, once (``table_sink.staging.staging_of``)."""
    return store.renames


def readable(location: str) -> bool:
    """Whether the sink can read files at ``location`` (its scheme; the client may still
    have to be installed)."""
    scheme = urlparse(location).scheme.lower()
    return scheme in LOCAL or scheme in HDFS or scheme in S3 or scheme in GCS \
        or (len(scheme) == 1 and location[1:3] in (":\\", ":/"))


def checkpoint_files(location: str, options: StorageOptions | None = None) -> tuple[Files, str]:
    """The files of the checkpoint at ``location`` and its path within them: a store the
    sink writes (:func:`locate`), or one it only reads (``gs://``)."""
    parsed = urlparse(location)
    if parsed.scheme.lower() in GCS:
        from kafka_eos_ds.storage.gcs import GcsFiles

        return GcsFiles(parsed.netloc, options or StorageOptions()), parsed.path or "/"
    return locate(location, options)


def locate(location: str, options: StorageOptions | None = None, what: str = "The checkpoint location",
           local: Callable[[], Store] | None = None) -> tuple[Store, str]:
    """The store holding ``location`` and the path within it (ConfigError for a scheme
    the sink cannot write, naming ``what`` and the schemes it can). ``local`` builds the
    store of a local path (default: a :class:`~.local.LocalStore` on the process's ``os``)."""
    parsed = urlparse(location)
    scheme = parsed.scheme.lower()
    if scheme in LOCAL or (len(scheme) == 1 and location[1:3] in (":\\", ":/")):  # a Windows drive
        from kafka_eos_ds.storage.local import LocalStore

        return (local or LocalStore)(), parsed.path if scheme == "file" else location
    if scheme in HDFS:
        from kafka_eos_ds.storage.hdfs import HdfsStore

        return HdfsStore(f"{scheme}://{parsed.netloc}", options or StorageOptions()), parsed.path or "/"
    if scheme in S3:
        from kafka_eos_ds.storage.s3 import S3Store

        return S3Store(parsed.netloc, options or StorageOptions()), parsed.path or "/"
    if scheme in GCS:
        raise ConfigError(f"{what} {location!r} is on GCS, which the sink reads checkpoints from but does not "
                          "write to; use a local path, hdfs:// or s3a://.")
    raise ConfigError(f"{what} {location!r} uses the scheme {scheme!r}, which the sink cannot "
                      f"read from Python; it reads {SUPPORTED}.")

