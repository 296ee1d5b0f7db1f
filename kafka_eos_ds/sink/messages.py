"""What a sink task reports to the driver: :class:`KafkaCommitMessage`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from pyspark.sql.datasource import WriterCommitMessage

from kafka_eos_ds.twophase.identity import WriteId
from kafka_eos_ds.twophase.protocol import Participant


@dataclass
class KafkaCommitMessage(WriterCommitMessage):
    """One task's pre-committed transaction: just what the driver needs to commit it.

    ``transactional_id`` is None when the task opened no transaction (no rows, a re-run
    of a batch already committed, or ``at_least_once``); ``family`` still names the ids
    its earlier attempts used, which the commit fences.
    """

    write: WriteId
    partition: int
    attempt: int
    records: int
    family: str = ""
    transactional_id: Optional[str] = None
    producer_id: int = -1
    epoch: int = -1

    def participant(self) -> Participant:
        return Participant(self.transactional_id or "", self.partition, self.attempt,
                           self.records if self.transactional_id else 0,
                           {"producer_id": self.producer_id, "epoch": self.epoch, "family": self.family})
