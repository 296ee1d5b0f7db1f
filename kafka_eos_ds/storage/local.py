"""A local disk (or a shared POSIX mount), through ``os``: a hard link creates a name
only if it is free, in one step, and an ``fsync`` of the file and then of its directory
makes a write or a move durable. The ``os`` and the uuids of temporary names are the
table sink's runtime's (:mod:`kafka_eos_ds.table_sink.runtime`)."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import Any, Callable


class LocalStore:
    renames = True
    url = ""

    def __init__(self, os_module: Any = os, uuid4: Callable[[], uuid.UUID] = uuid.uuid4) -> None:
        self._os = os_module
        self._uuid4 = uuid4

    def read_text(self, path: str) -> str:
        return Path(path).read_text()

    def list_names(self, path: str) -> list[str]:
        try:
            return [p.name for p in Path(path).iterdir()]
        except (FileNotFoundError, NotADirectoryError):
            return []

    def exists(self, path: str) -> bool:
        return bool(self._os.path.exists(path))

    def put(self, path: str, data: bytes, *, new: bool = False) -> None:
        directory = self._os.path.dirname(path)
        self._os.makedirs(directory, exist_ok=True)
        temp = self._os.path.join(directory, f".{self._uuid4().hex}.tmp")
        with open(temp, "wb") as f:
            f.write(data)
            f.flush()
            self._os.fsync(f.fileno())
        try:
            # link() fails if the name is taken, and the name then holds the whole file or
            # nothing: a reader never sees half of it.
            (self._os.link if new else self._os.replace)(temp, path)
        finally:
            Path(temp).unlink(missing_ok=True)
        fsync_dir(directory, self._os)

    def delete(self, path: str) -> None:
        try:
            self._os.unlink(path)
        except FileNotFoundError:
            pass  # gone already
        if self._os.path.isdir(self._os.path.dirname(path)):
            fsync_dir(self._os.path.dirname(path), self._os)

    def delete_tree(self, path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def create(self, path: str) -> "LocalOutput":
        self._os.makedirs(self._os.path.dirname(path), exist_ok=True)
        return LocalOutput(path, self._os)

    def make_dirs(self, path: str) -> None:
        self._os.makedirs(path, exist_ok=True)

    def rename(self, src: str, dst: str) -> None:
        self._os.makedirs(self._os.path.dirname(dst), exist_ok=True)
        # A hard link, then the old name removed: POSIX rename() replaces an existing
        # destination silently, link() refuses it (FileExistsError) in the same step that
        # creates the name, so of two movers to one name exactly one wins.
        try:
            self._os.link(src, dst)
        except FileExistsError:
            # Both names on one file: a move of this file stopped (a crash) between its
            # link and its unlink. Finish it; a destination that is another file stays refused.
            if not _same_file(src, dst, self._os):
                raise
        self._os.unlink(src)
        fsync_dir(self._os.path.dirname(dst), self._os)
        if self._os.path.dirname(src) != self._os.path.dirname(dst):
            fsync_dir(self._os.path.dirname(src), self._os)


class LocalOutput:
    """A new local file (exclusive create) whose ``close`` makes it durable (``fsync``);
    ``discard`` closes it without."""

    def __init__(self, path: str, os_module: Any = os) -> None:
        self._os = os_module
        self._file = open(path, "xb")  # noqa: SIM115 (open across write calls; closed by close/discard)

    def write(self, data: Any) -> int:
        return self._file.write(data)

    def tell(self) -> int:
        return self._file.tell()

    def flush(self) -> None:
        self._file.flush()

    @property
    def closed(self) -> bool:
        return self._file.closed

    def close(self) -> None:
        if not self._file.closed:
            self._file.flush()
            self._os.fsync(self._file.fileno())
            self._file.close()

    def discard(self) -> None:
        self._file.close()


def _same_file(a: str, b: str, os_module: Any = os) -> bool:
    try:
        return bool(os_module.path.samefile(a, b))
    except OSError:
        return False


def fsync_dir(path: str, os_module: Any = os) -> None:
    """Make a rename or unlink in ``path`` durable (POSIX: fsync the directory)."""
    fd = os_module.open(path, os_module.O_RDONLY)
    try:
        os_module.fsync(fd)
    finally:
        os_module.close(fd)
