"""The file sink's :class:`~kafka_eos_ds.twophase.Participants`: pending files by id.

:class:`FileParticipants` treats each pending file as a participant: commit = atomic
rename to its final name; fence = delete the id's in-progress and pending files; open
ids = the names staged in the writer's ``in-progress/`` and ``pending/``.
"""

from __future__ import annotations

import os
from typing import Optional, Sequence

from kafka_eos_ds.errors import TransactionError
from kafka_eos_ds.filesink.layout import FileId, Layout, fsync_dir, writer_dir
from kafka_eos_ds.twophase.identity import WriteId
from kafka_eos_ds.twophase.protocol import Outcome, Participant


class FileParticipants:
    """Commits, fences and lists the staged files of one sink directory."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout

    def commit(self, participant: Participant) -> Outcome:
        pending = self.layout.resolve(participant.handle["pending"])
        final = self.layout.resolve(participant.handle["final"])
        pending_there, final_there = pending.exists(), final.exists()
        if pending_there and final_there:
            if not _made_from(final, participant):
                # Renaming would replace another writer's file: refuse rather than lose rows.
                raise TransactionError(f"Cannot commit {participant.id}: its final file '{final}' already exists. "
                                       "Another query or batch write is writing the same directory with the same "
                                       "query id; give each query its own 'path'.")
            # An earlier commit renamed this participant's file to final; the pending file
            # is a zombie's of the same id, staged since. It never becomes visible.
            pending.unlink(missing_ok=True)
            fsync_dir(pending.parent)
            return Outcome.COMMITTED
        if pending_there:
            try:
                os.rename(pending, final)
            except FileNotFoundError:
                # Renamed meanwhile by another driver finishing the same decision.
                return Outcome.COMMITTED if final.exists() else Outcome.LOST
            fsync_dir(final.parent)
            return Outcome.COMMITTED
        # Pending gone: renamed by an earlier commit (final there), or fenced (lost).
        return Outcome.COMMITTED if final_there else Outcome.LOST

    def unfit(self, participants: Sequence[Participant], time_needed_s: float) -> Optional[str]:
        # Pending files do not time out; one can only have been deleted (fenced by another
        # writer of the directory, or by hand).
        gone = [p.id for p in participants if not self.layout.resolve(p.handle["pending"]).exists()]
        if not gone:
            return None
        return (f"the pending file(s) of {', '.join(gone)} are gone from '{self.layout.staging}'. Never delete "
                "'_kafka_eos' while a query runs.")

    def fence(self, participant_id: str) -> None:
        fid = FileId.parse(participant_id)
        if fid is None:
            return
        for path in (self.layout.in_progress(fid), self.layout.pending(fid)):
            # A writer still appending to an unlinked in-progress file fails at its
            # rename to pending: a zombie can never pre-commit after this.
            path.unlink(missing_ok=True)
            if path.parent.exists():
                fsync_dir(path.parent)

    def superseded(self, participant: Participant) -> Sequence[str]:
        fid = FileId.parse(participant.id) if participant.id else None
        if fid is None:
            return ()
        return [str(f) for f in fid.earlier_attempts()]

    def open_ids(self, write: WriteId) -> Sequence[str]:
        writer = writer_dir(write.key)
        ids = {str(fid) for path in self.layout.staged(writer)
               if (fid := FileId.parse(f"{writer}/{path.name}")) is not None}
        return sorted(ids)

    def unknown_outcome_message(self, participants: Sequence[Participant]) -> str:
        # Never needed: a pending or final file tells. Here for the port's sake.
        return (f"Look for their final files in '{self.layout.root}': "
                + ", ".join(str(p.handle.get("final")) for p in participants) + ".")

    def lost_message(self, participants: Sequence[Participant]) -> str:
        return (f"Their pending files under '{self.layout.staging}' were deleted before the commit renamed "
                "them (a manual clean-up?). Never delete '_kafka_eos' while a query runs, and re-process the "
                "affected input.")


def _made_from(final: "os.PathLike[str]", participant: Participant) -> bool:
    """Whether ``final`` is the file ``participant`` pre-committed (a rename keeps the
    inode). A participant of a decision written before the inode was recorded is taken
    as the final file's maker: its final name is its own (query, batch, partition)."""
    inode = participant.handle.get("inode")
    return inode is None or os.stat(final).st_ino == int(inode)
