"""Where the file sink's files live, and what their names mean — in one place.

::

    DIR/
      part-<batch>-<partition>-<query>.<ext>     final files (what readers of DIR see)
      _kafka_eos/
        decision.json                            the latest commit decision
        in-progress/<query>-<batch>-<partition>-<attempt>.<ext>   being written by a task
        pending/<query>-<batch>-<partition>-<attempt>.<ext>       pre-committed, invisible

``<query>`` is the first 8 hex digits of the streaming query's id (stable across
restarts from one checkpoint) or of a batch write's id, so the final name of a batch's
task is deterministic: committing it twice finds it already there. Spark's and
Arrow's file listings skip names starting with ``_`` or ``.``, so readers of DIR never
see the staging directory.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

STAGING = "_kafka_eos"
IN_PROGRESS = "in-progress"
PENDING = "pending"
DECISION = "decision.json"
EXTENSIONS = {"parquet": "parquet", "jsonl": "jsonl"}

_ID = re.compile(r"^(?P<query>[0-9a-z]{1,32})-(?P<batch>\d+)-(?P<partition>\d+)-(?P<attempt>\d+)$")


def query_token(query_id: Optional[str]) -> str:
    """A short, file-name-safe stand-in for a query (or batch write) id."""
    token = re.sub(r"[^0-9a-z]", "", (query_id or "").lower())
    return (token or "none")[:8]


@dataclass(frozen=True)
class FileId:
    """One task attempt's file: the participant id of the two-phase commit."""

    query: str
    batch: int
    partition: int
    attempt: int

    def __str__(self) -> str:
        return f"{self.query}-{self.batch}-{self.partition}-{self.attempt}"

    @classmethod
    def parse(cls, text: str) -> Optional["FileId"]:
        """The id a staging name (with or without extension) stands for; None if not ours."""
        m = _ID.match(text.split(".", 1)[0])
        if m is None:
            return None
        return cls(m["query"], int(m["batch"]), int(m["partition"]), int(m["attempt"]))

    def final_name(self, ext: str) -> str:
        # Without the attempt: whichever attempt wins, the batch's task has one final name.
        return f"part-{self.batch:05d}-{self.partition:05d}-{self.query}.{ext}"

    def earlier_attempts(self) -> list["FileId"]:
        return [FileId(self.query, self.batch, self.partition, a) for a in range(self.attempt)]


@dataclass(frozen=True)
class Layout:
    """The paths of one sink directory."""

    root: Path
    ext: str = "parquet"

    @property
    def staging(self) -> Path:
        return self.root / STAGING

    @property
    def in_progress_dir(self) -> Path:
        return self.staging / IN_PROGRESS

    @property
    def pending_dir(self) -> Path:
        return self.staging / PENDING

    @property
    def decision(self) -> Path:
        return self.staging / DECISION

    def in_progress(self, fid: FileId) -> Path:
        return self.in_progress_dir / f"{fid}.{self.ext}"

    def pending(self, fid: FileId) -> Path:
        return self.pending_dir / f"{fid}.{self.ext}"

    def final(self, fid: FileId) -> Path:
        return self.root / fid.final_name(self.ext)

    def relative(self, path: Path) -> str:
        """``path`` relative to the root (what a participant's handle stores)."""
        return path.relative_to(self.root).as_posix()

    def resolve(self, relative: str) -> Path:
        return self.root / relative

    def ensure(self) -> None:
        for d in (self.in_progress_dir, self.pending_dir):
            d.mkdir(parents=True, exist_ok=True)


def fsync_dir(path: Path) -> None:
    """Make a rename or unlink in ``path`` durable (POSIX: fsync the directory)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
