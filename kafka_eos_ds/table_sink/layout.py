"""Where the file sink's files live, and what their names mean — in one place.

::

    DIR/
      [<col>=<value>/...]part-<batch>-<task>-<token>.<ext>   final files (what readers of DIR see)
      _kafka_eos/
        <writer>/decisions/<n>.json                        the writer's commit decisions, numbered
        <writer>/in-progress/<token>-<batch>-<task>-<attempt>.<stamp>[.<k>].<ext>   being written
        <writer>/pending/<token>-<batch>-<task>-<attempt>.<stamp>[.<k>].<ext>       pre-committed, invisible

A partitioned table (option ``partitionBy``) puts each final file in the Hive-style
directory of its partition values (``dt=2026-11-24/hour=01/``); a task writes one file
per partition it has rows for, the ``k``-th of them staged as ``<id>.<stamp>.<k>.<ext>``.

``<stamp>`` is random per run of a task attempt. Attempt numbers restart at 0 in every
driver run and stage attempt, so a zombie and a live attempt can share an id; with the
stamp they never share a staged file, on any store: neither can rename, replace or
delete the other's, and the commit message names its own files exactly (a commit knows
whether a final file is its own without asking the store for an inode).

Each writer (:mod:`kafka_eos_ds.twophase.identity`) stages apart, so several queries and
jobs can write one directory without touching each other's files: ``<writer>`` is the
writer kind's letter and a digest of its app id (``q...`` a stream, ``f...`` the writes
inside a stream's foreachBatch, ``a...`` a ``txnAppId``, ``j...`` a job).

On S3 nothing is staged under ``_kafka_eos`` but the decisions: a task's file is a
multipart upload at its final key until the driver completes it, and recovery finds the
uploads by listing them. So there the final name carries the writer as well,
``part-<batch>-<task>-<writer>-<token>.<ext>``, and an upload is known by its task, not
its attempt (``<writer>/<token>-<batch>-<task>``): attempts of one task upload to one key.

``<token>`` is, for a stream, the first 8 characters of its query id (stable across
restarts from one checkpoint), so the final name of a batch's task is deterministic per
(writer, batch, task, partition): committing it twice finds it already there; for any
``df.write``, a digest of that write's own id, so two writes of one micro-batch never
share a name. Spark's and Arrow's file listings skip names starting with ``_`` or ``.``,
so readers of DIR never see the staging directory.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from pathlib import Path, PurePath, PurePosixPath

from kafka_eos_ds.twophase.identity import Kind, WriteId, token

STAGING = "_kafka_eos"
IN_PROGRESS = "in-progress"
PENDING = "pending"
DECISIONS = "decisions"
EXTENSIONS = {"parquet": "parquet", "jsonl": "jsonl"}

_ID = re.compile(r"^(?P<writer>[a-z][0-9a-f]{8})/(?P<token>[0-9a-z]{1,32})-(?P<batch>\d+)-(?P<partition>\d+)"
                 r"(-(?P<attempt>\d+))?$")
_UPLOAD = re.compile(r"^part-(?P<batch>\d+)-(?P<partition>\d+)-(?P<writer>[a-z][0-9a-f]{8})"
                     r"-(?P<token>[0-9a-z]{1,32})\.")


def query_token(query_id: str | None) -> str:
    """A short, file-name-safe stand-in for a query id."""
    token_ = re.sub(r"[^0-9a-z]", "", (query_id or "").lower())
    return (token_ or "none")[:8]


def writer_dir(key: str) -> str:
    """The staging directory name of writer ``key`` (``"<kind>:<app>"``)."""
    kind, _, app = key.partition(":")
    return kind + token(app)


@dataclass(frozen=True)
class FileId:
    """One task attempt's files: the participant id of the two-phase commit,
    ``<writer>/<token>-<batch>-<partition>-<attempt>`` (``partition``: the Spark task's).
    ``attempt`` None: every attempt of the task (an S3 upload's id)."""

    writer: str
    token: str
    batch: int
    partition: int
    attempt: int | None

    def __str__(self) -> str:
        return f"{self.writer}/{self.name}"

    @property
    def name(self) -> str:
        task = f"{self.token}-{self.batch}-{self.partition}"
        return task if self.attempt is None else f"{task}-{self.attempt}"

    @classmethod
    def of(cls, write: WriteId, partition: int, attempt: int | None) -> "FileId":
        own = query_token(write.app) if write.kind is Kind.STREAM else token(write.job or write.app)
        return cls(writer_dir(write.key), own, write.version, partition, attempt)

    @classmethod
    def parse(cls, text: str) -> "FileId" | None:
        """The id a staging path (``<writer>/<name>[.k][.ext]``) stands for; None if not ours."""
        m = _ID.match(text.split(".", 1)[0])
        if m is None:
            return None
        attempt = int(m["attempt"]) if m["attempt"] is not None else None
        return cls(m["writer"], m["token"], int(m["batch"]), int(m["partition"]), attempt)

    @classmethod
    def of_upload(cls, name: str) -> "FileId" | None:
        """The task whose upload has the final name ``name`` (S3); None if not ours."""
        m = _UPLOAD.match(name)
        if m is None:
            return None
        return cls(m["writer"], m["token"], int(m["batch"]), int(m["partition"]), None)

    def final_name(self, ext: str) -> str:
        # Without the attempt: whichever attempt wins, the write's task has one final name.
        return f"part-{self.batch:05d}-{self.partition:05d}-{self.token}.{ext}"

    def upload_name(self, ext: str) -> str:
        """The final name on S3, where it is all recovery sees of an upload."""
        return f"part-{self.batch:05d}-{self.partition:05d}-{self.writer}-{self.token}.{ext}"

    def earlier_attempts(self) -> list["FileId"]:
        return [FileId(self.writer, self.token, self.batch, self.partition, a) for a in range(self.attempt or 0)]

    def of_task(self) -> "FileId":
        return FileId(self.writer, self.token, self.batch, self.partition, None)


@dataclass(frozen=True)
class Layout:
    """The paths of one sink directory (``root``: a local ``Path``, or the path within
    HDFS or the bucket as a ``PurePosixPath``)."""

    root: PurePath
    ext: str = "parquet"

    @property
    def staging(self) -> PurePath:
        return self.root / STAGING

    def writer(self, name: str) -> PurePath:
        return self.staging / name

    def decisions(self, key: str) -> PurePath:
        """Where writer ``key``'s numbered decisions are (:mod:`.decision_log`)."""
        return self.writer(writer_dir(key)) / DECISIONS

    def in_progress(self, fid: FileId, stamp: str, k: int | None = None) -> PurePath:
        return self.writer(fid.writer) / IN_PROGRESS / self._staged(fid, stamp, k)

    def pending(self, fid: FileId, stamp: str, k: int | None = None) -> PurePath:
        return self.writer(fid.writer) / PENDING / self._staged(fid, stamp, k)

    def final(self, fid: FileId, directory: str = "") -> PurePath:
        """The final file of ``fid`` in partition directory ``directory`` ('' unpartitioned)."""
        return self.root / directory / fid.final_name(self.ext) if directory else self.root / fid.final_name(self.ext)

    def upload(self, fid: FileId, directory: str = "") -> PurePath:
        return self.root / directory / fid.upload_name(self.ext) if directory else self.root / fid.upload_name(self.ext)

    def relative(self, path: PurePath) -> str:
        """``path`` relative to the root (what a participant's handle stores)."""
        return path.relative_to(self.root).as_posix()

    def resolve(self, relative: str) -> PurePath:
        return self.root / relative

    def ensure(self, writer: str) -> None:
        """Create the writer's staging directories (a local root; the stores create what
        they write into)."""
        for sub in (IN_PROGRESS, PENDING):
            Path(self.writer(writer) / sub).mkdir(parents=True, exist_ok=True)

    def _staged(self, fid: FileId, stamp: str, k: int | None) -> str:
        return f"{fid.name}.{stamp}.{self.ext}" if k is None else f"{fid.name}.{stamp}.{k}.{self.ext}"


def new_stamp() -> str:
    """A task attempt's own mark on its staged files (module docstring)."""
    return uuid.uuid4().hex[:8]


def remote_root(path: str) -> PurePosixPath:
    """The root of a sink directory on HDFS or S3 (its path there, always absolute)."""
    return PurePosixPath("/" + path.strip("/"))
