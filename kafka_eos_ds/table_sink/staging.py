"""How a table's store holds a task's files between its pre-commit and the driver's commit:
one :class:`Staging`, chosen once from the store (:func:`staging_of`).

* :class:`RenameStaging` (a local disk, HDFS): a task writes ``in-progress/...``, its
  pre-commit moves the file to ``pending/...``, the commit moves it to its final name
  (:mod:`.participants`); a participant is a task attempt.
* :class:`UploadStaging` (S3, which cannot rename): the pending file is a multipart upload
  at the final key, the commit completes it (:mod:`.uploads`); a participant is a task,
  every attempt of which uploads to the same keys.

Everything that differs between the two is asked of the strategy; nothing else looks at
which store it is.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Protocol

from kafka_eos_ds.errors import StorageError, TransactionError
from kafka_eos_ds.storage import RenameStore, Store, renaming
from kafka_eos_ds.storage.local import LocalStore
from kafka_eos_ds.storage.s3 import S3Store
from kafka_eos_ds.table_sink.decision_log import FileDecisionLog
from kafka_eos_ds.table_sink.encoding import FileEncoder
from kafka_eos_ds.table_sink.handles import StagedFile, StagedFiles
from kafka_eos_ds.table_sink.layout import FileId, Layout
from kafka_eos_ds.table_sink.participants import FileParticipants
from kafka_eos_ds.table_sink.uploads import UploadParticipants, UploadWriter
from kafka_eos_ds.twophase.protocol import Participants

if TYPE_CHECKING:
    from kafka_eos_ds.table_sink.config import FileSinkConfig


class TaskFile(Protocol):
    """One of a task's files (one per partition directory), written until its pre-commit."""

    @property
    def records(self) -> int: ...

    def write_batch(self, batch: Any) -> None: ...

    def pre_commit(self) -> None:
        """Make the file durable and invisible, ready for the driver's commit."""

    def abort(self) -> None:
        """Best effort: drop the file (recovery drops what is left)."""

    def staged(self) -> StagedFile:
        """The file as the task's commit message names it (after :meth:`pre_commit`)."""


class StagedParticipants(Participants[StagedFiles], Protocol):
    """The committer's port over the staged files, which also lists them per writer."""

    def staged(self) -> dict[str, list[str]]:
        """The ids staged now, per writer directory, of every writer of the table."""


class Staging(Protocol):
    """What differs between the stores that rename and those that complete uploads."""

    def participant_id(self, fid: FileId) -> str:
        """The participant id of a task attempt's files."""

    def open(self, config: FileSinkConfig, fid: FileId, directory: str, stamp: str, k: int | None) -> TaskFile:
        """The task attempt ``fid``'s file in partition ``directory`` ('' unpartitioned), the
        ``k``-th of the task's files (None: the table is not partitioned); ``stamp`` tells
        this run of the attempt from any other (:mod:`.layout`)."""

    def participants(self, layout: Layout, decisions: FileDecisionLog) -> StagedParticipants:
        """The committer's port, its fences guarded by ``decisions``' claims."""

    def prepare_directories(self, root: PurePath, directories: Iterable[str]) -> None:
        """Before a metastore registers the partitions ``directories`` (under ``root``):
        create those the store has (docs/dev/decisions.md, "A new partition's directory is
        created before the metastore registers it")."""

    def ignored_publish(self, probe: str) -> str | None:
        """With a file at ``probe``: the call publishing a file would replace it with (the
        store ignored its condition), or None when the store refuses it."""


class RenameStaging:
    """Staging by rename on ``store`` (local, HDFS): in-progress -> pending -> final."""

    def __init__(self, store: RenameStore) -> None:
        self.store = store

    def participant_id(self, fid: FileId) -> str:
        return str(fid)  # each attempt's files are its own

    def open(self, config: FileSinkConfig, fid: FileId, directory: str, stamp: str, k: int | None) -> TaskFile:
        layout = config.layout
        pending = layout.pending(fid, stamp, k)
        return RenameFile(config.file_format, layout.in_progress(fid, stamp, k), pending, self.store,
                          StagedFile(layout.relative(layout.final(fid, directory)), layout.relative(pending),
                                     directory))

    def participants(self, layout: Layout, decisions: FileDecisionLog) -> StagedParticipants:
        return FileParticipants(layout, self.store, decisions)

    def prepare_directories(self, root: PurePath, directories: Iterable[str]) -> None:
        for directory in directories:
            # A directory that cannot be made here (a value too long for a name) is refused
            # by the metastore, or by the commit's move, each with its own message.
            with _unless_retriable(OSError):
                self.store.make_dirs(str(root / directory))

    def ignored_publish(self, probe: str) -> str | None:
        return None  # a move never replaces a file (RenameStore.rename)


class UploadStaging:
    """Staging as multipart uploads on ``store`` (S3), completed to publish."""

    def __init__(self, store: S3Store) -> None:
        self.store = store

    def participant_id(self, fid: FileId) -> str:
        return str(fid.of_task())  # every attempt of a task uploads to the same keys

    def open(self, config: FileSinkConfig, fid: FileId, directory: str, stamp: str, k: int | None) -> TaskFile:
        layout = config.layout
        key = layout.upload(fid, directory)
        return UploadWriter(config.file_format, self.store, str(key), config.part_size, str(fid), directory,
                            layout.relative(key))

    def participants(self, layout: Layout, decisions: FileDecisionLog) -> StagedParticipants:
        return UploadParticipants(layout, self.store, decisions)

    def prepare_directories(self, root: PurePath, directories: Iterable[str]) -> None:
        # S3 has no directories, but a metastore on s3a:// has: one that finds no object
        # under a new partition's prefix makes the directory (a marker) and, when its add
        # then clashes with another writer's add of the same partition, deletes the prefix
        # with everything in it, by then another writer's final files (the S3 long life
        # lost a batch so). With a marker there first, it finds the directory and leaves
        # the prefix alone (docs/dev/decisions.md, "A new partition's directory is created
        # before the metastore registers it").
        for directory in directories:
            with _unless_retriable():
                self.store.mark_directory(str(root / directory))

    def ignored_publish(self, probe: str) -> str | None:
        # The commit's never-replace rule stands on the completion's condition, which a
        # store can honour on PutObject and ignore here.
        store = self.store
        upload = store.start_upload(probe, {})
        try:
            store.complete(probe, upload, [(1, store.upload_part(probe, upload, 1, b"x"))])
            return "CompleteMultipartUpload"
        except FileExistsError:
            return None
        finally:
            store.abort(probe, upload)


def staging_of(store: Store) -> Staging:
    """The staging of ``store``: by rename where it renames, else as S3 uploads."""
    if renaming(store):
        return RenameStaging(store)
    if isinstance(store, S3Store):
        return UploadStaging(store)
    raise TypeError(f"{type(store).__name__} neither renames nor completes uploads: the file sink cannot stage on it")


class RenameFile:
    """A file on a store that renames: created at ``path`` (in-progress) at the first row,
    moved to ``pending`` at pre-commit; ``staged``: how the commit message names it."""

    def __init__(self, file_format: str, path: PurePath, pending: PurePath,
                 store: RenameStore | None = None, staged: StagedFile | None = None) -> None:
        self.store: RenameStore = store or LocalStore()
        self.path = path
        self.pending = pending
        self._staged = staged or StagedFile("", str(pending))
        self._encoder = FileEncoder(file_format, lambda: self.store.create(str(path)))

    @property
    def records(self) -> int:
        return self._encoder.records

    def write_all(self, batches: Iterable[Any]) -> int:
        for batch in batches:
            self.write_batch(batch)
        return self.records

    def write_batch(self, batch: Any) -> None:
        self._encoder.write_batch(batch)

    def pre_commit(self) -> None:
        self._encoder.finish()
        # Fails if a recovery fenced (deleted) this attempt meanwhile: a zombie stops here.
        try:
            self.store.rename(str(self.path), str(self.pending))
        except FileExistsError:
            # Staged names are unique per attempt (:mod:`.layout`): only a broken stamp gets here.
            raise TransactionError(f"Cannot pre-commit '{self.path}': '{self.pending}' is already pre-committed by "
                                   "another writer. This attempt fails and Spark retries it; recovery deletes its "
                                   "file.", retriable=True) from None

    def abort(self) -> None:
        opened = self._encoder.opened
        try:
            self._encoder.discard()
        finally:
            if opened:  # never delete a file this attempt did not create
                self.store.delete(str(self.path))

    def staged(self) -> StagedFile:
        return replace(self._staged, records=self.records)


@contextlib.contextmanager
def _unless_retriable(*ignored: type[BaseException]) -> Iterator[None]:
    """A directory the store refuses to make is left to the metastore's or the commit's own
    refusal; a store that may make it when asked again (a throttled S3 request, a NameNode
    failing over) is asked again by the caller's retry, never skipped: a registration
    without the directory is the one that can delete another writer's files."""
    try:
        yield
    except StorageError as exc:
        if exc.retriable:
            raise
    except ignored:
        pass
