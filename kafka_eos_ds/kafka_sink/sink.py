"""The Kafka sink's steps, composed into the protocol's writers (:mod:`kafka_eos_ds.twophase.writers`).

:class:`KafkaSink` wires the sink's two ports — :class:`~.decision_log.KafkaDecisionLog`
and :class:`~.participants.KafkaTransactions` — into a
:class:`~kafka_eos_ds.twophase.TwoPhaseCommitter`, which orders the steps:

* ``prepare`` (planner, before the tasks): the topic exists; a stream, or an app write
  (``txnAppId``), finishes what its earlier runs decided and fences what they left open;
* ``write`` (executor): :func:`~.task_writer.write_partition`;
* ``commit``/``abort`` (driver): under the identity the tasks reported.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Iterator, Mapping, Sequence, cast

from pyspark.sql.datasource import WriterCommitMessage
from pyspark.sql.types import StructType

from kafka_eos_ds.errors import ConfigError, TransactionError
from kafka_eos_ds.kafka.driver_session import fingerprint
from kafka_eos_ds.kafka.metadata import cluster_metadata
from kafka_eos_ds.kafka_sink.config import SinkConfig
from kafka_eos_ds.kafka_sink.decision_log import KafkaDecision, KafkaDecisionLog
from kafka_eos_ds.kafka_sink.messages import KafkaCommitMessage, KafkaHandle, KafkaParticipant
from kafka_eos_ds.kafka_sink.participants import (
    KafkaFences,
    KafkaTransactions,
    commit_time_needed_s,
)
from kafka_eos_ds.kafka_sink.runtime import DEFAULT, KafkaRuntime
from kafka_eos_ds.kafka_sink.task_writer import write_partition
from kafka_eos_ds.storage.checkpoint import Checkpoint
from kafka_eos_ds.twophase.committer import TwoPhaseCommitter
from kafka_eos_ds.twophase.identity import Kind, WriteId, WriteSpec
from kafka_eos_ds.twophase.protocol import DONE, Decision, DoneMark
from kafka_eos_ds.twophase.recovery import check_checkpoint
from kafka_eos_ds.twophase.retrying import NOTHING_DECIDED, retrying
from kafka_eos_ds.twophase.writers import Task, TwoPhaseBatchWriter, TwoPhaseStreamWriter

log = logging.getLogger(__name__)

# The committer over the sink's ports: its participants are transactions.
KafkaCommitter = TwoPhaseCommitter[KafkaHandle]


class KafkaSink:
    """One ``format("kafka_eos")`` sink's steps; picklable (it travels to the tasks).

    Parameters
    ----------
    config : SinkConfig
        The checked options.
    runtime : KafkaRuntime
        The process's clock, uuids, thread pool and Kafka clients (:mod:`.runtime`).
    """

    message_type = KafkaCommitMessage

    def __init__(self, config: SinkConfig, runtime: KafkaRuntime = DEFAULT) -> None:
        self.config = config
        self.runtime = runtime
        # The commit log's position once the planner's step was over (None: not read):
        # the tasks hand it to the commit, which refuses the write if its decision writer
        # was claimed from there on (docs/dev/decisions.md, "Every Kafka-sink write's
        # decision is pinned").
        self.read: int | None = None

    @property
    def commit_timeout_s(self) -> float:
        """How long a driver step retries what may be transient (option 'commitTimeoutMs')."""
        return self.config.commit_timeout_s

    # -- planner ------------------------------------------------------------------

    def prepare(self, spec: WriteSpec) -> DoneMark:
        """Check the topic, then recover what the writer's earlier runs left (a stream, an
        app write; other writes recover at their commit, see :mod:`~kafka_eos_ds.twophase.identity`);
        last, read the commit log's position, which the tasks carry to the commit (``read``)."""
        metadata = self._retry(self._metadata, "Could not read the cluster's topics")
        if self.config.topic is not None and self.config.topic not in metadata.topics:
            # A principal without DESCRIBE on a topic does not see it in metadata at all.
            raise ConfigError(f"Topic '{self.config.topic}' (option 'topic') does not exist, or this principal may "
                              "not see it: create it first, or (Kafka ACLs) grant DESCRIBE and WRITE on it.")
        if not self.config.exactly_once:
            return DoneMark()
        if spec.streaming:
            checkpoint = self._checkpoint()
            query = self._stream_query(checkpoint)
            write = WriteId(Kind.STREAM, query or "", -1)
            with self._committer(write, metadata) as committer:
                if checkpoint is not None and query is not None:
                    self._require_decisions(committer, write, checkpoint)
                mark = committer.recover(write, known_query=query is not None)
                self.read = self._position(cast(KafkaDecisionLog, committer.decisions))
                return mark
        planned = spec.planned()
        if planned is not None:
            with self._committer(planned, metadata) as committer:
                mark = committer.recover(planned)
                self.read = self._position(cast(KafkaDecisionLog, committer.decisions))
                return mark
        # A job or a write inside foreachBatch: its writer is known only to its tasks, but
        # the position is the prefix's (all of its writers' records share one partition).
        decisions = self._decision_log()
        try:
            self._retry(lambda: decisions.ensure_topic(metadata), "Could not read the commit-log topic")
            self.read = self._position(decisions)
        finally:
            decisions.close()
        return DoneMark()

    # -- executor -----------------------------------------------------------------

    def write(self, task: Task, mark: DoneMark, items: Iterator[Any]) -> WriterCommitMessage:
        return write_partition(self.config, task, mark, items, self.read, self.runtime.partition_writer)

    # -- driver -------------------------------------------------------------------

    def commit(self, write: WriteId, participants: Sequence[KafkaParticipant | None]) -> None:
        if not self.config.exactly_once:
            return
        progress = self._progress(write)
        with self._committer(write) as committer:
            self._check_pinned(cast(KafkaDecisionLog, committer.decisions), write, participants)
            committer.commit(write, participants, progress)

    def abort(self, write: WriteId | None, participants: Sequence[KafkaParticipant | None],
              spec: WriteSpec) -> None:
        if not self.config.exactly_once:
            return
        # No task reported: the stream's own ids, an app write's (the planner knows its
        # identity: aborted as itself, so that a decision of the app is kept), or the ids
        # the job's tasks used as a job. A write inside foreachBatch without txnAppId is not
        # known here (its run is in the tasks' local properties): the stream's next write
        # fences what its runs left open.
        planned = None if spec.streaming else spec.planned()
        fallback = WriteId(Kind.STREAM, "", -1) if spec.streaming else (
            planned or WriteId(Kind.JOB, spec.job or "", 0, job=spec.job))
        with self._committer(write or fallback) as committer:
            committer.abort(write or planned, participants, fallback)

    # -- steps --------------------------------------------------------------------

    def _position(self, decisions: KafkaDecisionLog) -> int:
        position: int = self._retry(decisions.position, "Could not read the sink's decisions")
        return position

    def _check_pinned(self, decisions: KafkaDecisionLog, write: WriteId,
                      participants: Sequence[KafkaParticipant | None]) -> None:
        """Refuse the write undecided if another driver step claimed its decision writer
        after the write's planner (a driver presumed dead that came back, or a second
        query on the prefix): that step may have observed the write's open transactions
        and be about to abort them. Asked once the writer is fenced (``_committer``): an
        older step's claim committed before that or never will, and a newer step that
        claims later fences this one first, whose decision then fails. A claim committed
        before the planner's position observed nothing of the write: its tasks began their
        transactions after it."""
        # Every task of the write got the same position; the lowest is the safe one.
        read = min((p.handle.read for p in participants if p is not None and p.handle.read is not None),
                   default=None)
        if read is None:  # tasks of an older version
            return
        if self._retry(lambda: decisions.claimed_since(read), "Could not read the sink's decisions"):
            raise TransactionError(
                f"Batch {write.version} of {write.app} was not committed: another driver step of this sink claimed "
                f"its commit-log writer since the batch was planned (a driver presumed dead that came back, or a "
                f"second query with the 'transactionalIdPrefix' '{self.config.prefix}'), and may abort the batch's "
                "transactions. Nothing of the batch is visible; restarting the query (or running the write again) "
                "runs it again (docs/troubleshooting.md, \"Batch N was not committed: another driver claimed its "
                "commit-log writer\").", retriable=True)

    def _checkpoint(self) -> Checkpoint | None:
        """The query's checkpoint; None (said once, in a warning) where its scheme cannot be
        read from Python: the checks that need it are then off (a second query on the
        prefix, a lost commit log)."""
        try:
            return Checkpoint.at(self.config.checkpoint, self.config.storage)
        except ConfigError as exc:
            log.warning("%s The sink cannot tell this query's decisions from another query's on the same "
                        "'transactionalIdPrefix', nor notice a lost commit log.", exc)
            return None

    def _stream_query(self, checkpoint: Checkpoint | None) -> str | None:
        """The streaming query's id from its checkpoint (None where it cannot be read)."""
        return self._retry(checkpoint.query_id, "Could not read the checkpoint") if checkpoint is not None else None

    def _require_decisions(self, committer: KafkaCommitter, write: WriteId, checkpoint: Checkpoint) -> None:
        """Fail when the checkpoint has committed batches but the commit log has no decision
        of this query: the log was deleted or re-created (or the options naming it
        changed), and recovery would take decided batches for undecided ones and write
        them again. A checkpoint that never had decisions (another sink wrote its batches)
        looks the same: ``adoptCheckpoint`` says so, and it is adopted instead. And fail when
        the checkpoint plans the query's latest decided batch other than it was written
        (:func:`~kafka_eos_ds.twophase.recovery.check_checkpoint`)."""
        committed = self._retry(lambda: checkpoint.latest_batch("commits"), "Could not read the checkpoint")
        own = self._retry(lambda: committer.decisions.latest(write.key), "Could not read the sink's decisions")
        check_checkpoint(own, committed, lambda: self._retry(checkpoint.latest_batch, "Could not read the checkpoint"),
                         lambda batch: self._retry(lambda: checkpoint.end_offsets(batch),
                                                   "Could not read the checkpoint"))
        if committed < 0 or own is not None:
            return
        if self.config.adopt_checkpoint:
            self._adopt(committer, write, checkpoint, committed)
            return
        raise TransactionError(
            f"The commit-log topic '{self.config.commit_log_topic}' (option 'commitLogTopic') holds no decision of "
            f"query {write.app} on the sink '{self.config.prefix}' (option 'transactionalIdPrefix'), but the "
            f"checkpoint {checkpoint.location} has committed batches up to {committed}. Nothing is written. If "
            "another sink wrote them (format('kafka'), or deliveryGuarantee 'at_least_once'), set "
            ".option('adoptCheckpoint', 'true') to go on exactly-once from the checkpoint's offsets. Otherwise the "
            "topic was deleted or re-created, or one of those options changed, and recovery cannot tell which of "
            "the last batch's transactions were decided. See docs/troubleshooting.md, \"The commit log lost its "
            "decisions\".", retriable=False)

    def _adopt(self, committer: KafkaCommitter, write: WriteId, checkpoint: Checkpoint, committed: int) -> None:
        """Record the checkpoint's latest committed batch done, before any task writes: the
        next batch is then this query's first decision (docs/dev/decisions.md, "Adopting a
        checkpoint"). Refused where the sink sees that an exactly-once writer was here: a
        stream's decision on the prefix, or transactional ids of it that the coordinators
        still know (format("kafka") and at_least_once open none)."""
        cfg = self.config
        other = self._retry(lambda: committer.decisions.latest_of(Kind.STREAM.value),
                            "Could not read the sink's decisions")
        if other is not None:
            raise TransactionError(
                f"Option 'adoptCheckpoint': query {other.query_id} decided batch {other.batch_id} with the "
                f"'transactionalIdPrefix' '{cfg.prefix}'; a checkpoint is adopted only on a prefix no exactly-once "
                "stream has written with. Nothing is written. Give this query a 'transactionalIdPrefix' of its own.",
                retriable=False)
        transactions = cast(KafkaTransactions, committer.participants)
        known = self._retry(lambda: transactions.known_ids(write), "Could not list the sink's transactions")
        if known:
            raise TransactionError(
                f"Option 'adoptCheckpoint': the transaction coordinators know {len(known)} transactional id(s) of "
                f"'transactionalIdPrefix' '{cfg.prefix}' ({', '.join(known[:3])}), which only an exactly-once "
                f"writer opens: the checkpoint {checkpoint.location} was written exactly-once, and the commit log "
                "lost its decisions. Adopting it would take its last batch for undecided and write it again. "
                "Nothing is written. See docs/troubleshooting.md, \"The commit log lost its decisions\".",
                retriable=False)
        log.warning("adopting checkpoint %s: its batches up to %s (written by another sink) are recorded done; "
                    "query %s writes exactly once from batch %s on", checkpoint.location, committed, write.app,
                    committed + 1)
        adopted: KafkaDecision = Decision(write.app, committed, DONE)
        self._retry(lambda: committer.decisions.write(write.key, adopted), "Could not record the adopted checkpoint")

    @contextlib.contextmanager
    def _committer(self, write: WriteId, metadata: Any = None) -> Iterator[KafkaCommitter]:
        cfg, rt = self.config, self.runtime
        prefix = cfg.prefix or ""
        # The coordinator client is the process's, kept from its earlier steps (closed if
        # this step raises); the decision log is this step's own, and its writer is fenced
        # anew before any read (docs/dev/decisions.md, "One coordinator client per driver
        # process").
        with rt.sessions.session(cfg.producer, lambda conf: rt.coordinator(conf, clock=rt.clock, sleep=rt.sleep),
                                 lambda build: self._retry(build, "Could not reach the coordinator"),
                                 on_reuse=lambda kept: kept.refresh(), kind=rt.coordinator) as coordinator:
            decisions = self._decision_log(write.writer)
            try:
                # The commit-log topic's partitions, from a fresh read of the cluster's topics
                # (the planner's, or one on the kept metadata client).
                if metadata is None:
                    metadata = self._retry(self._metadata, "Could not read the cluster's topics")
                self._retry(lambda: decisions.ensure_topic(metadata), "Could not read the commit-log topic")
                # Before any read: a stalled write of an earlier driver cannot land after it.
                self._retry(decisions.fence_writers, "Could not start the commit-log writer")
                transactions = KafkaTransactions(coordinator, prefix, cfg.transaction_timeout_ms, wall=rt.wall)
                yield TwoPhaseCommitter(decisions, transactions, progress_store=transactions,
                                        fences=KafkaFences(transactions, decisions),
                                        commit_timeout_s=self.commit_timeout_s,
                                        time_needed_s=commit_time_needed_s(self.commit_timeout_s),
                                        sleep=rt.sleep, clock=rt.clock, executor=rt.executor)
            finally:
                decisions.close()

    def _decision_log(self, writer: str = "") -> KafkaDecisionLog:
        """One step's commit log, of ``writer`` ('' : the prefix's, for its position only)."""
        cfg, rt = self.config, self.runtime
        log: KafkaDecisionLog = rt.decision_log(cfg.producer, cfg.commit_log_topic, cfg.prefix or "", writer,
                                                rt.log_clients(), sessions=rt.sessions, clock=rt.clock,
                                                wall=rt.wall, sleep=rt.sleep)
        return log

    def _metadata(self) -> Any:
        return cluster_metadata(self.config.producer, sessions=self.runtime.sessions,
                                client=self.runtime.metadata_client)

    def _retry(self, call: Any, failure: str) -> Any:
        return retrying(call, failure, self.commit_timeout_s, then=NOTHING_DECIDED, sleep=self.runtime.sleep,
                        clock=self.runtime.clock)

    def _progress(self, write: WriteId) -> dict[str, Any] | None:
        group = self.config.source_group_id
        if group is None or write.kind is not Kind.STREAM:
            return None
        checkpoint = Checkpoint.at(self.config.checkpoint, self.config.storage, option="sourceGroupId")
        progress: dict[str, Any] = self._retry(lambda: checkpoint.progress(group, write.version),
                                               "Could not read the checkpoint")
        return progress


def sink_of(schema: StructType, options: Mapping[str, Any], runtime: KafkaRuntime = DEFAULT) -> KafkaSink:
    """The sink of ``options``, checked once per process (the runtime's ``checked``): Spark
    builds the writer again in every driver step."""
    key = fingerprint({"schema": schema.json(), **{f"option.{k}".lower(): v for k, v in dict(options).items()}})

    def check() -> SinkConfig:
        return SinkConfig.from_options(options, schema)  # a refusal is never kept: it is raised each time

    return KafkaSink(runtime.checked.get(key, check), runtime=runtime)


def stream_writer(schema: StructType, options: Mapping[str, Any],
                  runtime: KafkaRuntime = DEFAULT) -> TwoPhaseStreamWriter:
    """``df.writeStream.format("kafka_eos")``: exactly-once Kafka sink for streaming queries.

    Each task writes its rows in a Kafka transaction and pre-commits it; the driver makes
    the commit decision durable in the commit-log topic, then commits every transaction
    of the batch. Options and columns: docs/sink.md.
    """
    return TwoPhaseStreamWriter(sink_of(schema, options, runtime))


def batch_writer(schema: StructType, options: Mapping[str, Any], overwrite: bool,
                 runtime: KafkaRuntime = DEFAULT) -> TwoPhaseBatchWriter:
    """``df.write.format("kafka_eos")``: all task transactions commit at job commit; inside
    ``foreachBatch`` each write is committed under the stream's micro-batch, and a re-run
    of the micro-batch after a restart adds nothing (docs/sink.md, "foreachBatch")."""
    if overwrite:
        # As the built-in sink: Kafka topics are appended to, never replaced.
        raise ConfigError("Save mode 'overwrite' is not supported by kafka_eos (a Kafka topic cannot be "
                          "replaced); use mode('append').")
    sink = sink_of(schema, options, runtime)
    if sink.config.source_group_id is not None:
        raise ConfigError("Option 'sourceGroupId' applies to streaming queries (it commits each micro-batch's "
                          "source offsets); remove it for df.write.")
    if sink.config.adopt_checkpoint:
        raise ConfigError("Option 'adoptCheckpoint' applies to streaming queries (it takes over a query's "
                          "checkpoint); remove it for df.write.")
    return TwoPhaseBatchWriter(sink, options)

