"""The Kafka sink's driver: checks and recovery before a batch's tasks, then its commit.

:class:`KafkaSinkDriver` is what the Spark writers (:mod:`.writers`) delegate to. It
wires the sink's two ports — :class:`~.decision_log.KafkaDecisionLog` and
:class:`~.participants.KafkaTransactions` — into a
:class:`~kafka_eos_ds.twophase.TwoPhaseCommitter`, which orders the steps.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterable, Iterator, Optional

from pyspark.sql.datasource import WriterCommitMessage

from kafka_eos_ds.errors import ConfigError, TransactionError
from kafka_eos_ds.kafka.client_settings import client_config, client_error
from kafka_eos_ds.kafka.coordinator import TransactionCoordinator
from kafka_eos_ds.sink import source_progress
from kafka_eos_ds.sink.config import SinkConfig
from kafka_eos_ds.sink.decision_log import KafkaDecisionLog
from kafka_eos_ds.sink.messages import KafkaCommitMessage
from kafka_eos_ds.sink.participants import KafkaTransactions, commit_time_needed_s
from kafka_eos_ds.sink.task_writer import write_partition
from kafka_eos_ds.twophase.committer import TwoPhaseCommitter
from kafka_eos_ds.twophase.protocol import DecisionLog, DoneMark
from kafka_eos_ds.twophase.spark import participants_of


class KafkaSinkDriver:
    """One sink's driver-side steps; picklable (it travels to the tasks inside the writer).

    Parameters
    ----------
    config : SinkConfig
        The checked options.
    commit_timeout_s : float
        How long a commit retries a transaction whose outcome is not known yet.
    """

    def __init__(self, config: SinkConfig, commit_timeout_s: float) -> None:
        self.config = config
        self.commit_timeout_s = commit_timeout_s
        self.mark: Optional[DoneMark] = None

    def prepare_for_tasks(self) -> DoneMark:
        """Check the topic, then (exactly_once) finish or abort what earlier runs left.

        Runs once per writer; returns the done mark the tasks get.
        """
        if self.mark is None:
            self.mark = self._check_and_recover()
        return self.mark

    def write(self, items: Iterable[Any], query: Optional[str] = None,
              batch: Optional[int] = None) -> KafkaCommitMessage:
        """The task side: see :func:`~.task_writer.write_partition`."""
        return write_partition(self.config, self.mark or DoneMark(), items, query, batch)

    def commit(self, messages: Iterable[Optional[WriterCommitMessage]], batch_id: int,
               query: Optional[str] = None) -> None:
        if not self.config.exactly_once:
            return
        query, participants = participants_of(messages, KafkaCommitMessage, query)
        progress = self._progress(batch_id)
        with self._committer() as committer:
            committer.commit(query or "", batch_id, participants, progress)

    def abort(self, messages: Iterable[Optional[WriterCommitMessage]], batch_id: int,
              query: Optional[str] = None) -> None:
        if not self.config.exactly_once:
            return
        query, participants = participants_of(messages, KafkaCommitMessage, query)
        with self._committer() as committer:
            committer.abort(query, batch_id, participants)

    # -- steps --------------------------------------------------------------

    def _check_and_recover(self) -> DoneMark:
        metadata = cluster_metadata(self.config)
        if self.config.topic is not None and self.config.topic not in metadata.topics:
            # A principal without DESCRIBE on a topic does not see it in metadata at all.
            raise ConfigError(f"Topic '{self.config.topic}' (option 'topic') does not exist, or this principal may "
                              "not see it: create it first, or (Kafka ACLs) grant DESCRIBE and WRITE on it.")
        if not self.config.exactly_once:
            return DoneMark()
        query = None
        if self.config.source_group_id is not None:
            # Checked now, before any task writes: a bad setup fails the batch up front.
            checkpoint = source_progress.checkpoint_dir(self.config.checkpoint)
            source_progress.end_offsets(checkpoint, source_progress.latest_batch(checkpoint))
            query = source_progress.query_id(checkpoint)
        with self._committer(metadata) as committer:
            self._require_decisions(committer.decisions)
            return committer.recover(query)

    def _require_decisions(self, decisions: DecisionLog) -> None:
        """Fail when the checkpoint has committed batches but the commit log has no decision
        of this sink: the log was deleted or re-created (or the options naming it changed),
        and recovery would take decided batches for undecided ones and write them again."""
        checkpoint = source_progress.local_checkpoint(self.config.checkpoint)
        committed = source_progress.latest_batch(checkpoint, "commits") if checkpoint is not None else -1
        if committed < 0 or decisions.latest() is not None:
            return
        raise TransactionError(
            f"The commit-log topic '{self.config.commit_log_topic}' (option 'commitLogTopic') holds no decision of "
            f"the sink '{self.config.prefix}' (option 'transactionalIdPrefix'), but the checkpoint {checkpoint} has "
            f"committed batches up to {committed}: the topic was deleted or re-created, or one of those options "
            "changed. "
            "Recovery cannot tell which of the last batch's transactions were decided, so nothing is written. "
            "If an option changed, restore it. If the topic was lost, check the output of the last batch, then "
            "start the query with a new 'checkpointLocation' (and a new 'transactionalIdPrefix') from the input "
            "position the output ends at.", retriable=False)

    @contextlib.contextmanager
    def _committer(self, metadata: Any = None) -> Iterator[TwoPhaseCommitter]:
        cfg = self.config
        prefix = cfg.prefix or ""
        coordinator = TransactionCoordinator(cfg.producer)
        decisions = KafkaDecisionLog(cfg.producer, cfg.commit_log_topic, prefix)
        if metadata is not None:
            decisions.ensure_topic(metadata)
        # Before any read: a stalled write of an earlier driver cannot land after it.
        decisions.fence_writers()
        transactions = KafkaTransactions(coordinator, prefix, cfg.transaction_timeout_ms)
        try:
            yield TwoPhaseCommitter(decisions, transactions, progress_store=transactions,
                                    commit_timeout_s=self.commit_timeout_s,
                                    time_needed_s=commit_time_needed_s(self.commit_timeout_s))
        finally:
            decisions.close()
            coordinator.close()

    def _progress(self, batch_id: int) -> Optional[dict]:
        group = self.config.source_group_id
        if group is None:
            return None
        return source_progress.progress(group, source_progress.checkpoint_dir(self.config.checkpoint), batch_id)


def cluster_metadata(config: SinkConfig) -> Any:
    """The cluster's topics and brokers (confluent-kafka ClusterMetadata)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    conf = client_config(config.producer, "sink_metadata")
    admin = AdminClient(conf)
    try:
        # All topics, not the one topic: a metadata request naming it could auto-create it.
        return admin.list_topics(timeout=15)
    except KafkaException as exc:
        raise client_error("read the cluster's topics", exc, conf, admin) from exc
