"""The file sink's driver: check the directory and recover before a batch's tasks, then
its commit.

:class:`FileSinkDriver` is what the Spark writers (:mod:`.writers`) delegate to. It
wires the sink's two ports — :class:`~.decision_log.FileDecisionLog` and
:class:`~.participants.FileParticipants` — into a
:class:`~kafka_eos_ds.twophase.TwoPhaseCommitter`.
"""

from __future__ import annotations

from typing import Any, Iterable, Optional

from pyspark.sql.datasource import WriterCommitMessage
from pyspark.sql.types import StructType

from kafka_eos_ds.filesink.config import FileSinkConfig, check_writable
from kafka_eos_ds.filesink.decision_log import FileDecisionLog
from kafka_eos_ds.filesink.participants import FileParticipants
from kafka_eos_ds.filesink.task import FileCommitMessage, write_files
from kafka_eos_ds.twophase.committer import TwoPhaseCommitter
from kafka_eos_ds.twophase.protocol import DoneMark
from kafka_eos_ds.twophase.spark import participants_of


class FileSinkDriver:
    """One sink directory's driver-side steps; picklable (it travels inside the writer)."""

    def __init__(self, config: FileSinkConfig, schema: StructType) -> None:
        self.config = config
        self.schema = schema
        self.mark: Optional[DoneMark] = None

    def prepare_for_tasks(self) -> DoneMark:
        """Check the directory can be written, then finish or delete what earlier runs left.

        Runs once per writer; returns the done mark the tasks get.
        """
        if self.mark is None:
            check_writable(self.config.layout)
            self.mark = self._committer().recover()
        return self.mark

    def write(self, items: Iterable[Any], query: Optional[str] = None,
              batch: Optional[int] = None) -> FileCommitMessage:
        """The task side: see :func:`~.task.write_files`."""
        return write_files(self.config, self.mark or DoneMark(), items, self.schema, query, batch)

    def commit(self, messages: Iterable[Optional[WriterCommitMessage]], batch_id: int,
               query: Optional[str] = None) -> None:
        query, participants = participants_of(messages, FileCommitMessage, query)
        self._committer().commit(query or "", batch_id, participants)

    def abort(self, messages: Iterable[Optional[WriterCommitMessage]], batch_id: int,
              query: Optional[str] = None) -> None:
        query, participants = participants_of(messages, FileCommitMessage, query)
        self._committer().abort(query, batch_id, participants)

    def _committer(self) -> TwoPhaseCommitter:
        layout = self.config.layout
        # Renames are local and quick: a short grace sweep is enough for tasks still
        # closing their files when a batch is aborted.
        return TwoPhaseCommitter(FileDecisionLog(layout), FileParticipants(layout),
                                 commit_timeout_s=self.config.commit_timeout_s, abort_grace_s=1.0)
