"""The file sink on S3: a task's file is a multipart upload at its final key, started and
filled by the task, completed by the driver (Flink's S3 writer works the same way).

* **In progress / pending**: the task starts the upload at its first full part and sends
  each part as its buffer fills (``fs.s3a.multipart.size``, default 8 MiB); pre-commit
  sends the last part. The commit message carries the key, the upload id, the parts'
  numbers and ETags, and a random tag the object will carry as metadata. Nothing of the
  file is listed or readable before the completion (measured, docs/dev/decisions.md).
* **Commit** (:class:`UploadParticipants`): ``CompleteMultipartUpload`` with
  ``If-None-Match: *``. A retried completion may answer ``NoSuchUpload`` (MinIO: the
  upload is gone once completed), 412 (the key exists) or the same success (AWS,
  SeaweedFS): on the first two the object itself is looked at; it is this upload's if it
  carries the tag, else another file took the name and the commit refuses to replace it.
  No object and no upload: the upload was aborted (lost).
* **Fence**: ``AbortMultipartUpload`` of exactly the uploads listed, under a claim of the
  decision log made after the listing (:meth:`.decision_log.FileDecisionLog.claim`); a
  zombie still sending parts then gets ``NoSuchUpload`` and can never pre-commit.
* **Open ids**: ``ListMultipartUploads`` under the table, the writer's own told by the
  final name (:mod:`.layout`); an upload is known by its task, so every attempt of a task
  is fenced together, never the one of a decided task (recovery keeps the decided ids).
"""

from __future__ import annotations

import posixpath
import threading
import uuid
from typing import Any, Sequence

from kafka_eos_ds.errors import TransactionError
from kafka_eos_ds.storage.s3 import S3Store
from kafka_eos_ds.table_sink.decision_log import FileDecisionLog
from kafka_eos_ds.table_sink.encoding import FileEncoder
from kafka_eos_ds.table_sink.handles import FileParticipant, StagedFile
from kafka_eos_ds.table_sink.layout import FileId, Layout, writer_dir
from kafka_eos_ds.twophase.identity import WriteId
from kafka_eos_ds.twophase.protocol import Outcome

TAG = "kafka-eos-file"


class UploadParticipants:
    """Completes, aborts and lists the multipart uploads of one table on S3."""

    def __init__(self, layout: Layout, store: S3Store, decisions: FileDecisionLog | None = None) -> None:
        self.layout = layout
        self.store = store
        self.decisions = decisions  # whose claims guard every abort (:meth:`fence`)
        self._listed: dict[FileId, list[tuple[str, str]]] | None = None
        self._tickets: dict[str, int] = {}  # per writer: the claim ticket of the last listing
        self._lock = threading.Lock()

    def commit(self, participant: FileParticipant) -> Outcome:
        outcomes = [self._complete(participant, f) for f in participant.handle.files]
        return Outcome.LOST if Outcome.LOST in outcomes else Outcome.COMMITTED

    def _complete(self, participant: FileParticipant, staged: StagedFile) -> Outcome:
        key = str(self.layout.resolve(staged.final))
        try:
            self.store.complete(key, staged.upload, list(staged.parts))
            return Outcome.COMMITTED
        except (FileNotFoundError, FileExistsError):
            found = self.store.metadata(key)
        if found is None:
            return Outcome.LOST  # neither the upload nor an object: aborted
        if found.get(TAG) == staged.tag:
            return Outcome.COMMITTED  # completed before (this retry found it done)
        raise TransactionError(f"Cannot commit {participant.id}: another object already has its final name "
                               f"'{self.store.url}/{key.lstrip('/')}'. Another query or batch write is writing "
                               "this table with the same query id; give each query its own 'path'.")

    def unfit(self, participants: Sequence[FileParticipant], time_needed_s: float) -> str | None:
        # Uploads do not time out (unless a bucket lifecycle rule aborts them).
        listed = {upload for uploads in self._list().values() for _, upload in uploads}
        gone = sorted({p.id for p in participants for f in p.handle.files if f.upload not in listed})
        if not gone:
            return None
        return (f"the multipart upload(s) of {', '.join(gone)} were aborted. Never abort this table's uploads "
                "while a query runs (a bucket lifecycle rule 'AbortIncompleteMultipartUpload' must allow more "
                "days than a batch can take).")

    def fence(self, participant_id: str) -> None:
        fid = FileId.parse(participant_id)
        if fid is None:
            return
        task = fid.of_task()
        listed = self._listed if self._listed is not None and task in self._listed else self._list()
        uploads = listed.get(task, ())
        if uploads and self.decisions is not None:
            # Exactly the uploads listed, under a claim made after listing them: a driver
            # that fell behind never aborts what a newer one decided (FileDecisionLog.claim).
            self.decisions.claim(fid.writer, self._tickets[fid.writer])
        for key, upload in uploads:
            self.store.abort(key, upload)

    def superseded(self, participant: FileParticipant) -> Sequence[str]:
        return ()  # an upload's id is its task's: every attempt is one id

    def open_ids(self, write: WriteId) -> Sequence[str]:
        return self.staged().get(writer_dir(write.key), [])

    def staged(self) -> dict[str, list[str]]:
        """The ids of the uploads open now, per writer, of every writer of the table."""
        out: dict[str, list[str]] = {}
        for fid in sorted(self._list(), key=str):
            out.setdefault(fid.writer, []).append(str(fid))
        return out

    def unknown_outcome_message(self, participants: Sequence[FileParticipant]) -> str:
        # Never needed: an upload or an object with the file's tag tells. Here for the port's sake.
        return (f"Look for their objects under '{self.store.url}{self.layout.root}': "
                + ", ".join(f.final for p in participants for f in p.handle.files) + ".")

    def lost_message(self, participants: Sequence[FileParticipant]) -> str:
        return ("Their multipart uploads were aborted before the commit completed them (a bucket lifecycle rule "
                "'AbortIncompleteMultipartUpload', or a manual clean-up). Re-process the affected input.")

    def _list(self) -> dict[FileId, list[tuple[str, str]]]:
        """The table's uploads by task, listed now (and kept for this step's fences)."""
        found: dict[FileId, list[tuple[str, str]]] = {}
        for key, upload in self.store.uploads(str(self.layout.root)):
            fid = FileId.of_upload(posixpath.basename(key))
            if fid is not None:
                found.setdefault(fid, []).append((key, upload))
        tickets = {fid.writer: self.decisions.observed(fid.writer) for fid in found} if self.decisions else {}
        with self._lock:
            self._listed, self._tickets = found, tickets
        return found


class UploadWriter:
    """One of a task's files on S3: encoded into an :class:`UploadOutput` at its final key,
    in partition directory ``partition``, named ``relative`` to the table's root."""

    def __init__(self, file_format: str, store: S3Store, key: str, part_size: int, label: str,
                 partition: str = "", relative: str = "") -> None:
        self.output = UploadOutput(store, key, part_size, label)
        self.partition, self.relative = partition, relative
        self._encoder = FileEncoder(file_format, lambda: self.output)

    @property
    def records(self) -> int:
        return self._encoder.records

    def write_batch(self, batch: Any) -> None:
        self._encoder.write_batch(batch)

    def pre_commit(self) -> None:
        self._encoder.finish()  # sends the last part; the upload stays open

    def abort(self) -> None:
        self._encoder.discard()

    def staged(self) -> StagedFile:
        out = self.output
        return StagedFile(self.relative, "", self.partition, self.records, out.upload, tuple(out.parts), out.tag)


class UploadOutput:
    """One task's file on S3, written as a multipart upload at its final key (the
    file-like object the Parquet or JSON writer writes into). ``close`` sends the last
    part (pre-commit); ``discard`` aborts the upload."""

    def __init__(self, store: S3Store, key: str, part_size: int, label: str) -> None:
        self.store = store
        self.key = key
        self.part_size = part_size
        self.tag = f"{label}/{uuid.uuid4().hex[:16]}"
        self.upload = ""
        self.parts: list[tuple[int, str]] = []
        self._buffer = bytearray()
        self._position = 0
        self.closed = False

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self._buffer += view
        self._position += len(view)
        if len(self._buffer) >= self.part_size:
            self._send()
        return len(view)

    def tell(self) -> int:
        return self._position

    def flush(self) -> None:
        pass

    def close(self) -> None:
        if not self.closed:
            if self._buffer or not self.parts:
                self._send()
            self.closed = True

    def discard(self) -> None:
        self.closed = True
        if self.upload:
            try:
                self.store.abort(self.key, self.upload)
            except Exception:  # best effort: recovery aborts what is left
                pass

    def _send(self) -> None:
        if not self.upload:
            self.upload = self.store.start_upload(self.key, {TAG: self.tag})
        number = len(self.parts) + 1
        self.parts.append((number, self.store.upload_part(self.key, self.upload, number, bytes(self._buffer))))
        self._buffer.clear()
