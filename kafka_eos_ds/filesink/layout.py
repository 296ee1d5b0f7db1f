"""Where the file sink's files live, and what their names mean — in one place.

::

    DIR/
      part-<batch>-<partition>-<token>.<ext>           final files (what readers of DIR see)
      _kafka_eos/
        <writer>/decisions/<n>.json                    the writer's commit decisions, numbered
        <writer>/in-progress/<token>-<batch>-<partition>-<attempt>.<ext>   being written by a task
        <writer>/pending/<token>-<batch>-<partition>-<attempt>.<ext>       pre-committed, invisible

Each writer (:mod:`kafka_eos_ds.twophase.identity`) stages apart, so several queries and
jobs can write one directory without touching each other's files: ``<writer>`` is the
writer kind's letter and a digest of its app id (``q...`` a stream, ``f...`` the writes
inside a stream's foreachBatch, ``a...`` a ``txnAppId``, ``j...`` a job).

``<token>`` is, for a stream, the first 8 characters of its query id (stable across
restarts from one checkpoint), so the final name of a batch's task is deterministic:
committing it twice finds it already there; for any ``df.write``, a digest of that
write's own id, so two writes of one micro-batch never share a name. Spark's and
Arrow's file listings skip names starting with ``_`` or ``.``, so readers of DIR never
see the staging directory.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from kafka_eos_ds.twophase.identity import Kind, WriteId, token

STAGING = "_kafka_eos"
IN_PROGRESS = "in-progress"
PENDING = "pending"
DECISIONS = "decisions"
EXTENSIONS = {"parquet": "parquet", "jsonl": "jsonl"}

_ID = re.compile(r"^(?P<writer>[a-z][0-9a-f]{8})/(?P<token>[0-9a-z]{1,32})-(?P<batch>\d+)-(?P<partition>\d+)"
                 r"-(?P<attempt>\d+)$")


def query_token(query_id: Optional[str]) -> str:
    """A short, file-name-safe stand-in for a query id."""
    token_ = re.sub(r"[^0-9a-z]", "", (query_id or "").lower())
    return (token_ or "none")[:8]


def writer_dir(key: str) -> str:
    """The staging directory name of writer ``key`` (``"<kind>:<app>"``)."""
    kind, _, app = key.partition(":")
    return kind + token(app)


@dataclass(frozen=True)
class FileId:
    """One task attempt's file: the participant id of the two-phase commit,
    ``<writer>/<token>-<batch>-<partition>-<attempt>``."""

    writer: str
    token: str
    batch: int
    partition: int
    attempt: int

    def __str__(self) -> str:
        return f"{self.writer}/{self.name}"

    @property
    def name(self) -> str:
        return f"{self.token}-{self.batch}-{self.partition}-{self.attempt}"

    @classmethod
    def of(cls, write: WriteId, partition: int, attempt: int) -> "FileId":
        own = query_token(write.app) if write.kind is Kind.STREAM else token(write.job or write.app)
        return cls(writer_dir(write.key), own, write.version, partition, attempt)

    @classmethod
    def parse(cls, text: str) -> Optional["FileId"]:
        """The id a staging path (``<writer>/<name>[.ext]``) stands for; None if not ours."""
        m = _ID.match(text.split(".", 1)[0])
        if m is None:
            return None
        return cls(m["writer"], m["token"], int(m["batch"]), int(m["partition"]), int(m["attempt"]))

    def final_name(self, ext: str) -> str:
        # Without the attempt: whichever attempt wins, the write's task has one final name.
        return f"part-{self.batch:05d}-{self.partition:05d}-{self.token}.{ext}"

    def earlier_attempts(self) -> list["FileId"]:
        return [FileId(self.writer, self.token, self.batch, self.partition, a) for a in range(self.attempt)]


@dataclass(frozen=True)
class Layout:
    """The paths of one sink directory."""

    root: Path
    ext: str = "parquet"

    @property
    def staging(self) -> Path:
        return self.root / STAGING

    def writer(self, name: str) -> Path:
        return self.staging / name

    def decisions(self, key: str) -> Path:
        """Where writer ``key``'s numbered decisions are (:mod:`.decision_log`)."""
        return self.writer(writer_dir(key)) / DECISIONS

    def in_progress(self, fid: FileId) -> Path:
        return self.writer(fid.writer) / IN_PROGRESS / f"{fid.name}.{self.ext}"

    def pending(self, fid: FileId) -> Path:
        return self.writer(fid.writer) / PENDING / f"{fid.name}.{self.ext}"

    def final(self, fid: FileId) -> Path:
        return self.root / fid.final_name(self.ext)

    def relative(self, path: Path) -> str:
        """``path`` relative to the root (what a participant's handle stores)."""
        return path.relative_to(self.root).as_posix()

    def resolve(self, relative: str) -> Path:
        return self.root / relative

    def ensure(self, writer: str) -> None:
        for sub in (IN_PROGRESS, PENDING):
            (self.writer(writer) / sub).mkdir(parents=True, exist_ok=True)

    def staged(self, writer: str) -> list[Path]:
        """Every staged file of ``writer`` (in-progress and pending)."""
        return [path for sub in (IN_PROGRESS, PENDING) if (self.writer(writer) / sub).is_dir()
                for path in (self.writer(writer) / sub).iterdir()]


def fsync_dir(path: Path) -> None:
    """Make a rename or unlink in ``path`` durable (POSIX: fsync the directory)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
