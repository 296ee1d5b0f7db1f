"""HDFS through hdfs-native (RPC to the NameNode, data to and from the DataNodes).

The NameNode's ``rename2`` without overwrite moves a file or a directory in one step and
refuses an existing destination (``FileExistsError``), and ``create`` without overwrite
refuses an existing file: what pending -> final and the numbered decisions need. Closing
a written file waits until its blocks are acknowledged by the DataNodes.
"""

from __future__ import annotations

import contextlib
import posixpath
import uuid
from typing import Any, Callable, TypeVar

from kafka_eos_ds.errors import ConfigError, StorageError
from kafka_eos_ds.storage import StorageOptions

T = TypeVar("T")


class HdfsStore:
    """One HDFS (or ViewFS) file system, ``url`` = ``hdfs://namenode:port``."""

    renames = True

    def __init__(self, url: str, options: StorageOptions) -> None:
        try:
            import hdfs_native
        except ImportError:
            raise ConfigError(f"Reading {url} needs the HDFS client: pip install 'kafka-eos-ds[hdfs]' "
                              "(hdfs-native) in the driver's and executors' Python.") from None
        self.url = url
        self._native = hdfs_native
        self._client = hdfs_native.Client(url, config=dict(options.settings) or None)

    def read_text(self, path: str) -> str:
        def read() -> str:
            with self._client.read(path) as reader:
                return bytes(reader.read()).decode("utf-8")

        return self._call(read, path)

    def list_names(self, path: str) -> list[str]:
        try:
            return self._call(lambda: [s.path.rstrip("/").rsplit("/", 1)[-1] for s in self._client.list_status(path)],
                              path)
        except FileNotFoundError:
            return []

    def exists(self, path: str) -> bool:
        try:
            self._call(lambda: self._client.get_file_info(path), path)
            return True
        except FileNotFoundError:
            return False

    def put(self, path: str, data: bytes, *, new: bool = False) -> None:
        # Written beside and renamed: a reader (or a crash) never leaves half a file under the name.
        temp = posixpath.join(posixpath.dirname(path), f".{uuid.uuid4().hex}.tmp")
        with self.create(path=temp) as out:
            out.write(data)
        try:
            self._call(lambda: self._client.rename(temp, path, overwrite=not new), path)
        finally:
            with contextlib.suppress(FileNotFoundError, StorageError):
                self.delete(temp)

    def delete(self, path: str) -> None:
        self._call(lambda: self._client.delete(path, False), path)

    def delete_tree(self, path: str) -> None:
        self._call(lambda: self._client.delete(path, True), path)

    def create(self, path: str) -> "HdfsOutput":
        options = self._native.WriteOptions(overwrite=False, create_parent=True)
        return HdfsOutput(self._call(lambda: self._client.create(path, options), path))

    def make_dirs(self, path: str) -> None:
        self._call(lambda: self._client.mkdirs(path, create_parent=True), path)

    def rename(self, src: str, dst: str) -> None:
        self.make_dirs(posixpath.dirname(dst))
        self._call(lambda: self._client.rename(src, dst, overwrite=False), src)

    def _call(self, call: Callable[[], T], path: str) -> T:
        try:
            return call()
        except (FileNotFoundError, FileExistsError):
            raise
        except Exception as exc:  # hdfs-native raises RuntimeError/OSError subclasses per RPC failure
            text = str(exc)
            if "FileNotFoundException" in text or "does not exist" in text.lower():
                raise FileNotFoundError(path) from exc
            if "AlreadyExists" in text or "already exists" in text.lower():
                raise FileExistsError(path) from exc
            if "AccessControlException" in text or "Permission denied" in text:
                raise StorageError(f"HDFS refused access to {self.url}{path}: {text[:300]} (check the user and "
                                   "the directory's permissions)", retriable=False) from exc
            if "PathComponentTooLong" in text:  # a name over the NameNode's limit: asking again cannot help
                raise StorageError(f"HDFS refused {self.url}{path}: {text[:300]} (shorten the partition values or "
                                   "the path)", retriable=False) from exc
            raise StorageError(f"HDFS call on {self.url}{path} failed: {text[:300]}", retriable=True) from exc


class HdfsOutput:
    """A new HDFS file; ``close`` completes it (its blocks acknowledged), ``discard``
    closes it without caring whether that works (the file is deleted anyway)."""

    def __init__(self, writer: Any) -> None:
        self._writer = writer
        self._position = 0
        self.closed = False

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self._writer.write(bytes(view))
        self._position += len(view)
        return len(view)

    def tell(self) -> int:
        return self._position

    def flush(self) -> None:
        pass  # close() completes the file; the sink never reads a file still being written

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._writer.close()

    def discard(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    def __enter__(self) -> "HdfsOutput":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

