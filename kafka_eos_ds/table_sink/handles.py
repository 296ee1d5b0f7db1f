"""What a task's commit message says about its files, and what the decision records: the
``handle`` of a :class:`~kafka_eos_ds.twophase.Participant`, :class:`StagedFiles`.

One task writes one file per partition it has rows for. On a store that renames, each
file is ``{"pending": ..., "final": ...}`` (paths relative to the table's root); on S3,
``{"key": ..., "upload": ..., "parts": [[number, etag], ...], "tag": ...}`` (the upload
at its final key, and the tag that tells the object it becomes from any other). Both
carry ``partition`` (the directory, '' unpartitioned) and ``records``. A handle holds
``{"files": [...]}`` (and the ``read`` of :class:`StagedFiles`), whatever the store and
however many files.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from kafka_eos_ds.errors import TransactionError
from kafka_eos_ds.twophase.committer import TwoPhaseCommitter
from kafka_eos_ds.twophase.protocol import Decision, Participant


@dataclass(frozen=True)
class StagedFile:
    """One of a task's files, pre-committed: renamed to ``final`` by the driver (``key``
    empty), or the S3 upload ``upload`` completed at ``key``."""

    final: str
    pending: str = ""
    partition: str = ""
    records: int = 0
    upload: str = ""
    parts: tuple[tuple[int, str], ...] = ()
    tag: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"partition": self.partition, "records": self.records}
        if self.upload:
            out.update(key=self.final, upload=self.upload, parts=[list(p) for p in self.parts], tag=self.tag)
        else:
            out.update(pending=self.pending, final=self.final)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "StagedFile":
        if "upload" in data:
            return cls(str(data["key"]), "", str(data.get("partition", "")), int(data.get("records", 0)),
                       str(data["upload"]), tuple((int(n), str(e)) for n, e in data.get("parts") or ()),
                       str(data.get("tag", "")))
        return cls(str(data["final"]), str(data["pending"]), str(data.get("partition", "")),
                   int(data.get("records", 0)))


@dataclass(frozen=True)
class StagedFiles:
    """A task's files, pre-committed: the file sink's participant handle. ``read``: the
    writer's decision number read before the first file was staged (:mod:`.task`; None
    for a task that staged nothing). Stored as ``{"files": [...], "read": n}``."""

    files: tuple[StagedFile, ...] = ()
    read: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"files": [f.to_json() for f in self.files]}
        if self.read is not None:
            out["read"] = self.read
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "StagedFiles":
        if "files" not in data:
            # The one-file form of development builds before 0.1.0: refused, never guessed at.
            raise TransactionError(f"A decision of this table names its files as {dict(data)}, a form only "
                                   "development builds before 0.1.0 wrote; this version reads {'files': [...]} "
                                   "only. Finish that write with the build that made it, or delete its writer's "
                                   "directory under '_kafka_eos' once its pending files are dealt with.")
        read = data.get("read")
        return cls(tuple(StagedFile.from_json(f) for f in data["files"]), int(read) if read is not None else None)


# The file sink's participants and decisions: their handles name staged files.
FileParticipant = Participant[StagedFiles]
FileDecision = Decision[StagedFiles]
FileCommitter = TwoPhaseCommitter[StagedFiles]


def partitions_of(participants: Sequence[FileParticipant]) -> list[str]:
    """The partition directories the files of ``participants`` are in, each once, in order."""
    seen: dict[str, None] = {}
    for participant in participants:
        for f in participant.handle.files:
            seen.setdefault(f.partition, None)
    return list(seen)
