"""What a sink task reports to the driver: :class:`KafkaCommitMessage`, and the
participant handle it becomes: :class:`KafkaHandle`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from pyspark.sql.datasource import WriterCommitMessage

from kafka_eos_ds.twophase.identity import WriteId
from kafka_eos_ds.twophase.protocol import Participant


@dataclass
class KafkaCommitMessage(WriterCommitMessage):
    """One task's pre-committed transaction: just what the driver needs to commit it.

    ``transactional_id`` is None when the task opened no transaction (no rows, a re-run
    of a batch already committed, or ``at_least_once``); ``family`` still names the ids
    its earlier attempts used, which the commit fences. ``read``: the commit log's
    position its planner read (:attr:`KafkaHandle.read`).
    """

    write: WriteId
    partition: int
    attempt: int
    records: int
    family: str = ""
    transactional_id: str | None = None
    producer_id: int = -1
    epoch: int = -1
    read: int | None = None

    def participant(self) -> KafkaParticipant:
        return Participant(self.transactional_id or "", self.partition, self.attempt,
                           self.records if self.transactional_id else 0,
                           KafkaHandle(self.producer_id, self.epoch, self.family, self.read))


@dataclass(frozen=True)
class KafkaHandle:
    """What the driver needs to commit a task's transaction from another process: the
    producer id and epoch it ran under (-1 without one), the family of ids its task's
    attempts use, and ``read``, the commit log's position the write's planner read
    before any task began (None: a task of an older version): the commit refuses the
    write if its writer was claimed from there on. A decision stores it as the
    participant's JSON ``handle``: :meth:`to_json` writes it, :meth:`from_json` (the
    decision log's decoder) is the one place that reads it back."""

    producer_id: int
    epoch: int
    family: str = ""
    read: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"producer_id": self.producer_id, "epoch": self.epoch, "family": self.family}
        if self.read is not None:
            out["read"] = self.read
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> KafkaHandle:
        read = data.get("read")
        return cls(int(data["producer_id"]), int(data["epoch"]), str(data.get("family", "")),
                   int(read) if read is not None else None)


# A participant of the Kafka sink: a transaction, known by its :class:`KafkaHandle`.
KafkaParticipant = Participant[KafkaHandle]
