"""The executor side of the sink: rows -> one Kafka transaction -> a commit message.

A task of batch N (``exactly_once``) opens a transactional producer on
``{prefix}:{family}-{partition}-{attempt}`` (a stream's family is its run), calls
``init_transactions()`` (a new epoch for every transaction, fencing any zombie of that
id), writes its rows, flushes, checks every
delivery report, and leaves the transaction open ("pre-committed"). Its producer id
and epoch come from librdkafka's statistics (there is no getter) and travel to the
driver in the commit message. A task with no rows opens nothing.
"""

from __future__ import annotations

import json
import threading
from itertools import islice, repeat
from typing import Any, Callable, Iterable

from kafka_eos_ds.errors import ConfigError, KafkaClientError
from kafka_eos_ds.kafka.errors import AuthWatch, producer_error
from kafka_eos_ds.kafka.producer_start import connect, init_transactions
from kafka_eos_ds.kafka.settings import LIBRDKAFKA_LOGGER, client_config
from kafka_eos_ds.kafka_sink import transactional_ids
from kafka_eos_ds.kafka_sink.config import SinkConfig
from kafka_eos_ds.kafka_sink.messages import KafkaCommitMessage
from kafka_eos_ds.twophase.protocol import DoneMark
from kafka_eos_ds.twophase.task import already_decided, run_task
from kafka_eos_ds.twophase.writers import Task

# Small, so the producer id is known by the time the task has flushed; its cost is one
# JSON document every 20 ms per producer, parsed until the id is in it.
_STATS_INTERVAL_MS = 20


class _Delivery:
    """Counts failed delivery reports (only errors are reported: delivery.report.only.error)."""

    def __init__(self) -> None:
        self.errors: list[tuple[Any, str | None]] = []

    def __call__(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append((err, msg.topic() if msg is not None else None))

    def first(self) -> tuple[Any, str | None]:
        """The error that explains the others: when a transactional producer fails (a
        topic it may not write to, say), librdkafka purges its queue and reports the
        purged records too, often before the record that carries the cause."""
        from confluent_kafka import KafkaError

        purged = (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT)
        return next((e for e in self.errors if e[0].code() not in purged), self.errors[0])


class _TxnLog:
    """A task producer's librdkafka log, passed on to Python logging; keeps the line that
    says why the transaction failed (TXNERR). When a transactional producer fails (a topic
    it may not write to, say), its delivery reports only say that the records were purged:
    this line is the cause."""

    def __init__(self) -> None:
        self.failure: str | None = None

    def log(self, level: int, fmt: str, *args: Any) -> None:
        LIBRDKAFKA_LOGGER.log(level, fmt, *args)
        if len(args) == 3 and args[0] == "TXNERR":  # confluent-kafka logs (facility, client name, message)
            self.failure = str(args[2])


class _Stats:
    """Catches the producer id and epoch from librdkafka's statistics callback."""

    def __init__(self) -> None:
        self.pid_epoch: tuple[int, int] | None = None
        self.ready = threading.Event()

    def __call__(self, stats_json: str) -> None:
        if self.ready.is_set():
            return  # parsed once; later documents are not needed
        eos = json.loads(stats_json).get("eos") or {}
        if eos.get("idemp_state") == "Assigned" and eos.get("producer_id", -1) >= 0:
            self.pid_epoch = (int(eos["producer_id"]), int(eos["producer_epoch"]))
            self.ready.set()


def write_partition(config: SinkConfig, task: Task, mark: DoneMark, items: Iterable[Any],
                    read: int | None = None, writers: Callable[..., Any] | None = None) -> KafkaCommitMessage:
    """One task: its rows in one transaction, pre-committed; the message for the driver,
    which carries ``read`` (the commit log's position the planner read) to the commit.
    ``writers`` builds the task's producer (default :class:`_PartitionWriter`; the sink
    hands in its runtime's)."""
    family = task.write.family
    if config.exactly_once and already_decided(mark, task, items):
        return KafkaCommitMessage(task.write, task.partition, task.attempt, 0, family, read=read)
    writer: _PartitionWriter = (writers or _PartitionWriter)(config, task.partition, task.attempt, family)
    records = run_task(writer, items, task)
    return KafkaCommitMessage(task.write, task.partition, task.attempt, records, family, writer.transactional_id,
                              *(writer.pid_epoch or (-1, -1)), read=read)


class _PartitionWriter:
    """One task's producer (a :class:`~kafka_eos_ds.twophase.TaskTransaction`); opened at
    the first row, so empty tasks open no transaction."""

    def __init__(self, config: SinkConfig, partition: int, attempt: int, family: str = "") -> None:
        self.config = config
        self.transactional_id = (transactional_ids.build(config.prefix, partition, attempt, family)
                                 if config.exactly_once and config.prefix is not None else None)
        self.producer: Any = None
        self.delivery = _Delivery()
        self.txn_log = _TxnLog()
        self.stats = _Stats()
        self.records = 0
        self.pid_epoch: tuple[int, int] | None = None

    # -- life cycle ---------------------------------------------------------

    def _open(self) -> None:
        from confluent_kafka import KafkaException, Producer

        self.watch = AuthWatch()  # the producer's error callback: the authentication or TLS error behind a failure
        fixed: dict[str, Any] = {"enable.idempotence": self.config.idempotent, "delivery.report.only.error": True,
                                 "on_delivery": self.delivery, "error_cb": self.watch}
        if self.config.exactly_once:
            fixed.update({"transactional.id": self.transactional_id,
                          "transaction.timeout.ms": self.config.transaction_timeout_ms,
                          "statistics.interval.ms": _STATS_INTERVAL_MS, "stats_cb": self.stats})
        self.conf = {**client_config(self.config.producer, "task_producer", **fixed), "logger": self.txn_log}
        try:
            self.producer = Producer(self.conf)
            if self.config.exactly_once:
                init_transactions(self.producer, self.config.topic or self.config.commit_log_topic)
                self.producer.begin_transaction()
            elif self.config.idempotent:
                # Its producer id is looked up before its first record is sent (producer_start).
                connect(self.producer, self.config.topic)
        except KafkaException as exc:
            raise producer_error(exc.args[0], self.conf, watch=self.watch, client=self.producer) from exc

    def _await_producer_id(self) -> None:
        for _ in range(200):
            if self.stats.ready.is_set():
                self.pid_epoch = self.stats.pid_epoch
                return
            self.producer.poll(0.01)
        raise KafkaClientError(f"librdkafka's statistics did not report the producer id of {self.transactional_id} "
                               "within 2 s of its flush", retriable=True)

    def write_all(self, items: Iterable[Any]) -> int:
        for item in items:
            if hasattr(item, "num_columns"):
                self._write_arrow(item)
            else:
                self._write_rows([item])
        return self.records

    def pre_commit(self) -> None:
        if self.producer is None:
            return
        left = self.producer.flush(max(30.0, self.config.transaction_timeout_ms / 1000 / 2))
        if left:
            raise KafkaClientError(f"{left} record(s) were not acknowledged by Kafka before the flush timed out.",
                                   retriable=True)
        if self.delivery.errors:
            self.producer.poll(0)  # serve the log line that says why, if it is still queued
            err, topic = self.delivery.first()
            raise producer_error(err, self.conf, topic=topic, undelivered=len(self.delivery.errors),
                                 txn_failure=self.txn_log.failure, watch=self.watch, client=self.producer)
        if self.config.exactly_once:
            # Awaited only now, so the statistics interval passes while the task writes.
            self._await_producer_id()
        # The producer object is dropped without ending the transaction: destroying a
        # librdkafka producer leaves it open for the driver to commit.
        self.producer = None

    def abort(self) -> None:
        producer, self.producer = self.producer, None
        if producer is None or not self.config.exactly_once:
            return
        try:
            producer.abort_transaction(10)
        except Exception:  # best effort: the driver's abort() or recovery fences the id anyway
            pass

    # -- producing ----------------------------------------------------------

    def _produce(self, topic: Any, value: Any, key: Any, partition: Any, headers: Any) -> None:
        from confluent_kafka import KafkaException

        if topic is None:
            raise ConfigError("A row has a null 'topic' and the option 'topic' is not set; filter such rows "
                              "out or set the option.")
        part = -1 if partition is None else partition  # -1: the partitioner chooses (negatives refused before)
        while True:
            try:
                if headers:
                    self.producer.produce(topic, value, key, part, headers=headers)
                else:
                    self.producer.produce(topic, value, key, part)
                return
            except BufferError:
                # The local queue is full: wait for room. Short waits: with error-only
                # delivery reports a poll has nothing to return early for, and the queue
                # drains in a few milliseconds.
                self.producer.poll(0.005)
            except KafkaException as exc:
                raise producer_error(exc.args[0], self.conf, topic=topic, watch=self.watch, client=self.producer) \
                    from exc

    def _write_arrow(self, batch: Any) -> None:
        n = batch.num_rows
        if n == 0:
            return
        cols = self.config.columns
        if cols.partition >= 0:
            _check_partitions(batch.column(cols.partition))
        if self.producer is None:
            self._open()

        def column(i: int) -> Any:
            return batch.column(i).to_pylist() if i >= 0 else None

        values, keys, topics, parts = column(cols.value), column(cols.key), column(cols.topic), column(cols.partition)
        headers = _header_lists(batch.column(cols.headers)) if cols.headers >= 0 else None
        fixed_topic = self.config.topic
        produce = self.producer.produce
        # Tight loops over the columns with positional arguments (keyword arguments cost
        # a dict per record); the slow path (_produce) handles a full queue, a null topic
        # and client errors for the one record that raised, which was not queued.
        if keys is None and parts is None and headers is None and fixed_topic is not None:
            for value in values:
                try:
                    produce(fixed_topic, value)
                except Exception:
                    self._produce(fixed_topic, value, None, None, None)
        elif parts is None and headers is None and fixed_topic is not None:
            for value, key in zip(values, keys, strict=True):
                try:
                    produce(fixed_topic, value, key)
                except Exception:
                    self._produce(fixed_topic, value, key, None, None)
        else:
            rows = zip(repeat(fixed_topic) if fixed_topic is not None else topics, values,
                       keys if keys is not None else repeat(None),
                       [-1 if p is None else p for p in parts] if parts is not None else repeat(-1),
                       headers if headers is not None else repeat(None), strict=False)  # repeat() is endless
            for topic, value, key, part, header in rows:
                try:
                    produce(topic, value, key, part, headers=header)
                except Exception:
                    self._produce(topic, value, key, part, header)
        self.records += n
        self.producer.poll(0)

    def _write_rows(self, rows: Iterable[Any]) -> None:
        cols = self.config.columns
        for row in rows:
            partition = _field(row, cols.partition)
            if partition is not None and partition < 0:
                raise _negative_partition(partition)
            if self.producer is None:
                self._open()
            headers = _field(row, cols.headers)
            if headers:
                headers = [(h["key"], _immutable(h["value"])) for h in headers]
            self._produce(self.config.topic or _field(row, cols.topic), _immutable(_field(row, cols.value)),
                          _immutable(_field(row, cols.key)), partition, headers)
            self.records += 1


def _check_partitions(column: Any) -> None:
    """Refuse a negative value in the ``partition`` column, as Spark's built-in sink does
    (its ProducerRecord refuses it): handing it to the partitioner instead would put the
    row somewhere the query never asked for. Checked before the batch's rows are produced."""
    import pyarrow.compute as pc

    lowest = pc.min(column).as_py()
    if lowest is not None and lowest < 0:
        raise _negative_partition(lowest)


def _negative_partition(value: int) -> ConfigError:
    return ConfigError(f"Column 'partition' holds {value} in a row: a partition number is 0 or more, or null to let "
                       "the partitioner choose (by key). Fix the column, e.g. selectExpr(..., 'CASE WHEN partition "
                       ">= 0 THEN partition END AS partition'). The task fails before producing the rows; with "
                       "exactly_once its transaction is aborted and nothing of it becomes visible.")


def _header_lists(column: Any) -> list[Any]:
    """Each row's headers as ``[(key, value), ...]`` (None for null or empty), cut from the
    list column's flattened key and value children instead of a dict per header."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    flat = column.flatten()  # honours slicing, drops the entries of null lists
    pairs = iter(zip(flat.field("key").to_pylist(), flat.field("value").to_pylist(), strict=True))
    return [list(islice(pairs, length)) if length else None
            for length in pc.list_value_length(column).to_pylist()]


def _field(row: Any, index: int) -> Any:
    return row[index] if index >= 0 else None


def _immutable(data: Any) -> Any:
    # Rows (pyspark 4.0's writer path) carry binary columns as bytearray, which the
    # producer refuses; Arrow batches give bytes.
    return bytes(data) if isinstance(data, bytearray) else data
