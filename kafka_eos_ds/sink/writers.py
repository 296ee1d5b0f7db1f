"""The Spark side of the sink: stream and batch writers (driver and task entry points).

The skeleton shared with other transactional sinks (recovery when the writer is first
pickled, routing commit/abort to the two-phase committer, the Arrow writer bases) is
:mod:`kafka_eos_ds.twophase.spark_writers`; this module adds Kafka's checks and ports.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from typing import Any, Iterator, Mapping, Optional

from pyspark.sql.types import StructType

from kafka_eos_ds.errors import ConfigError, KafkaClientError
from kafka_eos_ds.kafka.config import redact, short_lived
from kafka_eos_ds.kafka.coordinator import TransactionCoordinator
from kafka_eos_ds.kafka.decision_log import KafkaDecisionLog
from kafka_eos_ds.options import Options
from kafka_eos_ds.sink.config import SinkConfig
from kafka_eos_ds.sink.messages import KafkaCommitMessage
from kafka_eos_ds.sink import source_progress
from kafka_eos_ds.sink.participants import KafkaTransactions
from kafka_eos_ds.sink.task_writer import write_partition
from kafka_eos_ds.twophase.committer import TwoPhaseCommitter
from kafka_eos_ds.twophase.protocol import DoneMark
from kafka_eos_ds.twophase.spark_writers import BatchWriterBase as _BatchBase
from kafka_eos_ds.twophase.spark_writers import StreamWriterBase as _StreamBase
from kafka_eos_ds.twophase.spark_writers import BatchEntryPoints, StreamEntryPoints, TwoPhaseSparkDriver

log = logging.getLogger(__name__)


class _SinkDriver(TwoPhaseSparkDriver):
    """What both writers share: config, Kafka checks and ports (recovery on first pickling,
    commit and abort come from :class:`TwoPhaseSparkDriver`)."""

    _message_type = KafkaCommitMessage

    def __init__(self, schema: StructType, options: Mapping[str, Any]) -> None:
        self._config = SinkConfig.from_options(options, schema)
        self._commit_timeout_s = (Options(options).get_int("commitTimeoutMs", 120_000, minimum=1000) or 0) / 1000
        self._mark: Optional[DoneMark] = None
        self.recovery_seconds: Optional[float] = None

    def _prepare(self) -> DoneMark:
        """Check the topic, then finish or abort what earlier runs left (exactly_once)."""
        metadata = _cluster_metadata(self._config)
        if self._config.topic is not None and self._config.topic not in metadata.topics:
            raise ConfigError(f"Topic '{self._config.topic}' (option 'topic') does not exist; create it first.")
        if not self._config.exactly_once:
            return DoneMark()
        query = None
        if self._config.source_group_id is not None:
            # Checked now, before any task writes: a bad setup fails the batch up front.
            checkpoint = source_progress.checkpoint_dir(self._config.checkpoint)
            source_progress.end_offsets(checkpoint, source_progress.latest_batch(checkpoint))
            query = source_progress.query_id(checkpoint)
        with self._committer(metadata) as committer:
            return committer.recover(query)

    @contextlib.contextmanager
    def _committer(self, metadata: Any = None) -> Iterator[TwoPhaseCommitter]:
        cfg = self._config
        coordinator = TransactionCoordinator(cfg.producer)
        decisions = KafkaDecisionLog(cfg.producer, cfg.commit_log_topic, cfg.prefix or "")
        if metadata is not None:
            decisions.ensure_topic(metadata)
        try:
            yield TwoPhaseCommitter(decisions, KafkaTransactions(coordinator, cfg.prefix or "",
                                                                 cfg.transaction_timeout_ms),
                                    commit_timeout_s=self._commit_timeout_s)
        finally:
            decisions.close()
            coordinator.close()

    def _write(self, iterator: Iterator[Any], query: Optional[str], batch: Optional[int]) -> KafkaCommitMessage:
        return write_partition(self._config, self._mark or DoneMark(), iterator, query, batch)

    def _two_phase(self) -> bool:
        return self._config.exactly_once

    def _progress(self, batch_id: int) -> Optional[dict]:
        group = self._config.source_group_id
        if group is None:
            return None
        return source_progress.progress(group, source_progress.checkpoint_dir(self._config.checkpoint), batch_id)


class KafkaStreamWriter(StreamEntryPoints, _SinkDriver, _StreamBase):
    """``df.writeStream.format("kafka_eos")``: exactly-once Kafka sink for streaming queries.

    Each task writes its rows in a Kafka transaction and pre-commits it; the driver makes
    the commit decision durable in the commit-log topic, then commits every transaction
    of the batch. Options and columns: docs/sink.md.

    Examples
    --------
    >>> (df.selectExpr("key", "value").writeStream.format("kafka_eos")
    ...    .option("kafka.bootstrap.servers", "localhost:9092").option("topic", "out")
    ...    .option("transactionalIdPrefix", "orders-etl")
    ...    .option("checkpointLocation", "/ckpt/orders-etl").start())
    """

    def __init__(self, schema: StructType, options: Mapping[str, Any], overwrite: bool = False) -> None:
        _SinkDriver.__init__(self, schema, options)


class KafkaBatchWriter(BatchEntryPoints, _SinkDriver, _BatchBase):
    """``df.write.format("kafka_eos")``: all task transactions commit at job commit.

    The job is one batch of the protocol under a fresh write id; options as for streaming.
    """

    def __init__(self, schema: StructType, options: Mapping[str, Any], overwrite: bool = False) -> None:
        _SinkDriver.__init__(self, schema, options)
        if self._config.source_group_id is not None:
            raise ConfigError("Option 'sourceGroupId' applies to streaming queries (it commits each micro-batch's "
                              "source offsets); remove it for df.write.")
        self._write_id = f"write-{uuid.uuid4()}"


def _cluster_metadata(config: SinkConfig) -> Any:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    conf = short_lived({k: v for k, v in config.producer.items()
                        if k.lower() in ("bootstrap.servers", "security.protocol", "sasl.mechanism", "sasl.mechanisms",
                                         "sasl.username", "sasl.password", "client.id", "reconnect.backoff.ms")
                        or k.lower().startswith("ssl.")})
    try:
        # All topics, not the one topic: a metadata request naming it could auto-create it.
        return AdminClient(conf).list_topics(timeout=15)
    except KafkaException as exc:
        raise KafkaClientError(f"Cannot reach Kafka at {redact(conf).get('bootstrap.servers')}: {exc}",
                               retriable=True) from exc
