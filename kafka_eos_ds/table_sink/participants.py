"""The file sink's :class:`~kafka_eos_ds.twophase.Participants` on a store that renames
(a local disk, HDFS): a task attempt's pending files by id.

:class:`FileParticipants` treats each task attempt as a participant: commit = rename each
of its pending files to its final name (never over an existing file); fence = delete the
id's in-progress and pending files; open ids = the names staged in the writer's
``in-progress/`` and ``pending/``. S3 has its own: :mod:`.uploads`.

Every staged file's name is unique to the task attempt that wrote it (:mod:`.layout`):
attempt numbers restart per driver run and stage attempt, so a zombie can hold the same
id as a live attempt, but never its files. The commit message names the exact pending
files, so a commit renames only what its participant pre-committed: "my pending file gone
and the final file there" means committed by an earlier commit, and a pending file of the
same id found on a re-commit is a zombie's stray, deleted.

A fence deletes exactly the files it listed, under a claim of the writer's decision log
made after listing them (:meth:`.decision_log.FileDecisionLog.claim`): a driver that fell
behind stops there instead of deleting what a newer driver decided.
"""

from __future__ import annotations

from typing import Sequence

from kafka_eos_ds.errors import TransactionError
from kafka_eos_ds.storage import RenameStore
from kafka_eos_ds.storage.local import LocalStore
from kafka_eos_ds.table_sink.decision_log import FileDecisionLog
from kafka_eos_ds.table_sink.handles import FileParticipant, StagedFile
from kafka_eos_ds.table_sink.layout import IN_PROGRESS, PENDING, FileId, Layout, writer_dir
from kafka_eos_ds.twophase.identity import WriteId
from kafka_eos_ds.twophase.protocol import Outcome


class FileParticipants:
    """Commits, fences and lists the staged files of one sink directory."""

    def __init__(self, layout: Layout, store: RenameStore | None = None,
                 decisions: FileDecisionLog | None = None) -> None:
        self.layout = layout
        self.store: RenameStore = store or LocalStore()
        self.decisions = decisions  # whose claims guard every deletion (:meth:`fence`)

    def commit(self, participant: FileParticipant) -> Outcome:
        outcomes = [self._commit_file(participant, f) for f in participant.handle.files]
        if Outcome.LOST in outcomes:
            return Outcome.LOST
        if None in outcomes:
            # A re-commit: what is still staged under this id is a zombie's (its own files
            # are final now). It never becomes visible; dropped now rather than at the
            # next recovery.
            self.fence(participant.id)
        return Outcome.COMMITTED

    def _commit_file(self, participant: FileParticipant, staged: StagedFile) -> Outcome | None:
        """COMMITTED (renamed now), None (committed before), or LOST."""
        pending, final = str(self.layout.resolve(staged.pending)), str(self.layout.resolve(staged.final))
        try:
            self.store.rename(pending, final)
            return Outcome.COMMITTED
        except FileNotFoundError:
            # Pending gone: renamed by an earlier commit or by another driver finishing the
            # same decision (final there), or fenced (lost).
            return None if self.store.exists(final) else Outcome.LOST
        except FileExistsError:
            if not self.store.exists(pending):
                return None  # renamed meanwhile by another driver
            # This participant's own file is still pending, so the final file is another
            # writer's: renaming over it would lose rows.
            raise TransactionError(f"Cannot commit {participant.id}: its final file '{final}' already exists. "
                                   "Another query or batch write is writing the same directory with the same "
                                   "query id; give each query its own 'path'.") from None

    def unfit(self, participants: Sequence[FileParticipant], time_needed_s: float) -> str | None:
        # Pending files do not time out; one can only have been deleted (fenced by another
        # writer of the directory, or by hand).
        gone = sorted({p.id for p in participants for f in p.handle.files
                       if not self.store.exists(str(self.layout.resolve(f.pending)))})
        if not gone:
            return None
        return (f"the pending file(s) of {', '.join(gone)} are gone from '{self.layout.staging}'. Never delete "
                "'_kafka_eos' while a query runs.")

    def fence(self, participant_id: str) -> None:
        fid = FileId.parse(participant_id)
        if fid is None:
            return
        # Exactly the files listed here, and only under a claim made after listing them:
        # a driver that fell behind never deletes what a newer one decided
        # (FileDecisionLog.claim).
        found = [self.layout.writer(fid.writer) / sub / name for sub in (IN_PROGRESS, PENDING)
                 for name in self.store.list_names(str(self.layout.writer(fid.writer) / sub))
                 if FileId.parse(f"{fid.writer}/{name}") == fid]
        if not found:
            return
        if self.decisions is not None:
            self.decisions.claim(fid.writer, self.decisions.observed(fid.writer))
        for path in found:
            # A writer still appending to a deleted in-progress file fails at its rename
            # to pending: a zombie can never pre-commit after this.
            self.store.delete(str(path))

    def superseded(self, participant: FileParticipant) -> Sequence[str]:
        fid = FileId.parse(participant.id) if participant.id else None
        if fid is None:
            return ()
        return [str(f) for f in fid.earlier_attempts()]

    def open_ids(self, write: WriteId) -> Sequence[str]:
        return self._staged_ids(writer_dir(write.key))

    def staged(self) -> dict[str, list[str]]:
        """The ids staged now, per writer directory, of every writer of the table."""
        writers = [name for name in self.store.list_names(str(self.layout.staging)) if not name.startswith(".")]
        return {writer: ids for writer in writers if (ids := self._staged_ids(writer))}

    def _staged_ids(self, writer: str) -> list[str]:
        names = [name for sub in (IN_PROGRESS, PENDING)
                 for name in self.store.list_names(str(self.layout.writer(writer) / sub))]
        return sorted({str(fid) for name in names if (fid := FileId.parse(f"{writer}/{name}")) is not None})

    def unknown_outcome_message(self, participants: Sequence[FileParticipant]) -> str:
        # Never needed: a pending or final file tells. Here for the port's sake.
        return (f"Look for their final files in '{self.layout.root}': "
                + ", ".join(f.final for p in participants for f in p.handle.files) + ".")

    def lost_message(self, participants: Sequence[FileParticipant]) -> str:
        return (f"Their pending files under '{self.layout.staging}' were deleted before the commit renamed "
                "them (a manual clean-up?). Never delete '_kafka_eos' while a query runs, and re-process the "
                "affected input.")

